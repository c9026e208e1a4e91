// plan --allow float8 (Note [The float8 lever], sim/plan/plan_grid.cpp): the grid's float8 rows counted by
// hand, only on a GPU of compute capability >= 8.9 and only where predict takes them; a row's command
// through predict gives the row's memory; its torchtitan settings; the model-states bound below what the
// float8 rows hold; the bounded search against the exhaustive one; shards merged with float8 rows.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "plan_exhaustive_check.h"
#include "run_cli.h"
#include "sim/plan/plan.h"

using namespace vramsim;
using vramsim::test::check_against_exhaustive;

namespace {

// A small Llama (hidden 256, MLP 1024, 4 layers, 8 heads and 8 key/value heads): every linear of its
// decoder layers has both dimensions multiples of 16, so torchao converts them all (float8_linear.h).
std::string write_small_llama(const std::string& file) {
  std::ofstream(file) << "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", "
                         "\"hidden_size\": 256, \"intermediate_size\": 1024, \"num_hidden_layers\": 4, "
                         "\"num_attention_heads\": 8, \"num_key_value_heads\": 8, \"vocab_size\": 32768, "
                         "\"max_position_embeddings\": 1024, \"rms_norm_eps\": 1e-05, "
                         "\"tie_word_embeddings\": false}\n";
  return file;
}

PlanRequest small_request(const std::string& model, const std::string& gpu, int gpus,
                          std::int64_t global_batch) {
  PlanRequest r;
  r.model = model;
  r.gpu = gpu;
  r.gpus = gpus;
  r.gpus_per_node = 4;
  r.global_batch = global_batch;
  r.seq = 256;
  r.threads = 2;
  r.allow = {"float8"};
  return r;
}

int float8_rows(const PlanResult& p) {
  return static_cast<int>(std::count_if(p.grid.begin(), p.grid.end(),
                                        [](const PlanEvaluation& e) { return !e.config.float8.empty(); }));
}

}  // namespace

// One H100 (compute capability 9.0), global batch 4: micro-batches 1, 2, 4 (the divisors of 4). Without
// float8 the grid is 2 precisions x 3 checkpointing modes x 2 optimizers x 3 micro-batches = 36. float8 adds
// 2 recipes (tensorwise, rowwise) x 3 checkpointing modes x 3 micro-batches = 18: only under bf16 (predict
// refuses --float8 under amp-bf16: validate_float8_and_context_parallel, training_options.cpp) and with
// AdamW (torchtitan's optimizer; no bitsandbytes 8-bit AdamW). 36 + 18 = 54. One GPU has no FSDP2, so no
// float8 all-gather.
TEST_CASE("plan --allow float8: the float8 rows on one H100, counted by hand", "[plan][float8]") {
  const std::string model = write_small_llama("vramsim_test_plan_float8_a.json");
  PlanRequest r = small_request(model, "h100", 1, 4);
  r.exhaustive = true;
  const PlanResult p = plan(r);
  CHECK(p.grid.size() == 54);
  CHECK(float8_rows(p) == 18);
  for (const PlanEvaluation& e : p.grid) {
    const PlanConfig& c = e.config;
    if (c.float8.empty()) {
      CHECK_FALSE(c.float8_all_gather);
      continue;
    }
    CHECK(c.precision == "bf16");
    CHECK(c.optimizer == "adamw");
    CHECK_FALSE(c.float8_all_gather);
    CHECK((c.float8 == "tensorwise" || c.float8 == "rowwise"));
    // predicted (exhaustive), accepted, and the model states bound (without float8: the parameters keep
    // their dtype) below what the run holds
    CHECK(e.evaluated);
    CHECK(e.error.empty());
    CHECK(e.model_states_bytes <= e.peak_reserved_bytes);
    CHECK(e.model_states_bytes > 0);
  }
  std::remove(model.c_str());
}

