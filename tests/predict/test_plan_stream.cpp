// A plan that does not keep its grid (PlanRequest::keep_grid false, `vramsim plan` without --csv or --shard)
// gathers the report's figures one entry at a time (Note [Streaming the grid], sim/plan/plan_stream.h).
// The reference is finish_plan() over the complete grid, the computation the report used before: the same
// counts, best, ties and Pareto front, on random grids fed in a random order (many equal speeds and sizes, so
// the first-in-grid-order rules are exercised), on real plans, and as the bytes the CLI prints.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "run_cli.h"
#include "sim/plan/plan.h"
#include "sim/plan/plan_stream.h"
#include "test_rng.h"

using namespace vramsim;

namespace {

// A configuration's identity in these grids: its micro-batch (distinct per entry).
std::vector<std::int64_t> ids(const PlanResult& p, const std::vector<std::size_t>& positions) {
  std::vector<std::int64_t> out;
  for (std::size_t i : positions) {
    out.push_back(p.grid[i].config.micro_batch);
  }
  return out;
}

// What the report prints of a result: the counts, and the best, tied and Pareto entries with their figures.
void check_same_report(const PlanResult& kept, const PlanResult& streamed) {
  CHECK(streamed.configurations_evaluated == kept.configurations_evaluated);
  CHECK(streamed.configurations_pruned == kept.configurations_pruned);
  CHECK(streamed.pruned_model_states == kept.pruned_model_states);
  CHECK(streamed.pruned_micro_batch == kept.pruned_micro_batch);
  CHECK(streamed.pruned_layout == kept.pruned_layout);
  CHECK(streamed.pruned_throughput == kept.pruned_throughput);
  CHECK(streamed.errors == kept.errors);
  CHECK(streamed.time_model_error == kept.time_model_error);
  REQUIRE(streamed.best.has_value() == kept.best.has_value());
  const auto same = [&](std::size_t s, std::size_t k) {
    const PlanEvaluation& a = streamed.grid[s];
    const PlanEvaluation& b = kept.grid[k];
    CHECK(describe(a.config) == describe(b.config));
    CHECK(a.config.micro_batch == b.config.micro_batch);
    CHECK(a.needed_bytes == b.needed_bytes);
    CHECK(a.tokens_per_s == b.tokens_per_s);
    CHECK(a.fits == b.fits);
    CHECK(a.tied_with_best == b.tied_with_best);
  };
  if (kept.best) {
    same(*streamed.best, *kept.best);
  }
  REQUIRE(streamed.tied.size() == kept.tied.size());
  for (std::size_t k = 0; k < kept.tied.size(); ++k) {
    same(streamed.tied[k], kept.tied[k]);
  }
  REQUIRE(streamed.pareto.size() == kept.pareto.size());
  for (std::size_t k = 0; k < kept.pareto.size(); ++k) {
    same(streamed.pareto[k], kept.pareto[k]);
  }
}

}  // namespace

