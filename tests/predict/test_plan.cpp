// `vramsim plan` (sim/predict/plan.h): the grid it searches, counted by hand; the pruning rule; the decision
// path's order; determinism over threads; refused configurations; bad input.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "run_cli.h"
#include "sim/core/error.h"
#include "sim/predict/plan.h"

using namespace vramsim;

namespace {

PlanRequest gpt2(const std::string& gpu, std::int64_t global_batch, std::int64_t seq) {
  PlanRequest r;
  r.model = "gpt2";
  r.gpu = gpu;
  r.global_batch = global_batch;
  r.seq = seq;
  r.threads = 2;
  return r;
}

bool same_settings_but_micro(const PlanConfig& a, const PlanConfig& b) {
  return a.precision == b.precision && a.checkpointing == b.checkpointing && a.zero == b.zero &&
         a.optimizer == b.optimizer && a.adapters == b.adapters && a.offload == b.offload &&
         a.compile == b.compile;
}

}  // namespace

// One H100, global batch 16: the grid is 2 precisions (amp-bf16, bf16) x 5 micro-batches (the divisors of 16)
// x 3 checkpointing modes x 2 optimizers = 60 configurations, all of which fit GPT-2 small at 256 tokens; the
// decision path is the fp32 baseline alone (it fits), one more prediction.
TEST_CASE("plan: the grid, the best and the Pareto front on a GPU everything fits", "[predict]") {
  const PlanResult p = plan(gpt2("h100", 16, 256));
  CHECK(p.grid.size() == 60);
  CHECK(p.configurations_pruned == 0);
  CHECK(p.configurations_evaluated == 61);
  REQUIRE(p.decision_path.size() == 1);
  CHECK(p.decision_path[0].lever == "baseline");
  CHECK(p.decision_path[0].result.fits);
  REQUIRE(p.best.has_value());
  for (const PlanEvaluation& e : p.grid) {
    CHECK(e.fits);
    CHECK(e.tokens_per_s <= p.grid[*p.best].tokens_per_s);
  }
  // The front: memory and speed both increase along it, and nothing in the grid beats a point on both.
  REQUIRE_FALSE(p.pareto.empty());
  for (std::size_t k = 1; k < p.pareto.size(); ++k) {
    CHECK(p.grid[p.pareto[k]].needed_bytes >= p.grid[p.pareto[k - 1]].needed_bytes);
    CHECK(p.grid[p.pareto[k]].tokens_per_s > p.grid[p.pareto[k - 1]].tokens_per_s);
  }
  for (std::size_t i : p.pareto) {
    for (const PlanEvaluation& e : p.grid) {
      CHECK_FALSE((e.needed_bytes < p.grid[i].needed_bytes && e.tokens_per_s > p.grid[i].tokens_per_s));
    }
  }
  CHECK(p.pareto.back() == *p.best);
}

// A T4 (16 GB) and GPT-2 at 32 x 1024: the large micro-batches do not fit. A configuration is skipped only
// when a smaller micro-batch of the same settings was predicted and did not fit; the decision path tries the
// levers in the seeds' order and stops at the first configuration that fits.
TEST_CASE("plan: pruning by micro-batch and the decision path on a tight GPU", "[predict]") {
  const PlanResult p = plan(gpt2("t4", 32, 1024));
  CHECK(p.grid.size() == 2 * 6 * 3 * 2);  // divisors of 32: 1, 2, 4, 8, 16, 32
  CHECK(p.configurations_pruned > 0);
  for (std::size_t i = 0; i < p.grid.size(); ++i) {
    if (p.grid[i].evaluated) {
      continue;
    }
    bool smaller_failed = false;
    for (const PlanEvaluation& e : p.grid) {
      smaller_failed =
          smaller_failed || (e.evaluated && !e.fits && same_settings_but_micro(e.config, p.grid[i].config) &&
                             e.config.micro_batch < p.grid[i].config.micro_batch);
    }
    CHECK(smaller_failed);
  }
  REQUIRE(p.decision_path.size() >= 2);
  CHECK(p.decision_path.front().lever == "baseline");
  CHECK_FALSE(p.decision_path.front().result.fits);
  CHECK(p.decision_path.back().result.fits);
  const std::vector<std::string> order = {
      "baseline",   "mixed precision", "micro-batch with accumulation", "activation checkpointing",
      "ZeRO stage", "8-bit optimizer"};
  std::size_t last = 0;
  for (const PlanStep& s : p.decision_path) {
    const auto at = static_cast<std::size_t>(std::find(order.begin(), order.end(), s.lever) - order.begin());
    REQUIRE(at < order.size());
    CHECK(at >= last);
    last = at;
  }
  REQUIRE(p.best.has_value());
  CHECK(p.grid[*p.best].needed_bytes <= p.limit_bytes);
}

TEST_CASE("plan: the result does not depend on the number of threads", "[predict]") {
  PlanRequest one = gpt2("t4", 8, 1024);
  one.threads = 1;
  PlanRequest two = one;
  two.threads = 2;
  const PlanResult a = plan(one);
  const PlanResult b = plan(two);
  REQUIRE(a.grid.size() == b.grid.size());
  for (std::size_t i = 0; i < a.grid.size(); ++i) {
    CHECK(a.grid[i].evaluated == b.grid[i].evaluated);
    CHECK(a.grid[i].needed_bytes == b.grid[i].needed_bytes);
    CHECK(a.grid[i].tokens_per_s == b.grid[i].tokens_per_s);
  }
  CHECK(a.best == b.best);
  CHECK(a.pareto == b.pareto);
}

