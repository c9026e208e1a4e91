// Megatron-Core's MoE layer under tensor and sequence parallelism, with expert parallelism and expert tensor
// parallelism (issues 42 and 35). Every expected value is worked by hand below from Megatron-LM at
// 0014f13713bf (NVIDIA/Megatron-LM):
//   megatron/training/arguments.py validate_args: expert_tensor_parallel_size unset ->
//   tensor_model_parallel_size; megatron/core/parallel_state.py initialize_model_parallel:
//   expert_data_parallel_size =
//     decoder_world_size // (etp x ep x pp), which must divide;
//   megatron/core/transformer/moe/token_dispatcher.py MoEAlltoAllTokenDispatcher: permute the rank's
//     (sequence-parallel) tokens, all_to_all over the EP group, gather_from_sequence_parallel_region over the
//     expert-tensor-parallel group (tp_size > 1), sort_chunks_by_idxs; back: sort, reduce_scatter over the
//     expert-tensor group, all_to_all;
//   megatron/core/transformer/moe/experts.py TEGroupedMLP: linear_fc1 of moe_ffn_hidden_size x 2 columns and
//     linear_fc2 of moe_ffn_hidden_size rows, both divided by the expert-tensor-parallel size;
//   megatron/core/model_parallel_config.py and moe_layer.py MoELayer.forward: the refusals without SP.
#include <catch2/catch.hpp>

#include <string>

#include "graph/graph_test_util.h"
#include "graph/moe_test_util.h"
#include "sim/core/error.h"
#include "sim/models/transformer_builder.h"
#include "sim/parallel/expert_parallel.h"
#include "sim/parallel/tensor_parallel.h"

using namespace vramsim;
using Catch::Matchers::Contains;
using test::bytes_named;
using test::tiny_mixtral;

namespace {

// The rank's model as make_request builds it: tensor-parallel rank, experts split over `etp`, `ep` of them.
ModelConfig rank_model(int tp, int etp, int ep) {
  const ModelConfig full = tiny_mixtral();
  return expert_parallel_rank(expert_tensor_parallel_rank(full, tensor_parallel_rank(full, tp), etp), ep);
}

// 2 x 32 tokens, fp32, Megatron's MoE, --tp `tp` with sequence parallelism, --ep `ep` over `dp` DDP ranks.
TrainingOptions tp_options(int tp, int ep, int dp) {
  TrainingOptions o = test::moe_options(MoeImpl::kMegatron, ep, 1.0, dp > 1 ? "ddp" : "none", dp);
  o.tensor_parallel = tp;
  o.sequence_parallel = true;
  return o;
}

// size_bytes summed over the tensors of `category` whose name contains ".experts.".
Bytes expert_bytes(const OpGraph& g, TensorCategory category) {
  Bytes total = 0;
  for (const Tensor& t : g.tensors()) {
    if (t.category == category && t.name.find(".experts.") != std::string::npos) {
      total += t.size_bytes;
    }
  }
  return total;
}

}  // namespace

TEST_CASE("Megatron MoE, TP 2 + SP, EP 2, ETP 2 (the default): the busiest rank's buffers",
          "[quick][graph][moe][moe-tp]") {
  // tiny Mixtral: d 64, 8 experts of ff 96, top-2, fp32 (4 B). --tp 2 --sequence-parallel --ep 2 over
  // 2 DDP ranks: 4 GPUs a stage; ETP = TP = 2, so expert_data_parallel_size = 4 // (2 x 2) = 1.
  const ModelConfig m = rank_model(2, 2, 2);
  CHECK(m.moe.expert_d_ff == 48);  // 96 / ETP 2
  CHECK(m.moe.local_experts() == 4);
  const OpGraph g = build_training_steps(m, tp_options(2, 2, 2));
  const std::string n = "layers.0.mlp";
  // The router runs on the rank's slice: batch 2 x seq 32 / tp 2 = 32 tokens -> [32, 8] fp32 gates.
  CHECK(bytes_named(g, n + ".router.topk_masked_gates") == Bytes{32 * 8 * 4});
  // 32 tokens x top-2 = 64 rows sent, 8 to each expert (even router)
  CHECK(bytes_named(g, n + ".permute.permuted_input") == Bytes{64 * 64 * 4});
  // all_to_all over EP 2: EP rank 0 holds experts 0-3, 8 rows each from each of 2 EP ranks = 64 rows
  CHECK(bytes_named(g, n + ".dispatch.all_to_all") == Bytes{64 * 64 * 4});
  // gather over ETP 2: torch.empty of 2 x 64 = 128 rows, staged flat by ProcessGroupNCCL (same size)
  CHECK(bytes_named(g, n + ".dispatch.gather_from_sequence_parallel_region") == Bytes{128 * 64 * 4});
  CHECK(bytes_named(g, n + ".dispatch.gather_from_sequence_parallel_region.scratch") == Bytes{128 * 64 * 4});
  CHECK(bytes_named(g, n + ".dispatch.gather_from_sequence_parallel_region_probs") == Bytes{128 * 4});
  CHECK(bytes_named(g, n + ".dispatch.sort_chunks_by_idxs") == Bytes{128 * 64 * 4});
  // fc1: 128 rows x (2 x 96 / 2 = 96) columns; the SwiGLU halves it; fc2 back to d 64 (partial sums)
  CHECK(bytes_named(g, n + ".experts.linear_fc1") == Bytes{128 * 96 * 4});
  CHECK(bytes_named(g, n + ".experts.weighted_bias_swiglu") == Bytes{128 * 48 * 4});
  CHECK(bytes_named(g, n + ".experts.linear_fc2") == Bytes{128 * 64 * 4});
  // reduce_scatter over ETP 2: the rank's 64 rows (input staged flat: 128 rows); all_to_all back: 64 rows
  CHECK(bytes_named(g, n + ".combine.reduce_scatter_to_sequence_parallel_region") == Bytes{64 * 64 * 4});
  CHECK(bytes_named(g, n + ".combine.reduce_scatter_to_sequence_parallel_region.scratch") ==
        Bytes{128 * 64 * 4});
  CHECK(bytes_named(g, n + ".combine.all_to_all") == Bytes{64 * 64 * 4});
  // unpermute into zeros of the rank's [32, 64] tokens
  CHECK(bytes_named(g, n + ".unpermute.zeros") == Bytes{32 * 64 * 4});
  // Weights: 4 local experts x (gate 48 x 64 + up 48 x 64 + down 64 x 48) x 4 B = 147456 B; DDP keeps a
  // gradient of each (its expert-data-parallel group is 1 rank here, which changes the all-reduce's group,
  // not its bytes) and AdamW two fp32 states.
  const Bytes weights = 4 * 3 * 48 * 64 * 4;
  CHECK(expert_bytes(g, TensorCategory::kParameter) == weights);
  CHECK(expert_bytes(g, TensorCategory::kGradient) == weights);
  CHECK(expert_bytes(g, TensorCategory::kOptimizerState) == 2 * weights);
}

