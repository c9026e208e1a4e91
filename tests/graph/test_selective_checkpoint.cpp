// Selective activation checkpointing with torchtitan's op-level policy (--checkpointing selective-op),
// checked against what the policy says (torchtitan/parallelisms/parallelize_llama.py, March 2024:
// no_recompute_list = {aten.mm, aten._scaled_dot_product_efficient_attention,
// aten._scaled_dot_product_flash_attention, _c10d_functional.reduce_scatter_tensor}, "Saves output of all
// compute ops, except every second mm") and what torch.utils.checkpoint does with it (the forward caches the
// saved ops' outputs; the recompute takes them instead of running the op).
#include <catch2/catch.hpp>

#include "graph_test_util.h"
#include "sim/training/selective_checkpoint.h"
#include "sim/models/transformer_builder.h"

using namespace vramsim;

namespace {

int count_named(const OpGraph& g, const std::string& name) {
  int n = 0;
  for (const Tensor& t : g.tensors()) {
    n += t.name == name ? 1 : 0;
  }
  return n;
}

}  // namespace

TEST_CASE("sac: torchtitan's op policy saves odd mms, fused attention and reduce-scatter", "[quick][graph]") {
  const SelectiveCheckpointPolicy& p = torchtitan_op_sac_policy();
  CHECK(p.must_save("mm", 1));
  CHECK_FALSE(p.must_save("mm", 2));
  CHECK(p.must_save("mm", 3));
  CHECK_FALSE(p.must_save("mm", 4));
  CHECK(p.must_save("_scaled_dot_product_flash_attention", 1));
  CHECK(p.must_save("_scaled_dot_product_efficient_attention", 2));
  CHECK(p.must_save("reduce_scatter_tensor", 2));
  CHECK_FALSE(p.must_save("addmm", 1));  // not in the list: a linear with a bias is recomputed
  CHECK_FALSE(p.must_save("bmm", 1));
  CHECK_FALSE(p.must_save("_softmax", 1));
  CHECK(selective_checkpoint_policy(Checkpointing::kSelectiveOp) == &p);
  CHECK(selective_checkpoint_policy(Checkpointing::kFull) == nullptr);
  CHECK(parse_checkpointing("selective-op") == Checkpointing::kSelectiveOp);
}

TEST_CASE("sac: a Llama layer keeps its input and the outputs of q, v, gate and down projections",
          "[quick][graph]") {
  TrainingOptions o = test::small_options();
  o.steps = 1;
  o.attention = AttentionKind::kEager;  // no fused kernel: only the mm outputs are cached
  const ModelConfig m = test::tiny_model("llama-2-7b");
  // The layer's mms in the order LlamaDecoderLayer runs them: q_proj (1st, saved), k_proj (2nd), v_proj
  // (3rd, saved), o_proj (4th), gate_proj (5th, saved), up_proj (6th), down_proj (7th, saved). Per token, in
  // fp32: the checkpoint's input d, q d, v n_kv_heads*head_dim, gate d_ff, down d.
  const std::int64_t tokens = o.batch * o.seq;
  const std::int64_t per_token = m.d_model + m.d_model + m.n_kv_heads * m.head_dim + m.d_ff + m.d_model;
  o.checkpointing = Checkpointing::kSelectiveOp;
  const OpGraph sac = build_training_steps(m, o);
  CHECK(saved_activation_bytes(sac, 1, 1) == static_cast<Bytes>(tokens * per_token * 4));
  // Full checkpointing keeps the input only (test_transformer_builder.cpp).
  o.checkpointing = Checkpointing::kFull;
  const OpGraph full = build_training_steps(m, o);
  CHECK(saved_activation_bytes(full, 1, 1) == static_cast<Bytes>(tokens * m.d_model * 4));

  // The recompute runs the unsaved projections again and takes the saved ones from the cache: full
  // checkpointing allocates every projection twice (forward and recompute), selective-op the saved ones once.
  for (const char* proj : {"q_proj", "v_proj", "gate_proj", "down_proj"}) {
    const std::string name =
        std::string("layers.1.") + (proj[0] == 'q' || proj[0] == 'v' ? "attn." : "mlp.") + proj;
    INFO(name);
    CHECK(count_named(full, name) == 2);
    CHECK(count_named(sac, name) == 1);
  }
  for (const char* name : {"layers.1.attn.k_proj", "layers.1.attn.o_proj", "layers.1.mlp.up_proj"}) {
    INFO(name);
    CHECK(count_named(full, name) == 2);
    CHECK(count_named(sac, name) == 2);
  }
  test::check_schedule_invariants(sac, build_allocation_schedule(sac));
}

TEST_CASE("sac: flash attention's output and logsumexp are cached", "[quick][graph]") {
  TrainingOptions o = test::small_options();
  o.steps = 1;
  o.precision = Precision::kAmpBf16;
  o.attention = AttentionKind::kSdpaFlash;
  const ModelConfig m = test::tiny_model("llama-2-7b");
  const auto saved = [&](Checkpointing c) {
    o.checkpointing = c;
    return saved_activation_bytes(build_training_steps(m, o), 1, 1);
  };
  // Under autocast every projection's output is bf16: q, v, gate and down as above, flash's output (b, s, h,
  // hd) in bf16 and its logsumexp (b, h, s) in fp32; the checkpoint's input is the fp32 residual stream.
  const std::int64_t tokens = o.batch * o.seq;
  const std::int64_t bf16_per_token =
      m.d_model + m.n_kv_heads * m.head_dim + m.d_ff + m.d_model + m.n_heads * m.head_dim;
  const Bytes expected = static_cast<Bytes>(tokens * m.d_model * 4 + tokens * bf16_per_token * 2 +
                                            o.batch * m.n_heads * o.seq * 4);
  CHECK(saved(Checkpointing::kSelectiveOp) == expected);
}

TEST_CASE("sac: forward-only releases the cache with the graph", "[quick][graph]") {
  TrainingOptions o = test::small_options();
  o.steps = 1;
  o.forward_only = true;
  o.checkpointing = Checkpointing::kSelectiveOp;
  const OpGraph g = build_training_steps(test::tiny_model("llama-2-7b"), o);
  CHECK(test::persistent_bytes(g, TensorCategory::kActivation) == 0);
}
