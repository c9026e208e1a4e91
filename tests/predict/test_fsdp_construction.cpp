// FSDP1's construction (sim/parallel/fsdp.cpp): the transient tensors FullyShardedDataParallel.__init__ makes
// while it wraps a model that sits on the CPU (device_id given), and the compute-stream segments they leave
// in the caching allocator for training to start from. Expectations derived by hand from
// torch/distributed/fsdp/_init_utils.py (_init_param_handle_from_module), _flat_param.py (flatten_tensors,
// shard, _get_shard), c10d/comm.cpp (broadcast_coalesced) and the allocator's rounding (spec: kSmallSize,
// kMinLargeAlloc, kLargeBuffer, kRoundLarge).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "sim/predict/step_prediction.h"
#include "sim/replay/trace_replay.h"
#include "traces/snapshot.h"

using namespace vramsim;

namespace {

constexpr std::int64_t kMiB2 = 2'097'152;

RequestArgs over_ranks(const std::string& model, int ranks) {
  RequestArgs a;
  a.model = model;
  a.capacity = "1TiB";  // never the limit
  a.batch = 1;
  a.seq = 128;
  a.precision = "bf16";
  a.optimizer = "adamw";
  a.master_weights = "none";  // no fp32 copies made in the set-up
  a.steps = 1;
  a.world_size = ranks;
  a.fsdp = "full-shard";
  return a;
}

// The trace cut where the first step begins: what the model's set-up (phase "setup") did.
Snapshot setup_only(const Snapshot& trace) {
  Snapshot out = trace;
  std::vector<TraceEvent>& ev = out.device_traces.at(0).events;
  const auto first_step = std::find_if(ev.begin(), ev.end(), [&](const TraceEvent& e) {
    return e.phase_tag != kNoTag && out.strings.at(e.phase_tag) != "setup";
  });
  ev.erase(first_step, ev.end());
  return out;
}

// The large-pool segments (over the 2 MiB small-pool segments) on the compute stream, largest first.
std::vector<std::int64_t> large_compute_segments(const Snapshot& trace) {
  const ReplayResult r = replay_snapshot(trace, ReplayOptions{});
  std::vector<std::int64_t> out;
  for (const SnapshotSegment& s : r.final_segments) {
    if (s.stream == 0 && static_cast<std::int64_t>(s.total_size_bytes) > kMiB2) {
      out.push_back(static_cast<std::int64_t>(s.total_size_bytes));
    }
  }
  std::sort(out.rbegin(), out.rend());
  return out;
}

// The sizes of the allocations of the ops whose names start with `prefix`, in order.
std::vector<std::int64_t> allocs_of_ops(const Snapshot& trace, const std::string& prefix) {
  std::vector<std::int64_t> out;
  for (const TraceEvent& e : trace.device_traces.at(0).events) {
    const std::string op = e.op_tag == kNoTag ? "" : trace.strings.at(e.op_tag);
    if (e.action == TraceAction::kAlloc && op.starts_with(prefix)) {
      out.push_back(static_cast<std::int64_t>(e.size_bytes));
    }
  }
  return out;
}

}  // namespace

TEST_CASE("FSDP1 construction: the segments wrapping TinyLlama over 8 ranks leaves on the compute stream",
          "[quick][predict]") {
  // TinyLlama-1.1B in bf16 (hidden 2048, 22 layers, 4 KV heads of 64, MLP 5632, vocab 32000): per layer
  // q, o 8 MiB each (over 1 MiB, under kMinLargeAlloc 10 MiB: a 20 MiB kLargeBuffer segment), k, v 1 MiB each
  // (the small pool), gate, up, down 22 MiB each (a segment of their size), two 4 KiB norms (small pool);
  // the FlatParameter 88,088,576 B (a segment of 43 x 2 MiB), its shard over 8 ranks 11,011,072 B
  // (10.5 MiB: a segment of 6 x 2 MiB).
  // Layer 0: q takes a new 20 MiB segment, o the rest of it; gate, up, down new 22 MiB segments; the flat
  // parameter a new 86 MiB segment; the shard finds no free block of 10.5 MiB: a new 12 MiB segment. Then
  // the flat parameter and the moved parameters are freed. Layers 1..21: q and o split the free 20 MiB
  // segment again, gate/up/down fit their 22 MiB blocks, the flat parameter the 86 MiB one, and the shard
  // again finds no 10.5 MiB block (free: 4 MiB, 1.99 MiB, 1.5 MiB tails): one new 12 MiB segment per layer.
  // Root (embeddings and lm_head 131,072,000 B each, norm 4 KiB): embeddings and lm_head find no free
  // 125 MiB block: two new 126 MiB segments; the flat parameter (262,148,096 B) a new 252 MiB segment; its
  // shard (32,768,512 B) splits the free 86 MiB block.
  for (const bool sync : {false, true}) {
    INFO("sync_module_states " << sync);
    // With sync_module_states each unit is one broadcast bucket (under 250 MiB but the root, which closes
    // at lm_head with 250.004 MiB), flattened into a block the unit's FlatParameter then takes over: the
    // same segments.
    RequestArgs a = over_ranks("tinyllama-1.1b", 8);
    a.fsdp_sync_module_states = sync;
    Snapshot trace;
    predict(make_request(a), &trace);
    std::vector<std::int64_t> expected{126 * kMiB2, 63 * kMiB2, 63 * kMiB2, 43 * kMiB2,
                                       11 * kMiB2,  11 * kMiB2, 11 * kMiB2, 10 * kMiB2};
    expected.insert(expected.end(), 22, 6 * kMiB2);
    CHECK(large_compute_segments(setup_only(trace)) == expected);
  }
}