TEST_CASE("Megatron MoE, TP 2 + SP, EP 2, ETP 1: whole experts, no gather", "[quick][graph][moe][moe-tp]") {
  // --expert-tensor-parallel 1: expert_data_parallel_size = 2 (tp) x 1 (dp) // (1 x 2) = 1; the two TP
  // ranks are the two EP ranks.
  const ModelConfig m = rank_model(2, 1, 2);
  CHECK(m.moe.expert_d_ff == 96);
  const OpGraph g = build_training_steps(m, tp_options(2, 2, 1));
  const std::string n = "layers.0.mlp";
  // 32 tokens x 2 = 64 rows sent; EP rank 0's 4 experts get 8 from each of 2 ranks = 64 received
  CHECK(bytes_named(g, n + ".dispatch.all_to_all") == Bytes{64 * 64 * 4});
  CHECK(bytes_named(g, n + ".dispatch.gather_from_sequence_parallel_region") == 0);
  CHECK(bytes_named(g, n + ".experts.linear_fc1") == Bytes{64 * 192 * 4});
  CHECK(bytes_named(g, n + ".experts.linear_fc2") == Bytes{64 * 64 * 4});
  // 4 local experts x 3 x 96 x 64 x 4 B
  CHECK(expert_bytes(g, TensorCategory::kParameter) == Bytes{4 * 3 * 96 * 64 * 4});
}

TEST_CASE("Megatron MoE, TP 2 + SP, no EP: ETP 2 gathers the other TP rank's tokens",
          "[quick][graph][moe][moe-tp]") {
  const ModelConfig m = rank_model(2, 2, 1);
  const OpGraph g = build_training_steps(m, tp_options(2, 1, 1));
  const std::string n = "layers.0.mlp";
  // no all_to_all (EP 1); 64 rows sent to the rank's own 8 experts, gathered with the other rank's 64
  CHECK(bytes_named(g, n + ".dispatch.all_to_all") == 0);
  CHECK(bytes_named(g, n + ".dispatch.gather_from_sequence_parallel_region") == Bytes{128 * 64 * 4});
  CHECK(bytes_named(g, n + ".experts.linear_fc1") == Bytes{128 * 96 * 4});
  CHECK(bytes_named(g, n + ".combine.reduce_scatter_to_sequence_parallel_region") == Bytes{64 * 64 * 4});
}

TEST_CASE("Megatron MoE under TP: what Megatron refuses", "[quick][graph][moe][moe-tp]") {
  SECTION("EP with TP needs SP (ModelParallelConfig)") {
    TrainingOptions o = tp_options(2, 2, 2);
    o.sequence_parallel = false;
    CHECK_THROWS_WITH(build_training_steps(rank_model(2, 2, 2), o),
                      Contains("When using expert parallelism and tensor parallelism, sequence parallelism "
                               "must be used"));
  }
  SECTION("ETP > 1 without SP (MoELayer.forward)") {
    TrainingOptions o = tp_options(2, 1, 1);
    o.sequence_parallel = false;
    CHECK_THROWS_WITH(build_training_steps(rank_model(2, 2, 1), o),
                      Contains("without also enabling sequence parallelism"));
  }
  SECTION("the expert grid: etp x ep must divide tp x dp (initialize_model_parallel)") {
    // TP 2, 1 DP rank: 2 ranks a stage; ETP 2 x EP 2 = 4 does not divide them
    CHECK_THROWS_WITH(
        build_training_steps(rank_model(2, 2, 2), tp_options(2, 2, 1)),
        Contains("decoder world_size (2) is not divisible by expert_tensor_model_pipeline_parallel "
                 "size (4)"));
  }
  SECTION("ETP must divide the experts' hidden units (divide())") {
    CHECK_THROWS_WITH(expert_tensor_parallel_rank(tiny_mixtral(), tiny_mixtral(), 5),
                      Contains("does not divide the experts' 96 hidden units"));
  }
}
