// torchtitan's MoE under tensor parallelism (with its sequence parallelism), expert parallelism and expert
// tensor parallelism 1 or = TP (issues 42 and 35). Every expected value is worked by hand below from
// pytorch/torchtitan at 1e8f9acd1:
//   torchtitan/models/llama4/infra/parallelize.py apply_moe_ep_tp: the MoE wrapped in
//     PrepareModuleInputOutput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),),
//     output_layouts=(Partial(),), desired_output_layouts=(Shard(1),)): all-gather in, reduce-scatter out;
//     "moe.router.gate": NoParallel() (replicated); shared_experts w1 / w3 ColwiseParallel, w2
//     RowwiseParallel(output_layouts=Partial()); "moe.reorderer": ReordererSequenceParallel() when
//     ep_mesh is not None and etp_mesh is None; the experts TensorParallel() (ep 1), ExpertParallel()
//     (etp 1) or ExpertTensorParallel() (etp = tp);
//   torchtitan/distributed/expert_parallel.py: TensorParallel._partition_fn (w1, w3 Shard(1), w2 Shard(2)),
//     ExpertTensorParallel._partition_fn ([Shard(0), Shard(1)] / [Shard(0), Shard(2)] on [ep, etp]),
//     ReordererSequenceParallel._prepare_inputput_fn (num_tokens // tp of top_scores and
//     selected_experts_indices) and _prepare_output_fn (token_indices_experts_sorted + offset);
//   torchtitan/models/moe/moe.py MoE.forward (routed_output_unsorted = torch.zeros((bs * slen * top_k,
//   dim))); torchtitan/models/moe/utils.py _permute (round_up(rows + local_experts x 8, 8));
//   torchtitan/distributed/parallel_dims.py: efsdp = dp_shard x cp x tp // (etp x ep); _validate's
//     "Currently we only support ETP=TP or ETP=1".
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
using test::bytes_matching;
using test::bytes_named;
using test::tiny_mixtral;

namespace {

// The rank's model as make_request builds it for torchtitan's MoE: tensor-parallel rank, its experts as
// apply_moe_ep_tp places them, `ep` of them.
ModelConfig rank_model(const ModelConfig& full, int tp, int ep, int etp) {
  return expert_parallel_rank(
      torchtitan_expert_tensor_parallel_rank(full, tensor_parallel_rank(full, tp), tp, ep, etp), ep);
}

// batch 2 x seq 32 = 64 tokens, bf16 compute over fp32 FSDP2 shards (torchtitan's MixedPrecisionPolicy),
// torchtitan's MoE, --tp `tp` --sequence-parallel, --ep `ep`, FSDP2 over `dp` ranks (dp_shard).
TrainingOptions tp_options(int tp, int ep, int dp) {
  TrainingOptions o = test::moe_options(MoeImpl::kTorchtitan, ep, 1.0, "fsdp2-full-shard", dp);
  o.precision = Precision::kBf16;
  o.master_weights = MasterWeights::kFp32;
  o.tensor_parallel = tp;
  o.sequence_parallel = true;
  return o;
}

const std::string n = "layers.0.moe";

}  // namespace