TEST_CASE("FSDP1 construction: sync_module_states broadcasts in 250 MiB buckets, one tensor without a copy",
          "[quick][predict]") {
  // Llama-2-7B's root over 2 ranks in bf16: embed_tokens 32000 x 4096 = 262,144,000 B = 250 MiB exactly,
  // the norm 8,192 B, lm_head 262,144,000 B. compute_bucket_assignment_by_size closes a bucket once it holds
  // >= 250 MiB: [embed_tokens] alone (flatten_dense_tensors returns a view of a single tensor: no
  // allocation), then [norm, lm_head], flattened into 262,152,192 B. Then the FlatParameter (524,296,192 B)
  // and the rank's shard (262,148,096 B).
  RequestArgs a = over_ranks("llama-2-7b", 2);
  a.fsdp_sync_module_states = true;
  Snapshot trace;
  predict(make_request(a), &trace);
  const std::vector<std::int64_t> root = allocs_of_ops(trace, "root.fsdp.init.");
  CHECK(root ==
        std::vector<std::int64_t>{262'144'000, 8'192, 262'144'000, 262'152'192, 524'296'192, 262'148'096});
  a.fsdp_sync_module_states = false;  // no broadcast: moved, flattened, sharded
  predict(make_request(a), &trace);
  CHECK(allocs_of_ops(trace, "root.fsdp.init.") ==
        std::vector<std::int64_t>{262'144'000, 8'192, 262'144'000, 524'296'192, 262'148'096});
}

TEST_CASE("FSDP1 options: --fsdp-sync-module-states is FSDP1's", "[quick][predict]") {
  RequestArgs a = over_ranks("tinyllama-1.1b", 8);
  a.fsdp2 = true;
  a.fsdp_sync_module_states = true;
  CHECK_THROWS_WITH(make_request(a), "--fsdp-sync-module-states: FSDP1's option (--fsdp without --fsdp2)");
}

TEST_CASE("checkpoint: a first layer over frozen embeddings is checkpointed when it has trainable adapters",
          "[quick][predict]") {
  // PEFT LoRA freezes the embeddings, so the first decoder layer's input does not require grad, but its
  // adapters do. torch.utils.checkpoint still packs what the layer saves and recomputes it in backward
  // (non-reentrant: _checkpoint_without_reentrant_generator; reentrant with enable_input_require_grads, as
  // fsdp_qlora's train.py runs it), so at the end of the forward nothing the layer's ops saved is alive. What
  // is left of layer 0 is its output, which layer 1's checkpoint keeps as its input:
  // 1 x 128 x 2048 bf16 = 524,288 B (TinyLlama, one GPU). (Layer 0's own input, the embeddings' output, is
  // the embedding op's tensor, not layer 0's.)
  RequestArgs a = over_ranks("tinyllama-1.1b", 1);
  a.fsdp.clear();
  a.lora_rank = 8;
  a.checkpointing = "full";
  Snapshot trace;
  predict(make_request(a), &trace);
  const std::vector<TraceEvent>& ev = trace.device_traces.at(0).events;
  std::map<Bytes, std::int64_t> live;  // address -> size of layer 0's activations alive
  for (const TraceEvent& e : ev) {
    const std::string phase = e.phase_tag == kNoTag ? "" : trace.strings.at(e.phase_tag);
    if (phase != "setup" && phase != "forward") {
      break;  // the forward has ended
    }
    const bool act = e.category_tag != kNoTag && trace.strings.at(e.category_tag) == "activation";
    if (e.action == TraceAction::kAlloc && act && e.layer == 0) {
      live[e.addr] = static_cast<std::int64_t>(e.size_bytes);
    } else if (e.action == TraceAction::kFreeRequested) {
      live.erase(e.addr);
    }
  }
  std::int64_t bytes = 0;
  for (const auto& [addr, size] : live) {
    bytes += size;
  }
  CHECK(bytes == 524'288);
}
