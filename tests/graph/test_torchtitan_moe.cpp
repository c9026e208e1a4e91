// torchtitan's MoE layer and its expert parallelism over FSDP2 (sim/moe/torchtitan_moe.cpp,
// sim/parallel/fsdp2.cpp's expert parameters): every expected value is worked by hand below from
// torchtitan's code at pytorch/torchtitan 1e8f9acd1 (torchtitan/models/moe/moe.py MoE.forward,
// TokenChoiceTopKRouter.forward, _run_experts_grouped_mm; torchtitan/models/moe/utils.py _permute /
// _unpermute with TOKEN_GROUP_ALIGN_SIZE_M = 8; torchtitan/distributed/expert_parallel.py ExpertParallel;
// torchtitan/models/llama4/infra/parallelize.py apply_fsdp; torchtitan/distributed/parallel_dims.py's
// efsdp = dp_shard x cp x tp / (etp x ep)) and the routing model (busiest expert = ceil(F x tokens x top_k /
// experts), the rest even).
#include <catch2/catch.hpp>

#include <string>

#include "graph/graph_test_util.h"
#include "graph/moe_test_util.h"
#include "sim/core/error.h"
#include "sim/graph/tensor_lifetime.h"
#include "sim/models/transformer_builder.h"
#include "sim/moe/torchtitan_moe.h"
#include "sim/parallel/expert_parallel.h"

using namespace vramsim;
using Catch::Matchers::Contains;
using test::bytes_matching;
using test::bytes_named;
using test::tiny_mixtral;

namespace {

// batch 2 x seq 32 = 64 tokens; bf16 compute over fp32 sharded parameters (torchtitan's
// MixedPrecisionPolicy); torchtitan's MoE with expert parallelism `ep` over FSDP2 on 8 ranks.
TrainingOptions torchtitan_options(int ep, double imbalance) {
  TrainingOptions o = test::moe_options(MoeImpl::kTorchtitan, ep, imbalance, "fsdp2-full-shard", 8);
  o.precision = Precision::kBf16;
  o.master_weights = MasterWeights::kFp32;
  return o;
}

}  // namespace

TEST_CASE("torchtitan's _permute pads each local expert's rows to 8", "[quick][graph]") {
  // padded_max_len = _round_up(x.shape[0] + num_local_experts x 8, 8)
  CHECK(torchtitan_padded_rows(128, 2) == 144);
  CHECK(torchtitan_padded_rows(184, 2) == 200);
  CHECK(torchtitan_padded_rows(129, 1) == 144);  // 137 rounded up to 144
  CHECK(torchtitan_padded_rows(128, 8) == 192);
}

TEST_CASE("torchtitan MoE: the routed rows, all-to-all and grouped-GEMM buffers of the busiest rank",
          "[quick][graph]") {
  // 64 tokens x top-2 = 128 routed rows, d 64, expert ff 96, bf16 (2 bytes); ep 4: rank 0 holds experts 0, 1.
  const ModelConfig m = expert_parallel_rank(tiny_mixtral(), 4);
  const std::string n = "layers.0.moe";
  SECTION("even router: each expert gets 16 rows from each of the 4 ranks, so rank 0 receives 128") {
    const OpGraph g = build_training_steps(m, torchtitan_options(4, 1.0));
    CHECK(bytes_named(g, n + ".router.softmax") == Bytes{64 * 8 * 4});             // fp32 scores [T, E]
    CHECK(bytes_named(g, n + ".routed_input") == Bytes{128 * 64 * 2});             // x[indices // k]
    CHECK(bytes_named(g, n + ".routed_input.to_float32") == Bytes{128 * 64 * 4});  // score_before_experts
    CHECK(bytes_named(g, n + ".experts.dispatch.all_to_all") == Bytes{128 * 64 * 2});
    CHECK(bytes_named(g, n + ".experts.permute.vstack") == Bytes{129 * 64 * 2});  // one zero row more
    // permuted_indices: int32 [144]; x[permuted_indices] [144, 64]
    CHECK(bytes_named(g, n + ".experts.permute.permuted_indices") == Bytes{144 * 4});
    CHECK(bytes_named(g, n + ".experts.permute.index") == Bytes{144 * 64 * 2});
    CHECK(bytes_named(g, n + ".experts.grouped_mm_w1") == Bytes{144 * 96 * 2});
    CHECK(bytes_named(g, n + ".experts.grouped_mm_w3") == Bytes{144 * 96 * 2});
    CHECK(bytes_named(g, n + ".experts.grouped_mm_w2") == Bytes{144 * 64 * 2});
    CHECK(bytes_named(g, n + ".experts.combine.all_to_all") == Bytes{128 * 64 * 2});
  }
  SECTION("F = 2: expert 0 gets ceil(2 x 128 / 8) = 32 rows a rank, expert 1 14 (96 over 7: five 14s)") {
    const OpGraph g = build_training_steps(m, torchtitan_options(4, 2.0));
    // receives 4 x (32 + 14) = 184; padded to round_up(184 + 16, 8) = 200; still sends 128
    CHECK(bytes_named(g, n + ".experts.dispatch.all_to_all") == Bytes{184 * 64 * 2});
    CHECK(bytes_named(g, n + ".experts.grouped_mm_w1") == Bytes{200 * 96 * 2});
    CHECK(bytes_named(g, n + ".experts.combine.all_to_all") == Bytes{128 * 64 * 2});
  }
  SECTION("without EP the padding wrapper permutes the rank's own 128 rows over 8 local experts") {
    const OpGraph g = build_training_steps(tiny_mixtral(), torchtitan_options(1, 1.0));
    CHECK(bytes_named(g, n + ".experts.dispatch.all_to_all") == 0);
    CHECK(bytes_named(g, n + ".experts.grouped_mm_w1") == Bytes{192 * 96 * 2});  // round_up(128 + 64, 8)
  }
}