TEST_CASE("plan stream: the report's figures of random grids in a random order are finish_plan's",
          "[quick][predict]") {
  test::Rng rng{40};
  // speeds around the calibrated 16 % band (1,000 x 1.16 = 1,160: tied; 1,159.9: not), some equal, some zero
  const std::vector<double> speeds{0.0, 862.0, 862.1, 1000.0, 1000.0, 1159.9, 1160.0, 1200.0, 1391.9, 1392.0};
  const std::vector<const char*> reasons{"model states", "micro-batch", "layout", "throughput"};
  for (int trial = 0; trial < 500; ++trial) {
    INFO("trial " << trial);
    const std::size_t n = 1 + rng.below(40);
    PlanResult full;
    for (std::size_t i = 0; i < n; ++i) {
      PlanEvaluation e;
      e.config.micro_batch = static_cast<std::int64_t>(i + 1);
      e.evaluated = rng.below(10) < 7;
      if (!e.evaluated) {
        e.skipped = reasons[rng.below(reasons.size())];
      } else if (rng.below(20) == 0) {
        e.error = "refused";
      } else {
        e.fits = rng.below(10) < 6;
        e.tokens_per_s = speeds[rng.below(speeds.size())];
        e.needed_bytes = static_cast<std::int64_t>(rng.below(5)) << 30;  // equal sizes are common
      }
      full.grid.push_back(e);
    }
    // the decision path: a configuration of the grid (predicted there or not), one outside it, one twice
    for (int k = 0; k < 3; ++k) {
      PlanStep s;
      s.result.config.micro_batch =
          k == 1 ? 1000 : static_cast<std::int64_t>(1 + rng.below(static_cast<std::uint64_t>(n)));
      full.decision_path.push_back(s);
    }
    full.decision_path.push_back(full.decision_path.front());
    PlanResult streamed;
    streamed.decision_path = full.decision_path;
    plan_detail::PlanStream stream(streamed.decision_path);
    std::vector<std::size_t> order(n);
    for (std::size_t i = 0; i < n; ++i) {
      order[i] = i;
    }
    for (std::size_t i = n; i > 1; --i) {  // Fisher-Yates with the fixed generator
      std::swap(order[i - 1], order[rng.below(i)]);
    }
    for (std::size_t i : order) {
      stream.add(i, full.grid[i]);
    }
    stream.finish(streamed);
    finish_plan(full);
    check_same_report(full, streamed);
    CHECK(ids(streamed, streamed.tied) == ids(full, full.tied));
    CHECK(ids(streamed, streamed.pareto) == ids(full, full.pareto));
  }
}

// The two real plans of test_plan_search.cpp (one GPU with offload; four GPUs, two per node, with TP 2 and
// TP 2 x PP 2), kept and streamed.
TEST_CASE("plan stream: a plan that keeps only what it prints reports what the whole grid gives",
          "[predict]") {
  const auto request = [](const std::string& model, int gpus, std::int64_t global_batch,
                          const std::vector<std::string>& allow) {
    PlanRequest r;
    r.model = model;
    r.gpu = "t4";
    r.gpus = gpus;
    r.gpus_per_node = 2;
    r.global_batch = global_batch;
    r.seq = 1024;
    r.allow = allow;
    r.threads = 2;
    return r;
  };
  const std::vector<PlanRequest> requests{request("gpt2", 1, 16, {"offload"}),
                                          request("gpt2-medium", 4, 8, {})};
  for (const PlanRequest& r : requests) {
    INFO(r.model << " on " << r.gpus << " GPUs");
    PlanRequest streaming = r;
    streaming.keep_grid = false;
    const PlanResult kept = plan(r);
    const PlanResult streamed = plan(streaming);
    CHECK(kept.grid.size() > streamed.grid.size());
    REQUIRE(kept.best.has_value());
    check_same_report(kept, streamed);
  }
}

// `vramsim plan` keeps its grid only for --csv (every configuration is a row); the report it prints is the
// same byte for byte.
TEST_CASE("plan stream: vramsim plan prints the same with and without --csv", "[predict][cli]") {
  const std::filesystem::path csv = std::filesystem::temp_directory_path() / "vramsim_test_plan_stream.csv";
  const std::string args =
      "plan --model gpt2 --gpu t4 --global-batch 16 --seq 1024 --allow offload --threads 2";
  for (const char* json : {"", " --json"}) {
    int streamed_status = -1;
    int kept_status = -1;
    const std::string streamed = test::run_cli(args + json, &streamed_status);
    const std::string kept = test::run_cli(args + json + " --csv " + csv.string(), &kept_status);
    CHECK(streamed_status == 0);
    CHECK(kept_status == 0);
    CHECK(streamed.find("best") != std::string::npos);
    CHECK(streamed == kept);
  }
  std::filesystem::remove(csv);
}
