// vLLM's expert parallelism for serving (--enable-expert-parallel; sim/inference/vllm_expert_parallel.h).
// Every expected value is worked by hand from vLLM's source: determine_expert_map
// (vllm/model_executor/layers/ fused_moe/layer.py, the linear placement: global // ep_size experts a rank,
// one more to each of the first global % ep_size ranks, contiguous from ep_rank x base + min(ep_rank,
// remainder)), FusedMoEParallelConfig.make (fused_moe/config.py: use_ep = dp x tp > 1 and
// enable_expert_parallel; the MoE layer's tp_size 1, ep_size dp x tp), FusedMoE.__init__
// (intermediate_size_per_partition = moe_intermediate_size / the MoE tp_size) and
// TritonExperts.workspace_shapes (the workspace's N = 2 x intermediate_size_per_partition). The public
// start-up log it is compared with (Qwen3-235B-A22B FP8, 8 x L40S) is in docs/validation/measurements.json.
#include <catch2/catch.hpp>

#include "predict/serving_request.h"
#include "sim/core/error.h"
#include "sim/inference/vllm_expert_parallel.h"
#include "sim/predict/step_prediction.h"

using namespace vramsim;

TEST_CASE("vllm ep: determine_expert_map's experts per rank, the remainder to the first ranks",
          "[quick][predict][vllm][vllm-ep]") {
  // 128 experts over 8 ranks: 16 each, rank 4 from 4 x 16 = 64 (the public log's "[EP Rank 4/8] ...
  // Local/global number of experts: 16/128 ... 0->64").
  CHECK(vllm_expert_placement(128, 8, 4).local_experts == 16);
  CHECK(vllm_expert_placement(128, 8, 4).first_expert == 64);
  // 60 experts (Qwen1.5-MoE-A2.7B) over 8 ranks: base 60 // 8 = 7, remainder 4: ranks 0-3 hold 8, ranks 4-7
  // hold 7. Rank 3 starts at 3 x 7 + min(3, 4) = 24, rank 4 at 4 x 7 + 4 = 32, rank 7 at 7 x 7 + 4 = 53 and
  // ends at 53 + 7 = 60, the last expert.
  CHECK(vllm_expert_placement(60, 8, 0).local_experts == 8);
  CHECK(vllm_expert_placement(60, 8, 3).local_experts == 8);
  CHECK(vllm_expert_placement(60, 8, 3).first_expert == 24);
  CHECK(vllm_expert_placement(60, 8, 4).local_experts == 7);
  CHECK(vllm_expert_placement(60, 8, 4).first_expert == 32);
  CHECK(vllm_expert_placement(60, 8, 7).first_expert + vllm_expert_placement(60, 8, 7).local_experts == 60);
  // More ranks than experts: 2 experts over 4 ranks: base 0, remainder 2: ranks 0 and 1 hold one, 2 and 3
  // none.
  CHECK(vllm_expert_placement(2, 4, 1).local_experts == 1);
  CHECK(vllm_expert_placement(2, 4, 2).local_experts == 0);
}