TEST_CASE("torchtitan MoE, TP 2 + SP, EP 2, ETP 1 (its default): EP borrows the TP ranks",
          "[quick][graph][moe][moe-tp]") {
  // tiny Mixtral: d 64, 8 experts of ff 96, top-2, bf16 (2 B). --tp 2 --ep 2 over dp_shard 2: 4 GPUs;
  // etp 1: the ep mesh is 2 of the dp_shard x tp ranks, efsdp = 2 x 2 // (1 x 2) = 2.
  const ModelConfig m = rank_model(tiny_mixtral(), 2, 2, 1);
  CHECK(m.moe.expert_d_ff == 96);  // ExpertParallel: Shard(0) only, whole experts
  CHECK(m.moe.local_experts() == 4);
  const OpGraph g = build_training_steps(m, tp_options(2, 2, 2));
  // PrepareModuleInputOutput: the [2, 16, 64] slice gathered to [2, 32, 64]
  CHECK(bytes_named(g, n + ".prepare_input.all_gather") == Bytes{2 * 32 * 64 * 2});
  // NoParallel gate: every tp rank routes all 64 tokens: softmax scores fp32 [64, 8]
  CHECK(bytes_named(g, n + ".router.softmax") == Bytes{64 * 8 * 4});
  // ReordererSequenceParallel: 64 // 2 = 32 tokens x top-2 = 64 sorted indices, int64; then + offset
  CHECK(bytes_named(g, n + ".reorderer.argsort") == Bytes{64 * 8});
  CHECK(bytes_named(g, n + ".reorderer.global_token_indices") == Bytes{64 * 8});
  CHECK(bytes_named(g, n + ".routed_input") == Bytes{64 * 64 * 2});  // x[indices // k]: 64 rows
  // all_to_all over ep 2: EP rank 0's experts 0-3 get 64 / 8 = 8 rows each from each of 2 ranks = 64
  CHECK(bytes_named(g, n + ".experts.dispatch.all_to_all") == Bytes{64 * 64 * 2});
  // _permute: round_up(64 + 4 x 8, 8) = 96 rows; whole experts: w1 out [96, 96], w2 out [96, 64]
  CHECK(bytes_named(g, n + ".experts.grouped_mm_w1") == Bytes{96 * 96 * 2});
  CHECK(bytes_named(g, n + ".experts.grouped_mm_w2") == Bytes{96 * 64 * 2});
  CHECK(bytes_named(g, n + ".experts.combine.all_to_all") == Bytes{64 * 64 * 2});
  // routed_output_unsorted: torch.zeros((bs * slen * top_k, dim)) = [128, 64], only this rank's 64 filled
  CHECK(bytes_named(g, n + ".routed_output_unsorted") == Bytes{128 * 64 * 2});
  // the Partial [2, 32, 64] output reduce-scattered to the [2, 16, 64] slice
  CHECK(bytes_named(g, n + ".prepare_output.reduce_scatter") == Bytes{2 * 16 * 64 * 2});
  // FSDP2 over efsdp = 2: expert 0's w1 [96, 64] is 48 rows x 64 fp32 a rank; all 4 local experts'
  // 4 x 3 x 6,144 = 73,728 elements / 2 = 36,864 x 4 B
  CHECK(bytes_matching(g, "experts.0.", "w1.weight.sharded") == Bytes{48 * 64 * 4});
  CHECK(bytes_matching(g, ".experts.", ".sharded") == Bytes{36864 * 4});
}

TEST_CASE("torchtitan MoE, TP 2 + SP, EP 2, ETP 2: ExpertTensorParallel on all tokens",
          "[quick][graph][moe][moe-tp]") {
  // etp = tp = 2: efsdp = 2 x 2 // (2 x 2) = 1 over dp_shard 2 (4 GPUs)
  const ModelConfig m = rank_model(tiny_mixtral(), 2, 2, 2);
  CHECK(m.moe.expert_d_ff == 48);  // w1 / w3 Shard(1), w2 Shard(2) over etp: 96 / 2
  const OpGraph g = build_training_steps(m, tp_options(2, 2, 2));
  CHECK(bytes_named(g, n + ".prepare_input.all_gather") == Bytes{2 * 32 * 64 * 2});
  // no ReordererSequenceParallel: all 64 tokens x 2 = 128 rows routed
  CHECK(bytes_named(g, n + ".reorderer.argsort") == Bytes{128 * 8});
  CHECK(bytes_named(g, n + ".reorderer.global_token_indices") == 0);
  CHECK(bytes_named(g, n + ".routed_input") == Bytes{128 * 64 * 2});
  // experts 0-3 get 16 rows each from each of the 2 EP ranks: 128 received; no gather over etp (the etp
  // ranks hold the same tokens already)
  CHECK(bytes_named(g, n + ".experts.dispatch.all_to_all") == Bytes{128 * 64 * 2});
  // round_up(128 + 32, 8) = 160 rows; each expert's 48 columns; w2 back to 64 (partial sums)
  CHECK(bytes_named(g, n + ".experts.grouped_mm_w1") == Bytes{160 * 48 * 2});
  CHECK(bytes_named(g, n + ".experts.grouped_mm_w2") == Bytes{160 * 64 * 2});
  CHECK(bytes_named(g, n + ".routed_output_unsorted") == Bytes{128 * 64 * 2});
  CHECK(bytes_named(g, n + ".prepare_output.reduce_scatter") == Bytes{2 * 16 * 64 * 2});
  // efsdp = 1: 4 experts x 3 x 48 x 64 = 36,864 fp32 elements whole; expert 0's w1 48 x 64
  CHECK(bytes_matching(g, "experts.0.", "w1.weight.sharded") == Bytes{48 * 64 * 4});
  CHECK(bytes_matching(g, ".experts.", ".sharded") == Bytes{36864 * 4});
}