// The CS336 staff code has no nn.Linear for PEFT to wrap: every LoRA configuration is refused with the
// simulator's message, counted, and the search goes on.
TEST_CASE("plan: refused configurations are reported and the search goes on", "[predict]") {
  PlanRequest r;
  r.model = "cs336-small";
  r.gpu = "h100";
  r.global_batch = 2;
  r.seq = 128;
  r.allow = {"lora"};
  const PlanResult p = plan(r);
  CHECK(p.grid.size() ==
        2 * 2 * 3 * 2 * 2);      // precisions x divisors of 2 x checkpointing x optimizers x adapters
  CHECK(p.errors == 2 * 3 * 2);  // the LoRA groups, one prediction each (then skipped)
  REQUIRE(p.best.has_value());
  CHECK(p.grid[*p.best].config.adapters.empty());
}

TEST_CASE("plan: bad requests are one-line errors", "[quick][predict]") {
  PlanRequest r = gpt2("h100", 7, 128);
  r.gpus = 2;
  CHECK_THROWS_WITH(plan(r), Catch::Contains("--global-batch: 7 sequences do not divide over 2 GPUs"));
  r = gpt2("h100", 8, 128);
  r.allow = {"fp8"};
  CHECK_THROWS_WITH(plan(r), Catch::Contains("--allow: unknown lever 'fp8'"));
  r = gpt2("", 8, 128);
  CHECK_THROWS_AS(plan(r), InputError);
}

TEST_CASE("cli: plan --json and --csv", "[predict]") {
  const std::string csv = "vramsim_test_plan.csv";
  int status = -1;
  const nlohmann::json j = nlohmann::json::parse(
      test::run_cli("plan --model gpt2 --gpu h100 --global-batch 4 --seq 128 --json --csv " + csv, &status));
  CHECK(status == 0);
  for (const char* key : {"best", "decision_path", "pareto", "configurations_evaluated"}) {
    CHECK(j.contains(key));
  }
  for (const char* key : {"command", "fits", "peak_reserved_bytes", "headroom_bytes", "tokens_per_s"}) {
    CHECK(j["best"].contains(key));
  }
  CHECK(j["best"]["command"].get<std::string>().rfind("vramsim predict --model gpt2 --gpu h100", 0) == 0);
  std::ifstream f(csv);
  int lines = 0;
  for (std::string line; std::getline(f, line);) {
    ++lines;
  }
  std::remove(csv.c_str());
  CHECK(lines == 1 + 2 * 3 * 3 * 2);  // header + precisions x divisors of 4 x checkpointing x optimizers
  CHECK_THAT(test::run_cli("plan --model gpt2 --gpu h100 --global-batch 3 --gpus 2 --seq 128", &status),
             Catch::Contains("vramsim: error: --global-batch"));
  CHECK(status == 2);
}

// `plan --shard K/N` on N machines and `vramsim merge` of the parts give the single-machine output byte for
// byte, text and JSON; shards that do not belong together are one-line errors.
TEST_CASE("cli: plan --shard and merge reproduce the single run byte for byte", "[predict]") {
  const std::string base = "plan --model gpt2 --gpu t4 --global-batch 8 --seq 1024";
  int status = -1;
  const std::string single_text = test::run_cli(base, &status);
  REQUIRE(status == 0);
  const std::string single_json = test::run_cli(base + " --json", &status);
  std::vector<std::string> files;
  for (int k = 1; k <= 3; ++k) {
    const std::string file = "vramsim_test_shard_" + std::to_string(k) + ".json";
    std::ofstream(file) << test::run_cli(base + " --shard " + std::to_string(k) + "/3", &status);
    CHECK(status == 0);
    files.push_back(file);
  }
  CHECK(test::run_cli("merge " + files[2] + " " + files[0] + " " + files[1], &status) == single_text);
  CHECK(status == 0);
  CHECK(test::run_cli("merge --json " + files[1] + " " + files[2] + " " + files[0], &status) == single_json);
  CHECK_THAT(test::run_cli("merge " + files[0] + " " + files[1], &status),
             Catch::Contains("vramsim: error: merge: shard 3 of 3 is missing"));
  CHECK(status == 2);
  CHECK_THAT(test::run_cli("merge " + files[0] + " " + files[0] + " " + files[1] + " " + files[2], &status),
             Catch::Contains("shard 1 of 3 given twice"));
  const std::string other = "vramsim_test_shard_other.json";
  std::ofstream(other) << test::run_cli("plan --model gpt2 --gpu t4 --global-batch 8 --seq 512 --shard 3/3");
  CHECK_THAT(test::run_cli("merge " + files[0] + " " + files[1] + " " + other, &status),
             Catch::Contains("a shard of another plan"));
  CHECK_THAT(test::run_cli(base + " --shard 0/3", &status), Catch::Contains("--shard: '0/3' is not K/N"));
  CHECK(status == 2);
  files.push_back(other);
  for (const std::string& f : files) {
    std::remove(f.c_str());
  }
}