TEST_CASE("vllm ep: whole experts on the rank, the remainder's rank reported",
          "[quick][predict][vllm][vllm-ep]") {
  // Qwen1.5-MoE-A2.7B (hidden 2,048, 24 layers, 60 experts of moe_intermediate 1,408, a shared expert of
  // 5,632) at TP 8 in bf16.
  //   TP alone: every rank holds all 60 experts, each sliced to 1,408 / 8 = 176 rows (gate, up) / columns
  //   (down): 60 x 3 x 176 x 2,048 x 2 B = 129,761,280 B a layer.
  //   --enable-expert-parallel: EP rank 0 holds 8 whole experts (above): 8 x 3 x 1,408 x 2,048 x 2 B =
  //   138,412,032 B a layer.
  // The difference, 8,650,752 B a layer, x 24 layers = 207,618,048 B; the attention, the router (a whole
  // [60, 2,048] gate either way), the shared expert (TP-split either way) and the embeddings are the same.
  RequestArgs a = test::served_on_h100("qwen1.5-moe");
  a.tp = 8;
  a.world_size = 8;
  const Prediction tp = predict(make_request(a));
  a.enable_expert_parallel = true;
  const Prediction ep = predict(make_request(a));
  const Prediction::Generation::Paged::V1& t = test::v1_of(tp);
  const Prediction::Generation::Paged::V1& e = test::v1_of(ep);
  CHECK(e.weights_bytes - t.weights_bytes == 207618048);
  CHECK(e.expert_parallel == 8);
  CHECK(e.local_experts == 8);
  CHECK(e.global_experts == 60);
  CHECK(t.expert_parallel == 1);

  // The fused-MoE workspace (H100: max_num_batched_tokens M = 8,192; top-4; K = 2,048), N = 2 x the rank's
  // intermediate size:
  //   TP: 176 -> N = 352: workspace13 8,192 x 4 x max(176, 2,048) x 2 B = 134,217,728 B, workspace2
  //   8,192 x 4 x max(352, 2,048) x 2 B = 134,217,728 B: 268,435,456 B.
  //   EP: 1,408 -> N = 2,816: workspace13 8,192 x 4 x max(1,408, 2,048) x 2 B = 134,217,728 B, workspace2
  //   8,192 x 4 x max(2,816, 2,048) x 2 B = 184,549,376 B: 318,767,104 B.
  CHECK(t.fused_moe_workspace_bytes == 268435456);
  CHECK(e.fused_moe_workspace_bytes == 318767104);
}

TEST_CASE("vllm ep: fp8-block sees the whole expert", "[quick][predict][vllm][vllm-ep]") {
  // Qwen3-235B-A22B with an FP8 checkpoint (weight_block_size [128, 128]) at TP 8: sliced, each expert's gate
  // and up are 1,536 / 8 = 192 rows, not a multiple of 128, which vLLM refuses ("The output_size of gate's
  // and up's weight = 192 is not divisible by weight quantization block_n = 128",
  // Fp8MoEMethod.create_weights). With expert parallelism the MoE layer's tp_size is 1: 1,536 rows = 12
  // blocks, accepted, and EP rank 0 holds 128 / 8 = 16 experts.
  RequestArgs a = test::served_on_h100("qwen3-235b-a22b");
  a.tp = 8;
  a.world_size = 8;
  a.quantization = "fp8-block";
  CHECK_THROWS_AS(predict(make_request(a)), InputError);  // the rank's shapes are checked when sized
  a.enable_expert_parallel = true;
  const Prediction p = predict(make_request(a));
  CHECK(test::v1_of(p).local_experts == 16);
}

TEST_CASE("vllm ep: where the flag changes nothing, and what is refused", "[quick][predict][vllm][vllm-ep]") {
  // A dense model has no FusedMoE layer, and at TP 1 use_ep is false (dp x tp = 1): the same start-up.
  for (const auto& [model, tp] : {std::pair{"llama-3.1-8b", 2}, std::pair{"qwen1.5-moe", 1}}) {
    RequestArgs a = test::served_on_h100(model);
    a.tp = tp;
    a.world_size = tp;
    const Prediction off = predict(make_request(a));
    a.enable_expert_parallel = true;
    const Prediction on = predict(make_request(a));
    CHECK(test::v1_of(on).weights_bytes == test::v1_of(off).weights_bytes);
    CHECK(test::v1_of(on).expert_parallel == 1);
  }
  RequestArgs a = test::served_on_h100("qwen1.5-moe");
  a.tp = 4;
  a.world_size = 4;
  SECTION("--ep is Megatron's and torchtitan's (training), not vLLM's") {
    a.ep = 4;
    CHECK_THROWS_WITH(make_request(a), Catch::Contains("--enable-expert-parallel"));
  }
  SECTION("vLLM's data parallelism with it uses the all-to-all kernels: not modelled") {
    a.enable_expert_parallel = true;
    a.world_size = 8;  // two engine replicas of TP 4
    CHECK_THROWS_WITH(make_request(a), Catch::Contains("not modelled (vramsim)"));
  }
  SECTION("only with vLLM's paged cache") {
    a.enable_expert_parallel = true;
    a.serving_engine = "sglang";
    CHECK_THROWS_WITH(make_request(a), Catch::Contains("--ep-size"));
    a.serving_engine = "vllm";
    a.kv_cache = "dynamic";
    CHECK_THROWS_WITH(make_request(a), Catch::Contains("--kv-cache paged"));
  }
}
