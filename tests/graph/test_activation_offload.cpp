// --offload activations: the forward under torch.autograd.graph.save_on_cpu(pin_memory=True)
// (torch/autograd/graph.py): pack_to_cpu copies every saved tensor into pinned host memory, so the GPU keeps
// none; unpack_from_cpu copies each back (tensor.to(device)) when its backward node runs.
#include <catch2/catch.hpp>

#include <string>

#include "graph_test_util.h"
#include "sim/core/error.h"
#include "sim/graph/eager_tape.h"
#include "sim/graph/tensor_lifetime.h"
#include "sim/models/transformer_builder.h"

using namespace vramsim;

namespace {

constexpr std::int64_t kH = 256, kA = 4, kS = 128, kB = 2;

ModelConfig gpt() { return test::megatron_gpt(kH, kA, kS); }

TrainingOptions options(bool offload) {
  TrainingOptions o = test::megatron_options(kS, kB);
  o.steps = 1;
  o.offload_activations = offload;
  return o;
}

// Bytes the backward op `name` brings back from the host (its activation-category outputs).
Bytes unpacked_by(const OpGraph& g, const std::string& name) {
  Bytes total = 0;
  for (const Tensor& t : g.tensors()) {
    if (t.category == TensorCategory::kActivation && g.op(t.producer).name == name) {
      total += t.size_bytes;
    }
  }
  return total;
}

}  // namespace

TEST_CASE("save_on_cpu: no saved tensor stays on the GPU, a node's come back while it runs",
          "[quick][graph]") {
  // Without offload a layer saves the paper's s*b*h*34 + 5*a*s^2*b bytes (test_korthikanti.cpp).
  CHECK(saved_activation_bytes(build_training_steps(gpt(), options(false)), 1, 0) ==
        kS * kB * kH * 34 + 5 * kA * kS * kS * kB);
  const OpGraph g = build_training_steps(gpt(), options(true));
  CHECK(saved_activation_bytes(g, 1, 0) == 0);
  CHECK(saved_activation_bytes(g, 1, 1) == 0);
  // The MLP's first linear (addmm) saved its input, ln_2's bf16 output (b, s, h), and its weight (h, 4h) in
  // bf16: both come back for its backward, parameters included (the hook sees every saved tensor).
  CHECK(unpacked_by(g, "layers.1.mlp.c_fc.backward") ==
        static_cast<Bytes>(2 * kB * kS * kH + 2 * kH * 4 * kH));
  // GELU saved its input, c_fc's output (b, s, 4h) in bf16.
  CHECK(unpacked_by(g, "layers.1.mlp.gelu.backward") == static_cast<Bytes>(2 * kB * kS * 4 * kH));
}

TEST_CASE("save_on_cpu around checkpointed layers: each layer's input goes to the host and comes back once",
          "[quick][graph]") {
  // torch.utils.checkpoint saves a layer's tensor inputs with _NoopSaveInputs.save_for_backward before it
  // enters its own _checkpoint_hook (torch/utils/checkpoint.py, _checkpoint_without_reentrant_generator), so
  // the outer save_on_cpu hook packs them; inside the layer nothing is saved. Full recomputation keeps
  // 2*s*b*h bytes per layer (Korthikanti et al.: the layer's bf16 input), which now go to the host.
  TrainingOptions ac = options(false);
  ac.checkpointing = Checkpointing::kFull;
  REQUIRE(saved_activation_bytes(build_training_steps(gpt(), ac), 1, 1) == 2 * kS * kB * kH);
  TrainingOptions both = options(true);
  both.checkpointing = Checkpointing::kFull;
  REQUIRE_NOTHROW(validate(both));
  const OpGraph g = build_training_steps(gpt(), both);
  CHECK(saved_activation_bytes(g, 1, 0) == 0);
  CHECK(saved_activation_bytes(g, 1, 1) == 0);
  // The checkpoint's backward copies the input back before it replays the layer: one (s, b, h) bf16 tensor.
  CHECK(unpacked_by(g, "layers.1.checkpoint.backward") == static_cast<Bytes>(2 * kB * kS * kH));
  CHECK(unpacked_by(g, "layers.0.checkpoint.backward") == static_cast<Bytes>(2 * kB * kS * kH));
  // The replayed layer saves on the GPU as usual (the hooks cover the forward only): its MLP's c_fc brings
  // nothing back from the host.
  CHECK(unpacked_by(g, "layers.1.mlp.c_fc.backward") == 0);
  // The host holds both layers' inputs at the end of the forward, with the embeddings' and head's saves.
  CHECK(g.host_memory.saved_activations >= static_cast<Bytes>(2 * 2 * kB * kS * kH));
}

