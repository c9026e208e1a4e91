// `predict --moe-imbalance-dist` (sim/cli/moe_routing.h): the parser's refusals, and the sweep's bisection
// checked against predictions at its answer (the largest fitting F fits, F + tolerance does not) and at the
// two ends of the range (all fit: probability 0; none fits: 1).
#include <catch2/catch.hpp>

#include "sim/cli/moe_routing.h"
#include "sim/core/error.h"
#include "sim/predict/step_prediction.h"
#include "test_paths.h"

using namespace vramsim;
using Catch::Matchers::Contains;

namespace {

// tiny-mixtral (64 experts, top-2), Megatron's layer with ep 32 over 32 DDP ranks (2 experts a rank),
// batch 32 x 256.
PredictRequest request(const std::string& capacity) {
  RequestArgs a;
  a.model = test::test_data("tiny-mixtral.config.json").string();
  a.capacity = capacity;
  a.batch = 32;
  a.seq = 256;
  a.steps = 1;
  a.world_size = 32;
  a.ep = 32;
  return make_request(a);
}

bool fits_at(const PredictRequest& r, double f) {
  PredictRequest x = r;
  x.options.moe.imbalance = f;
  return predict(x).num_ooms == 0;
}

}  // namespace

TEST_CASE("predict --moe-imbalance-dist: uniform:LO..HI or a one-line refusal", "[quick][cli]") {
  const cli::ImbalanceDist d = cli::parse_imbalance_dist("uniform:1..2.5");
  CHECK(d.lo == 1.0);
  CHECK(d.hi == 2.5);
  CHECK_THROWS_WITH(cli::parse_imbalance_dist("normal:1..2"), Contains("is not uniform:LO..HI"));
  CHECK_THROWS_WITH(cli::parse_imbalance_dist("uniform:1..x"), Contains("is not uniform:LO..HI"));
  CHECK_THROWS_WITH(cli::parse_imbalance_dist("uniform:0.5..2"), Contains("1 <= LO <= HI"));
  CHECK_THROWS_WITH(cli::parse_imbalance_dist("uniform:2..1"), Contains("1 <= LO <= HI"));
}

TEST_CASE("predict --moe-imbalance-dist: the OOM probability brackets the largest fitting F", "[cli]") {
  const cli::ImbalanceDist range{1.0, 16.0};
  SECTION("a device far larger than the run: every F fits") {
    const cli::ImbalanceSweep s = cli::sweep_imbalance(request("100GiB"), range);
    CHECK(s.oom_probability == 0.0);
    CHECK(s.grid.size() == 4);
  }
  SECTION("a device too small for the weights: no F fits") {
    const cli::ImbalanceSweep s = cli::sweep_imbalance(request("1MiB"), range);
    CHECK(s.oom_probability == 1.0);
    CHECK_FALSE(s.any_fits);
  }
  SECTION("in between: F fits up to the answer and not a tolerance past it") {
    // a byte less than F = 16 allocates at its peak: F = 16 cannot fit, F = 1 (far fewer rows) can
    const cli::ImbalanceSweep wide = cli::sweep_imbalance(request("100GiB"), range);
    const std::int64_t lo = wide.grid.front().peak_allocated_bytes,
                       hi = wide.grid.back().peak_allocated_bytes;
    REQUIRE(hi > lo);  // the busiest rank receives more rows as F grows
    const PredictRequest r = request(std::to_string(hi - 1) + "B");
    const cli::ImbalanceSweep s = cli::sweep_imbalance(r, range);
    REQUIRE(s.any_fits);
    REQUIRE(s.oom_probability > 0.0);
    REQUIRE(s.oom_probability < 1.0);
    CHECK(fits_at(r, s.largest_fitting));
    CHECK_FALSE(fits_at(r, s.largest_fitting + s.tolerance));
    CHECK(s.oom_probability == Approx((16.0 - s.largest_fitting) / 15.0));
  }
}
