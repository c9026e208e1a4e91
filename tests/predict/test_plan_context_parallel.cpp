// plan --allow cp inside pipeline layouts (sim/plan/plan_grid.cpp layouts(), Note [Parallel layouts] in
// plan.h): the pp x cp and tp x pp x cp layouts, the grid they add and their commands, counted by hand.
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "sim/plan/plan.h"
#include "sim/plan/plan_grid.h"
#include "sim/predict/step_prediction.h"

using namespace vramsim;

namespace {

// A Llama config.json written next to the tests (the plan names it by path, as a user would).
std::string write_llama(const std::string& file, std::int64_t hidden, std::int64_t ffn, std::int64_t layers,
                        std::int64_t heads, std::int64_t kv_heads) {
  std::ofstream(file)
      << "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": " << hidden
      << ", \"intermediate_size\": " << ffn << ", \"num_hidden_layers\": " << layers
      << ", \"num_attention_heads\": " << heads << ", \"num_key_value_heads\": " << kv_heads
      << ", \"vocab_size\": 32768, \"max_position_embeddings\": 1024, \"rms_norm_eps\": 1e-05, "
         "\"tie_word_embeddings\": false}\n";
  return file;
}

}  // namespace

// --allow cp inside pipeline layouts (Note [Parallel layouts]): torchtitan's Table 6 runs CP inside TP 8 x PP
// 8 (benchmarks/llama3_h100_202412_torchtitan.md). The layouts and the grid counted by hand.
TEST_CASE("plan: context parallelism inside pipeline layouts (pp x cp, tp x pp x cp)",
          "[predict][context-parallel]") {
  using plan_detail::Layout;
  const auto as_tuples = [](const std::vector<Layout>& ls) {
    std::vector<std::vector<int>> out;
    for (const Layout& l : ls) {
      out.push_back({l.tp, l.pp, l.ep, l.cp});
    }
    return out;
  };
  PlanRequest r;
  r.gpu = "h100";
  r.gpus = 8;
  r.global_batch = 16;
  r.seq = 256;
  r.allow = {"cp"};
  // 3 heads of 64 (hidden 192), 4 layers: no tensor-parallel degree splits 3 heads, so the pipeline layouts
  // have tp 1: pp 2 and 4 (dividing 8 GPUs and 4 layers). CP alone: 2, 4, 8. Inside pp 2: cp 2 (8 % 4) and
  // cp 4 (8 % 8); inside pp 4: cp 2 (8 % 8); cp 8 with pp 2 is 16 GPUs.
  r.model = write_llama("vramsim_test_plan_pp_cp.json", 192, 768, 4, 3, 3);
  CHECK(as_tuples(plan_detail::layouts(r)) == std::vector<std::vector<int>>{{1, 1, 1, 1},
                                                                            {1, 1, 1, 2},
                                                                            {1, 1, 1, 4},
                                                                            {1, 1, 1, 8},
                                                                            {1, 2, 1, 1},
                                                                            {1, 4, 1, 1},
                                                                            {1, 2, 1, 2},
                                                                            {1, 2, 1, 4},
                                                                            {1, 4, 1, 2}});
  // The grid: 3 checkpointing x 2 optimizers, and per precision the 5 shardings' blocks (micro-batches = the
  // divisors of the local batch 16 / (8 / (tp x pp x cp))):
  //   (1, 1): local batch 2, 2 micro-batches, for every sharding;
  //   pp 2 (local 4: 3) and pp 4 (local 8: 4), for DDP, ZeRO-1 and FSDP2 (DeepSpeed's PipelineEngine refuses
  //   ZeRO-2 and 3): 7;
  //   amp-bf16: 3 x (2 + 7) + 2 x 2 = 31;
  //   bf16: the same 31, and FSDP2 alone gets CP: cp 2, 4, 8 (local 4, 8, 16: 3 + 4 + 5 = 12) and pp x cp:
  //   (pp 2, cp 2) local 8: 4, (pp 2, cp 4) and (pp 4, cp 2) local 16: 5 + 5 = 14; 31 + 26 = 57.
  // 6 x (31 + 57) = 528; without --allow cp 6 x (31 + 31) = 372.
  std::size_t total = 0;
  plan_detail::grid_families(r, total);
  CHECK(total == 6 * (31 + 57));
  r.allow.clear();
  plan_detail::grid_families(r, total);
  CHECK(total == 372);
  r.allow = {"cp"};
  // A pp 2 x cp 2 configuration through predict: FSDP2 over the 8 / 2 = 4 ranks of each stage (dp_shard 2 x
  // cp 2), each stage's ring attention on 128 tokens
  PlanConfig c;
  c.precision = "bf16";
  c.fsdp = "fsdp2";
  c.pp = 2;
  c.cp = 2;
  c.micro_batch = 2;
  c.grad_accumulation = 4;
  CHECK(data_parallel_degree(r, c) == 2);
  CHECK_THAT(predict_command(r, c), Catch::Contains("--pp 2 --cp 2"));
  CHECK_THAT(trainer_settings(r, c), Catch::Contains("--parallelism.pipeline_parallel_degree 2 "
                                                     "--parallelism.data_parallel_shard_degree 2") &&
                                         Catch::EndsWith(" --parallelism.context_parallel_degree 2"));
  CHECK(predict(make_request(predict_args(r, c))).num_ooms == 0);
  std::remove(r.model.c_str());

  // 2 heads (hidden 128): tp 2 is the largest degree, so pipeline layouts are tp 2 x pp 2 and tp 2 x pp 4;
  // CP inside tp 2 x pp 2 only with cp 2 (2 x 2 x 2 = 8 GPUs), and the rank's 256 / 2 = 128 tokens split over
  // tp 2. Before them: tp 2 x cp 2 and tp 2 x cp 4 (tp 2 x cp 8 is 16 GPUs).
  r.model = write_llama("vramsim_test_plan_tp_pp_cp.json", 128, 512, 4, 2, 2);
  CHECK(as_tuples(plan_detail::layouts(r)) == std::vector<std::vector<int>>{{1, 1, 1, 1},
                                                                            {1, 1, 1, 2},
                                                                            {1, 1, 1, 4},
                                                                            {1, 1, 1, 8},
                                                                            {2, 1, 1, 1},
                                                                            {2, 2, 1, 1},
                                                                            {2, 4, 1, 1},
                                                                            {2, 1, 1, 2},
                                                                            {2, 1, 1, 4},
                                                                            {2, 2, 1, 2}});
  c.tp = 2;
  c.micro_batch = 4;
  c.grad_accumulation = 4;  // one replica: local batch 16
  CHECK(data_parallel_degree(r, c) == 1);
  CHECK_THAT(predict_command(r, c), Catch::Contains("--tp 2 --sequence-parallel --pp 2 --cp 2"));
  CHECK(predict(make_request(predict_args(r, c))).num_ooms == 0);
  std::remove(r.model.c_str());
}