TEST_CASE("torchtitan MoE, TP 2 + SP, no EP: TensorParallel experts, replicated router, split shared expert",
          "[quick][graph][moe][moe-tp]") {
  ModelConfig full = tiny_mixtral();
  full.moe.shared_expert_d_ff = 96;  // one shared FeedForward of hidden 96 (num_shared_experts 1)
  const ModelConfig m = rank_model(full, 2, 1, 1);
  CHECK(m.moe.expert_d_ff == 48);  // TensorParallel: Shard(1) / Shard(2) over tp, all 8 experts
  CHECK(m.moe.shared_expert_d_ff == 48);
  const OpGraph g = build_training_steps(m, tp_options(2, 1, 2));
  // the gate: replicated [8, 64] weight on all 64 gathered tokens -> [64, 8] bf16 logits
  CHECK(bytes_named(g, n + ".router.gate") == Bytes{64 * 8 * 2});
  CHECK(bytes_named(g, n + ".experts.dispatch.all_to_all") == 0);
  // indices_padding_wrapper: round_up(128 + 8 x 8, 8) = 192 rows x 48 columns
  CHECK(bytes_named(g, n + ".experts.grouped_mm_w1") == Bytes{192 * 48 * 2});
  // shared experts: Colwise w1 / w3 -> [64, 48]; Rowwise w2 -> partial [64, 64], all on the 64 tokens
  CHECK(bytes_named(g, n + ".shared_experts.w1") == Bytes{64 * 48 * 2});
  CHECK(bytes_named(g, n + ".shared_experts.w3") == Bytes{64 * 48 * 2});
  CHECK(bytes_named(g, n + ".shared_experts.w2") == Bytes{64 * 64 * 2});
  CHECK(bytes_named(g, n + ".prepare_output.reduce_scatter") == Bytes{2 * 16 * 64 * 2});
  // no EP: FSDP2 shards the experts over the 2 dp_shard ranks like every parameter: 8 x 3 x 48 x 64 =
  // 73,728 elements / 2 x 4 B
  CHECK(bytes_matching(g, ".experts.", ".sharded") == Bytes{36864 * 4});
}

TEST_CASE("torchtitan MoE under TP: what torchtitan refuses", "[quick][graph][moe][moe-tp]") {
  SECTION("ETP must be 1 or TP (ParallelDims._validate)") {
    CHECK_THROWS_WITH(rank_model(tiny_mixtral(), 2, 2, 4),
                      Contains("Currently we only support ETP=TP or ETP=1"));
  }
  SECTION("efsdp = dp_shard x tp // (etp x ep) must be whole: EP 4 over 2 x 2 ranks with ETP 2") {
    CHECK_THROWS_WITH(build_training_steps(rank_model(tiny_mixtral(), 2, 4, 2), tp_options(2, 4, 2)),
                      Contains("does not divide the 2 ranks"));
  }
  SECTION("DeepSeek's multi-head latent attention is not modelled with sequence parallelism (vramsim)") {
    ModelConfig full = tiny_mixtral();
    full.mla.kv_lora_rank = 32;  // mla_qkv runs plain linears on the whole sequence, not on the slice
    full.mla.qk_nope_head_dim = 16;
    full.mla.qk_rope_head_dim = 8;
    full.mla.v_head_dim = 16;
    CHECK_THROWS_WITH(build_training_steps(rank_model(full, 2, 1, 1), tp_options(2, 1, 2)),
                      Contains("multi-head latent attention's projections are not modelled"));
  }
  SECTION("torchtitan's TP is sequence-parallel") {
    TrainingOptions o = tp_options(2, 2, 2);
    o.sequence_parallel = false;
    CHECK_THROWS_WITH(build_training_steps(rank_model(tiny_mixtral(), 2, 2, 1), o),
                      Contains("add --sequence-parallel"));
  }
}