TEST_CASE("torchtitan EP over FSDP2: experts sharded over efsdp = 8 / ep, the rest over all 8 ranks",
          "[quick][graph]") {
  // Each expert: w1, w3 [96, 64] and w2 [64, 96]; fp32 sharded parameters (4 B).
  SECTION("ep 4: 2 local experts over efsdp = 2 ranks; the same bytes as 8 experts over 8 ranks") {
    const OpGraph ep =
        build_training_steps(expert_parallel_rank(tiny_mixtral(), 4), torchtitan_options(4, 1.0));
    const OpGraph no_ep = build_training_steps(tiny_mixtral(), torchtitan_options(1, 1.0));
    // ep 4: w1 of expert 0, 96 rows over 2 ranks = 48 rows x 64 x 4 B; no EP: 12 rows of each of 8
    CHECK(bytes_matching(ep, "experts.0.", "w1.weight.sharded") == Bytes{48 * 64 * 4});
    CHECK(bytes_matching(no_ep, "experts.0.", "w1.weight.sharded") == Bytes{12 * 64 * 4});
    // every expert's sharded parameters: 2 x 3 x 6,144 / 2 x 4 B = 8 x 3 x 6,144 / 8 x 4 B = 73,728 B
    CHECK(bytes_matching(ep, ".experts.", ".sharded") == Bytes{73728});
    CHECK(bytes_matching(no_ep, ".experts.", ".sharded") == Bytes{73728});
    // a non-expert weight is sharded over all 8 ranks either way: q_proj 64 x 64 / 8 x 4 B
    CHECK(bytes_matching(ep, "layers.0.self_attn.q_proj", ".sharded") == Bytes{8 * 64 * 4});
  }
  SECTION("the gradient shards: one reduce output for the layer, experts over 2 ranks and the rest over 8") {
    const OpGraph g =
        build_training_steps(expert_parallel_rank(tiny_mixtral(), 4), torchtitan_options(4, 1.0));
    // q, k, v, o: 4 x 4,096 / 8 = 2,048; two norms: 2 x 64 / 8 = 16; router 8 x 64 / 8 = 64;
    // experts: 2 x 3 x 6,144 / 2 = 18,432: 20,560 elements, reduced in bf16, then cast to fp32
    CHECK(bytes_named(g, "layers.0.reduce_output") == Bytes{20560 * 2});
    CHECK(bytes_named(g, "layers.0.reduce_output.orig_dtype") == Bytes{20560 * 4});
    // AdamW: exp_avg of expert 0's w1 shard, 48 x 64 fp32
    CHECK(bytes_matching(g, "experts.0.", "w1.weight.exp_avg") == Bytes{48 * 64 * 4});
  }
}

TEST_CASE("torchtitan EP: forward prefetches the next layer's all-gather", "[quick][graph]") {
  // apply_fsdp with ep_degree > 1: transformer_block.set_modules_to_forward_prefetch([next_block, ...]), so
  // layer 1's all-gather output is allocated before layer 0's MoE runs.
  const OpGraph g =
      build_training_steps(expert_parallel_rank(tiny_mixtral(2), 4), torchtitan_options(4, 1.0));
  std::size_t gather1 = g.tensors().size(), moe0 = g.tensors().size();
  for (std::size_t i = 0; i < g.tensors().size(); ++i) {
    const std::string& name = g.tensors()[i].name;
    if (name == "layers.1.all_gather_output" && gather1 == g.tensors().size()) {
      gather1 = i;
    }
    if (name == "layers.0.moe.routed_input" && moe0 == g.tensors().size()) {
      moe0 = i;
    }
  }
  REQUIRE(gather1 < g.tensors().size());
  REQUIRE(moe0 < g.tensors().size());
  CHECK(gather1 < moe0);
}

TEST_CASE("torchtitan MoE: what torchtitan and vramsim refuse", "[quick][graph]") {
  const ModelConfig m = expert_parallel_rank(tiny_mixtral(), 4);
  TrainingOptions o = torchtitan_options(4, 1.0);
  SECTION("EP needs FSDP2 (torchtitan applies fully_shard whenever EP is on)") {
    o.data_parallel.scheme = "ddp";
    CHECK_THROWS_WITH(build_training_steps(m, o), Contains("needs FSDP2"));
  }
  SECTION("--ep must divide the shard group (efsdp = dp_shard x cp / ep)") {
    o.data_parallel.world_size = 6;
    CHECK_THROWS_WITH(build_training_steps(m, o), Contains("does not divide the 6 ranks"));
  }
  SECTION("bf16 sharded parameters are not torchtitan's") {
    o.master_weights = MasterWeights::kNone;
    CHECK_THROWS_WITH(build_training_steps(m, o), Contains("not modelled"));
  }
  SECTION("torchtitan's MoE drops no tokens") {
    o.moe.capacity_factor = 1.0;
    CHECK_THROWS_WITH(build_training_steps(m, o), Contains("drop no tokens"));
  }
}