TEST_CASE(
    "torchtune OffloadActivations around checkpointed layers: a far layer's input comes back on the side "
    "stream",
    "[quick][graph]") {
  TrainingOptions o = options(true);
  o.activation_offload_torchtune = true;
  o.checkpointing = Checkpointing::kFull;
  const OpGraph g = build_training_steps(test::megatron_gpt(kH, kA, kS, /*layers=*/8), o);
  CHECK(saved_activation_bytes(g, 1, 0) == 0);
  // Layer 0's input, packed before the seven other layers' inputs, left the forward stash (5 saves deep)
  // long before backward: it is copied back into a new (s, b, h) bf16 tensor on the offload stream.
  CHECK(unpacked_by(g, "layers.0.checkpoint.unpack_from_cpu") == static_cast<Bytes>(2 * kB * kS * kH));
}

// torch.compile and saved-tensor hooks compose as in PyTorch: AOTAutograd's CompiledFunction saves what the
// partitioner chose with ctx.save_for_backward after the compiled forward ran, so the ambient hooks pack
// those tensors, and its backward unpacks them all before the compiled backward runs (pytorch/pytorch#150032:
// "At the moment autograd saved tensors hooks are run in eager after compiled forward. They are executed at
// the same time for all saved tensors."). With full checkpointing inside each compiled layer the graph saves
// the layer's input and its weights: torchtune's hook offloads the input and keeps the nn.Parameters.
TEST_CASE(
    "torchtune OffloadActivations around compiled checkpointed layers: the layer input goes to the host",
    "[quick][graph]") {
  TrainingOptions o = options(true);
  o.activation_offload_torchtune = true;
  o.checkpointing = Checkpointing::kFull;
  o.compile = CompileMode::kDefault;
  o.compile_scope = CompileScope::kLayer;
  REQUIRE_NOTHROW(validate(o));
  const OpGraph g = build_training_steps(test::megatron_gpt(kH, kA, kS, /*layers=*/8), o);
  // Layer 0's input left the forward stash long before backward: the compiled layer's backward copies it back
  // (one (s, b, h) bf16 tensor) before its graph runs; its weights were never packed.
  CHECK(unpacked_by(g, "layers.0.compiled.unpack_from_cpu") == static_cast<Bytes>(2 * kB * kS * kH));
  CHECK(g.host_memory.saved_activations >= static_cast<Bytes>(8 * 2 * kB * kS * kH));
  // Without the hooks the compiled layers keep their inputs on the GPU and nothing is unpacked.
  o.offload_activations = false;
  o.activation_offload_torchtune = false;
  const OpGraph kept = build_training_steps(test::megatron_gpt(kH, kA, kS, /*layers=*/8), o);
  CHECK(unpacked_by(kept, "layers.0.compiled.unpack_from_cpu") == 0);
  CHECK(kept.host_memory.total() == 0);
}

