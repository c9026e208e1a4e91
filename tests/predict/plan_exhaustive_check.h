// The plan tests' shared check: the bounded search (bounds, bisection, throughput pruning) against the
// exhaustive one on the same request: the same grid, the same best configuration, and every configuration the
// bounded search skipped is one the exhaustive search shows does not fit or is slower than the best.
#pragma once

#include <catch2/catch.hpp>

#include "sim/plan/plan.h"

namespace vramsim::test {

// Runs `r` bounded and exhaustive and compares them; returns the bounded result.
inline PlanResult check_against_exhaustive(const PlanRequest& r) {
  PlanRequest all_request = r;
  all_request.exhaustive = true;
  const PlanResult fast = plan(r);
  const PlanResult all = plan(all_request);
  REQUIRE(fast.grid.size() == all.grid.size());
  REQUIRE(all.best.has_value());
  REQUIRE(fast.best.has_value());
  const PlanEvaluation& best = all.grid[*all.best];
  CHECK(*fast.best == *all.best);
  CHECK(describe(fast.grid[*fast.best].config) == describe(best.config));
  CHECK(fast.grid[*fast.best].needed_bytes == best.needed_bytes);
  CHECK(fast.grid[*fast.best].tokens_per_s == best.tokens_per_s);
  CHECK(fast.configurations_evaluated < all.configurations_evaluated);
  CHECK(all.configurations_pruned == all.pruned_layout);  // exhaustive: only the layout rule skips
  for (std::size_t i = 0; i < fast.grid.size(); ++i) {
    const PlanEvaluation& f = fast.grid[i];
    const PlanEvaluation& a = all.grid[i];
    INFO(describe(f.config) << " skipped '" << f.skipped << "', exhaustive: skipped '" << a.skipped
                            << "', fits " << a.fits << ", " << a.tokens_per_s << " tokens/s (best "
                            << best.tokens_per_s << ")");
    REQUIRE(describe(f.config) == describe(a.config));
    if (f.evaluated) {
      CHECK(a.evaluated);
      CHECK(f.fits == a.fits);
      CHECK(f.needed_bytes == a.needed_bytes);
      CHECK(f.tokens_per_s == a.tokens_per_s);
    } else if (f.skipped == "model states" || f.skipped == "micro-batch") {
      CHECK_FALSE(a.fits);
    } else if (f.skipped == "throughput") {
      CHECK((!a.fits || a.tokens_per_s <= best.tokens_per_s));
      CHECK(i != *all.best);
    } else {
      CHECK(f.skipped == "layout");
      CHECK(a.skipped == "layout");
    }
  }
  return fast;
}

}  // namespace vramsim::test