// Four GPUs (4 a node), global batch 8. The small Llama's layouts: (1, 1), TP 2, TP 4 (8 heads, 8 key/value
// heads, MLP 1024 and seq 256 divide by 4); no pipeline (gpus / tp_max = 1). Sequences a replica: 2 at
// (1, 1) (micro-batches 1, 2), 4 at TP 2 (1, 2, 4), 8 at TP 4 (1, 2, 4, 8). A sharded scheme needs two
// replicas, so ZeRO-1/2/3 and FSDP2 run at (1, 1) and TP 2 only (2 + 3 = 5 configurations) and DDP at all
// three (2 + 3 + 4 = 9): 9 + 4 x 5 = 29 a (precision, checkpointing, optimizer), x 2 x 3 x 2 = 348 without
// float8. float8 runs under FSDP2 only here (torchtitan's data parallelism; no DDP or ZeRO), bf16, AdamW: 2
// recipes x 3 checkpointing modes x 5 = 30, so 378. Tensorwise gathers in float8 (enable_fsdp_float8_all_
// gather), rowwise does not (torchtitan asserts against it with a recipe_name).
// On an A100 (compute capability 8.0) torchtitan's Float8Converter warns and trains without float8: the grid
// is the 348 without it.
TEST_CASE("plan --allow float8: FSDP2 rows on H100s, none on A100s, counted by hand", "[plan][float8]") {
  const std::string model = write_small_llama("vramsim_test_plan_float8_b.json");
  const PlanRequest r = small_request(model, "h100", 4, 8);
  const PlanResult p = plan(r);
  CHECK(p.grid.size() == 378);
  CHECK(float8_rows(p) == 30);
  int tp2 = 0;
  for (const PlanEvaluation& e : p.grid) {
    const PlanConfig& c = e.config;
    if (c.float8.empty()) {
      continue;
    }
    CHECK(c.fsdp == "fsdp2");
    CHECK(c.zero == 0);
    CHECK(c.precision == "bf16");
    CHECK(c.optimizer == "adamw");
    CHECK(c.float8_all_gather == (c.float8 == "tensorwise"));
    CHECK(c.tp <= 2);
    tp2 += c.tp == 2 ? 1 : 0;
  }
  CHECK(tp2 == 2 * 3 * 3);  // 2 recipes x 3 checkpointing modes x 3 micro-batches
  CHECK(float8_supported(r));

  PlanRequest a100 = r;
  a100.gpu = "a100";
  CHECK_FALSE(float8_supported(a100));
  const PlanResult q = plan(a100);
  CHECK(q.grid.size() == 348);
  CHECK(float8_rows(q) == 0);
  int status = -1;
  CHECK_THAT(
      test::run_cli("plan --model " + model +
                        " --gpu a100 --gpus 4 --gpus-per-node 4 --global-batch 8 --seq 256 --allow float8",
                    &status),
      Catch::Contains("plan: --allow float8 adds nothing on A100-80GB (compute capability 8.0): float8 "
                      "training needs FP8 tensor cores"));
  CHECK(status == 0);
  // MI250X: ROCm reports 9.0, but it has no FP8 path (the table's FP8 FLOP/s 0) and torch._scaled_mm refuses
  // it ("only supported on ... ROCm MI300+"); MI300X (9.4) has one
  PlanRequest mi = r;
  mi.gpu = "mi250x";
  CHECK_FALSE(float8_supported(mi));
  mi.gpu = "mi300x";
  CHECK(float8_supported(mi));
  mi.gpu = "l4";  // 8.9
  CHECK(float8_supported(mi));
  std::remove(model.c_str());
}

