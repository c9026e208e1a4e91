// plan's ranking confidence (sim/predict/time_model_error.h, finish_plan in plan.h): configurations whose
// estimated step time is within the time model's error of the best one's are marked tied with it. The
// times below are worked by hand; the band is a parameter here, so the rule is checked apart from the
// calibrated figure (tools/calibrate_clock.py --check checks that figure against the held-back measurements).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "run_cli.h"
#include "sim/plan/plan.h"
#include "sim/predict/time_model_error.h"

using namespace vramsim;

namespace {

PlanEvaluation fitting(std::int64_t micro_batch, double tokens_per_s) {
  PlanEvaluation e;
  e.config.micro_batch = micro_batch;  // distinct configurations: finish_plan counts them by their settings
  e.evaluated = true;
  e.fits = true;
  e.tokens_per_s = tokens_per_s;
  return e;
}

}  // namespace

// Band 10 %: a global batch of 8,192 tokens takes 8,192 / 1,000 = 8.192 s at 1,000 tokens/s; at 910 tokens/s
// it takes 9.002 s, 9.89 % longer (910 x 1.1 = 1,001 >= 1,000): tied; at 909 tokens/s 10.01 % longer
// (909 x 1.1 = 999.9 < 1,000): not tied.
TEST_CASE("plan ties: a step time within the band of the best one's, worked by hand", "[quick][predict]") {
  CHECK(tied_within_time_model_error(1000.0, 910.0, 0.10));
  CHECK_FALSE(tied_within_time_model_error(1000.0, 909.0, 0.10));
  CHECK(tied_within_time_model_error(1000.0, 1000.0, 0.0));  // equal times tie even with no error
  CHECK_FALSE(tied_within_time_model_error(1000.0, 999.0, 0.0));
  CHECK_FALSE(tied_within_time_model_error(1000.0, 0.0, 10.0));  // no time axis: never tied
}

// The calibrated band (16 %): the best at 2,000 tokens/s; 1,725 tokens/s is a step 15.94 % longer
// (2,000 / 1,725 = 1.1594), tied; 1,720 is 16.28 % longer (2,000 / 1,720 = 1.1628), not; a faster
// configuration that does not fit and one that was not predicted are never tied; the best is not tied with
// itself.
TEST_CASE("plan ties: finish_plan marks the configurations tied with the best", "[quick][predict]") {
  REQUIRE(kTimeModelRelativeError == 0.16);
  PlanResult p;
  p.grid = {fitting(1, 1720.0), fitting(2, 2000.0), fitting(4, 1725.0), fitting(8, 2500.0),
            fitting(16, 1990.0)};
  p.grid[3].fits = false;  // faster, but over the limit
  p.grid.push_back(fitting(32, 1999.0));
  p.grid.back().evaluated = false;  // skipped: no prediction
  p.grid.back().fits = false;
  p.grid.back().skipped = "micro-batch";
  finish_plan(p);
  REQUIRE(p.best == 1U);
  CHECK(p.time_model_error == 0.16);
  CHECK(p.tied == std::vector<std::size_t>{2, 4});
  CHECK_FALSE(p.grid[0].tied_with_best);
  CHECK_FALSE(p.grid[1].tied_with_best);
  CHECK(p.grid[2].tied_with_best);
  CHECK_FALSE(p.grid[3].tied_with_best);
  CHECK(p.grid[4].tied_with_best);
  CHECK_FALSE(p.grid[5].tied_with_best);
}

// No configuration fits: there is no best, and nothing is tied.
TEST_CASE("plan ties: nothing is tied without a best", "[quick][predict]") {
  PlanResult p;
  p.grid = {fitting(1, 1000.0), fitting(2, 999.0)};
  p.grid[0].fits = false;
  p.grid[1].fits = false;
  finish_plan(p);
  CHECK_FALSE(p.best.has_value());
  CHECK(p.tied.empty());
}

// predict's --compute-efficiency and --memory-efficiency are fractions of peak: outside (0, 1] a one-line
// error.
TEST_CASE("cli: the roofline's efficiencies out of range are one-line errors", "[predict]") {
  int status = -1;
  CHECK_THAT(
      test::run_cli("predict --model gpt2 --gpu h100 --batch 1 --seq 64 --compute-efficiency 0", &status),
      Catch::Contains("vramsim: error: --compute-efficiency: 0 is not in (0, 1]"));
  CHECK(status == 2);
  CHECK_THAT(
      test::run_cli("predict --model gpt2 --gpu h100 --batch 1 --seq 64 --memory-efficiency 1.5", &status),
      Catch::Contains("vramsim: error: --memory-efficiency: 1.5 is not in (0, 1]"));
  CHECK(status == 2);
}