TEST_CASE("save_on_cpu: pinned host blocks as CachingHostAllocator rounds and reuses them",
          "[quick][graph]") {
  // CachingHostAllocator::allocate rounds every request to the next power of two and serves it from a free
  // block of that size first: 3000 -> 4096, 5000 -> 8192; after 3000 is freed, 4000 reuses its 4096 block.
  PinnedHostUsage u;
  u.allocate(3000);
  u.allocate(5000);
  u.free(3000);
  u.allocate(4000);
  CHECK(u.live_bytes == 9000);
  CHECK(u.peak_bytes == 9000);
  CHECK(u.reserved_bytes == 4096 + 8192);
  u.allocate(4096);  // a second 4096-byte block: the first is in use
  CHECK(u.reserved_bytes == 2 * 4096 + 8192);
}

TEST_CASE("save_on_cpu: every packed tensor is on the host at the end of the forward, and comes back once",
          "[quick][graph]") {
  const OpGraph g = build_training_steps(gpt(), options(true));
  // Everything the backward unpacks was packed, and the host held all of it at once (the backward starts
  // after the whole forward and loss): the host peak equals the bytes brought back.
  Bytes unpacked = 0;
  for (const Tensor& t : g.tensors()) {
    if (t.name.size() > 9 && t.name.ends_with(".unpacked")) {
      unpacked += t.size_bytes;
    }
  }
  CHECK(unpacked > 0);
  CHECK(g.host_memory.saved_activations == unpacked);
  CHECK(g.host_memory.saved_activations_pinned >= unpacked);
  CHECK(g.host_memory.model_states() == 0);
  // Without offload nothing is packed.
  CHECK(build_training_steps(gpt(), options(false)).host_memory.total() == 0);
}

TEST_CASE(
    "torchtune OffloadActivations: parameters stay, the last saves are used from the stash, copies on a "
    "side stream",
    "[quick][graph]") {
  // torchtune/training/_activation_offloading.py with use_streams=True, around the model's forward (bf16
  // weights: the saved weights are nn.Parameters, which it never offloads).
  TrainingOptions o = options(true);
  o.activation_offload_torchtune = true;
  const OpGraph g = build_training_steps(gpt(), o);
  // Layer 0's MLP, far from the end of the forward: c_fc brings back its input only, ln_2's bf16 output
  // (b, s, h); its weight (h, 4h) stayed on the GPU. c_proj brings back its input, GELU's bf16 output.
  CHECK(unpacked_by(g, "layers.0.mlp.c_fc.unpack_from_cpu") == static_cast<Bytes>(2 * kB * kS * kH));
  CHECK(unpacked_by(g, "layers.0.mlp.c_proj.unpack_from_cpu") == static_cast<Bytes>(2 * kB * kS * 4 * kH));
  // The first node backward reaches that unpacks is the last layer's residual dropout: its mask, the
  // forward's last offloaded save, is still in the forward stash and used as it is. That node's hook then
  // drops the whole stash, so from the next node on everything comes back from the host: the same layer's
  // c_proj, whose input was saved two saves earlier, copies it back.
  std::string first;
  for (OpId id = 0; id < static_cast<OpId>(g.op_count()) && first.empty(); ++id) {
    if (g.op(id).name.ends_with(".unpack_from_cpu")) {
      first = g.op(id).name;
    }
  }
  CHECK(first == "layers.1.mlp.dropout.unpack_from_cpu");
  CHECK(unpacked_by(g, first) == 0);
  CHECK(unpacked_by(g, "layers.1.mlp.c_proj.unpack_from_cpu") == static_cast<Bytes>(2 * kB * kS * 4 * kH));
  // The copies back run on the offload stream (its own pool in the caching allocator).
  bool found = false;
  for (OpId id = 0; id < static_cast<OpId>(g.op_count()); ++id) {
    if (g.op(id).name == "layers.0.mlp.c_fc.unpack_from_cpu") {
      CHECK(g.op(id).stream == EagerTape::kOffloadStream);
      found = true;
    }
  }
  CHECK(found);
  // The host holds less than save_on_cpu's: no parameter is packed.
  const OpGraph all = build_training_steps(gpt(), options(true));
  CHECK(g.host_memory.saved_activations < all.host_memory.saved_activations);
  CHECK(g.host_memory.saved_activations > 0);
}