// A float8 row's command, run through `vramsim predict`, gives the row's peak reserved memory (the plan
// predicts with the same options, predict_args()); its settings carry torchtitan's own config keys
// (torchtitan/config/job_config.py: Model.converters, Float8.enable_fsdp_float8_all_gather, recipe_name,
// filter_fqns).
TEST_CASE("plan --allow float8: a row's command gives the row's memory, its torchtitan settings",
          "[plan][float8]") {
  const std::string model = write_small_llama("vramsim_test_plan_float8_c.json");
  PlanRequest r = small_request(model, "h100", 4, 8);
  r.exhaustive = true;
  const PlanResult p = plan(r);
  int checked = 0;
  for (const char* recipe : {"tensorwise", "rowwise"}) {
    const auto row = std::find_if(p.grid.begin(), p.grid.end(), [&](const PlanEvaluation& e) {
      return e.config.float8 == recipe && e.config.checkpointing == "full" && e.fits;
    });
    REQUIRE(row != p.grid.end());
    const std::string command = predict_command(r, row->config);
    CHECK_THAT(command, Catch::Contains(std::string(" --float8 ") + recipe));
    CHECK((command.find("--float8-all-gather") != std::string::npos) ==
          (std::string(recipe) == "tensorwise"));
    int status = -1;
    const std::string out =
        test::run_cli(command.substr(std::string("vramsim ").size()) + " --json", &status);
    REQUIRE(status == 0);
    const nlohmann::json j = nlohmann::json::parse(out);
    CHECK(j.at("peak_reserved_bytes").get<std::int64_t>() == row->peak_reserved_bytes);
    const std::string settings = trainer_settings(r, row->config);
    CHECK_THAT(settings, Catch::Contains("torchtitan --model.converters float8"));
    CHECK_THAT(settings, Catch::Contains("--float8.filter_fqns output"));
    // (1, 1) fits, so the layout rule tries no TP 2 of the same settings: FSDP2 over the 4 GPUs
    CHECK(row->config.tp == 1);
    CHECK_THAT(settings, Catch::Contains("--parallelism.data_parallel_shard_degree 4"));
    CHECK_THAT(settings, Catch::Contains("--activation_checkpoint.mode full"));
    if (std::string(recipe) == "tensorwise") {
      CHECK_THAT(settings, Catch::Contains("--float8.enable_fsdp_float8_all_gather"));
      CHECK_THAT(settings, !Catch::Contains("recipe_name"));
    } else {
      CHECK_THAT(settings, Catch::Contains("--float8.recipe_name rowwise"));
      CHECK_THAT(settings, !Catch::Contains("all_gather"));
    }
    CHECK_THAT(describe(row->config), Catch::Contains(std::string("float8 ") + recipe));
    ++checked;
  }
  CHECK(checked == 2);
  std::remove(model.c_str());
}

// The bounded search with float8 rows finds the exhaustive search's best, every row it predicted with the
// same figures; and shards merged give the single run's grid, float8 settings included.
TEST_CASE("plan --allow float8: bounded against exhaustive, and shards merged", "[plan][float8]") {
  const std::string model = write_small_llama("vramsim_test_plan_float8_d.json");
  const PlanRequest r = small_request(model, "h100", 4, 8);
  // the same best as the exhaustive search, and every skipped row one that does not fit or is slower
  const PlanResult fast = check_against_exhaustive(r);
  for (const PlanEvaluation& e : fast.grid) {
    if (e.evaluated && e.error.empty() && !e.config.float8.empty()) {
      CHECK(e.model_states_bytes <= e.peak_reserved_bytes);
    }
  }

  std::vector<nlohmann::json> parts;
  std::vector<std::string> names;
  for (int k = 0; k < 3; ++k) {
    PlanRequest s = r;
    s.shard = k;
    s.shards = 3;
    parts.push_back(nlohmann::json::parse(plan_shard_json(s, plan(s))));
    names.push_back("shard " + std::to_string(k + 1));
  }
  PlanRequest merged_request;
  const PlanResult merged = merge_plan_shards(parts, names, merged_request);
  REQUIRE(merged.grid.size() == fast.grid.size());
  for (std::size_t i = 0; i < merged.grid.size(); ++i) {
    CHECK(merged.grid[i].config.float8 == fast.grid[i].config.float8);
    CHECK(merged.grid[i].config.float8_all_gather == fast.grid[i].config.float8_all_gather);
    CHECK(merged.grid[i].needed_bytes == fast.grid[i].needed_bytes);
  }
  REQUIRE(merged.best.has_value());
  CHECK(*merged.best == *fast.best);
  std::remove(model.c_str());
}

TEST_CASE("plan --allow: an unknown lever names float8 among the known ones", "[plan][float8][quick]") {
  int status = -1;
  CHECK_THAT(
      test::run_cli("plan --model gpt2 --gpu h100 --global-batch 4 --seq 128 --allow fp8", &status),
      Catch::Contains("--allow: unknown lever 'fp8' (known: lora, qlora, offload, compile, cp, float8)"));
  CHECK(status == 2);
}
