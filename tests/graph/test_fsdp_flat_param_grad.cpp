// FSDP1's FlatParameter gradient (sim/parallel/fsdp_flat_param_grad.h;
// torch/distributed/fsdp/_runtime_utils.py _post_backward_hook and _reduce_grad, autograd's
// split_with_sizes_backward) and FSDP2's reduce_output (sim/parallel/data_parallel.h GradientShards): sizes
// worked by hand.
#include <catch2/catch.hpp>

#include "graph_test_util.h"
#include "sim/models/transformer_builder.h"

using namespace vramsim;

namespace {

// The tiny Llama of graph_test_util.h over 4 ranks. A decoder layer's FlatParameter: q, k, v, o 4 x 64 x 64,
// gate, up, down 3 x 64 x 172, two norms of 64: 49,536 elements (a multiple of 4: no padding), 12,384 per
// rank. The root: embed_tokens and lm_head 1000 x 64 each and the final norm 64: 128,064, 32,016 per rank.
constexpr std::int64_t kLayer = 49'536;
constexpr std::int64_t kRoot = 128'064;

OpGraph fsdp1(bool fp32_reduce, bool set_to_none) {
  TrainingOptions o = test::small_options();
  o.precision = Precision::kBf16;
  o.master_weights = MasterWeights::kNone;  // a model loaded in bf16: bf16 FlatParameters
  o.zero_grad_set_to_none = set_to_none;
  o.data_parallel.scheme = "fsdp-full-shard";
  o.data_parallel.world_size = 4;
  if (fp32_reduce) {
    o.data_parallel.fsdp_reduce_dtype = DType::kFloat32;
  }
  return build_training_steps(test::tiny_model("llama-2-7b"), o);
}

}  // namespace

TEST_CASE("fsdp1 flat gradient: one concatenated gradient per unit, one shard per unit", "[quick][graph]") {
  // bf16 parameters, reduce_dtype bf16: per step the layer's flat gradient (2 B x 49,536) and its shard
  // (2 B x 12,384); two steps.
  const OpGraph g = fsdp1(false, false);
  CHECK(test::sizes_named(g, "layers.0.flat_param.grad") == std::vector<Bytes>{2 * kLayer, 2 * kLayer});
  CHECK(test::sizes_named(g, "root.flat_param.grad") == std::vector<Bytes>{2 * kRoot, 2 * kRoot});
  // The second step adds into the first step's shard (zero_grad(set_to_none=False) kept it): one shard per
  // unit is made in step 1 and another in step 2, freed once added.
  CHECK(test::sizes_named(g, "layers.0.flat_param.grad_shard") ==
        std::vector<Bytes>{2 * kLayer / 4, 2 * kLayer / 4});
  // What stays: one shard per unit, the parameters' .grad views of it.
  CHECK(test::persistent_bytes(g, TensorCategory::kGradient) == 2 * (2 * kLayer / 4) + 2 * kRoot / 4);
  test::check_schedule_invariants(g, build_allocation_schedule(g));
}

TEST_CASE("fsdp1 flat gradient: reduce_dtype fp32 casts the flat gradient, then the shard back",
          "[quick][graph]") {
  const OpGraph g = fsdp1(true, true);
  // flat_param.grad.to(float32) on the post-backward stream (4 B x 49,536), reduce-scattered into an fp32
  // shard (4 B x 12,384), cast back to the parameters' bf16 (_cast_grad_to_param_dtype: 2 B x 12,384).
  CHECK(test::sizes_named(g, "layers.0.flat_param.grad.reduce_dtype") ==
        std::vector<Bytes>{4 * kLayer, 4 * kLayer});
  CHECK(test::sizes_named(g, "layers.0.flat_param.grad_shard") ==
        std::vector<Bytes>{4 * kLayer / 4, 4 * kLayer / 4});
  CHECK(test::sizes_named(g, "layers.0.flat_param.grad_shard.param_dtype") ==
        std::vector<Bytes>{2 * kLayer / 4, 2 * kLayer / 4});
  // zero_grad(set_to_none=True) drops every view, and with them the shards.
  CHECK(test::persistent_bytes(g, TensorCategory::kGradient) == 0);
}

TEST_CASE("fsdp2 reduce_output: one tensor of a unit's shards, cast back, viewed by each .grad",
          "[quick][graph]") {
  // FSDP2 (_fsdp_collectives.py foreach_reduce) shards each parameter on dim 0 over 4 ranks: q, k, v, o
  // 16 x 64 = 1,024 elements each, gate and up 43 x 64 = 2,752, down 16 x 172 = 2,752, the norms 16: 12,384
  // per layer, the same count as FSDP1's flat shard. reduce_dtype fp32: reduce_output 4 B x 12,384, then
  // _to_dtype_if_needed to bf16, 2 B x 12,384; two steps.
  TrainingOptions o = test::small_options();
  o.precision = Precision::kBf16;
  o.master_weights = MasterWeights::kNone;  // a model loaded in bf16: bf16 sharded parameters
  o.zero_grad_set_to_none = false;
  o.data_parallel.scheme = "fsdp2-full-shard";
  o.data_parallel.world_size = 4;
  o.data_parallel.fsdp_reduce_dtype = DType::kFloat32;
  const OpGraph g = build_training_steps(test::tiny_model("llama-2-7b"), o);
  CHECK(test::sizes_named(g, "layers.0.reduce_output") == std::vector<Bytes>{4 * kLayer / 4, 4 * kLayer / 4});
  CHECK(test::sizes_named(g, "layers.0.reduce_output.orig_dtype") ==
        std::vector<Bytes>{2 * kLayer / 4, 2 * kLayer / 4});
  // Step 2 adds into step 1's views (sharded_param.grad += new_sharded_grad) and drops its own output: one
  // bf16 output per unit stays, viewed by the parameters' .grad.
  const std::int64_t root =
      1000 * 64 / 4 * 2 + 64 / 4;  // embed_tokens and lm_head 250 x 64 each, the norm 16
  CHECK(test::persistent_bytes(g, TensorCategory::kGradient) == 2 * (2 * kLayer / 4) + 2 * root);
}
