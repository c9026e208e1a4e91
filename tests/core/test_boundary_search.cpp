// search_boundary (sim/core/boundary_search.h): the answer is a monotone test's boundary whatever the cost
// curve, and a straight cost needs few probes. Expected values are worked by hand below.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "sim/core/boundary_search.h"

namespace vramsim {
namespace {

struct Recorded {
  std::vector<std::int64_t> probed;
  BoundaryResult result;
};

// cost(v) for v in [1, max]; passes while cost <= limit.
template <typename Cost>
Recorded search(std::int64_t start, std::int64_t max_value, std::int64_t limit, Cost cost) {
  Recorded r;
  r.result = search_boundary(start, max_value, limit, [&](std::int64_t v) {
    r.probed.push_back(v);
    const std::int64_t c = cost(v);
    return BoundaryProbe{c <= limit, c};
  });
  return r;
}

TEST_CASE("boundary search: a straight cost is found in four probes", "[core][boundary-search]") {
  // cost = 100 + 10 v, limit 345: 100 + 10 x 24 = 340 passes, 350 at 25 fails; the answer is 24.
  // Probes by hand: 4 (start, 140), 8 (doubling, 180), the secant through them: 8 + (345 - 180) / 10 = 24.5,
  // floor 24 (340, passes); the secant through 8 and 24 again says 24.5, in [lo, lo + 1): the neighbour 25
  // (350, fails) closes the bracket [24, 25], four probes. Doubling and bisection would probe 4, 8, 16, 32,
  // 24, 28, 26, 25: eight.
  const Recorded r = search(4, 1 << 20, 345, [](std::int64_t v) { return 100 + 10 * v; });
  CHECK(r.result.best == 24);
  CHECK_FALSE(r.result.best_is_cap);
  CHECK(r.probed == std::vector<std::int64_t>{4, 8, 24, 25});
}

TEST_CASE("boundary search: the boundary of every monotone test, as brute force finds it",
          "[core][boundary-search]") {
  // Curves the secant gets wrong: convex, concave, a step (a new allocator segment), flat then steep, and a
  // failing value whose cost stays under the limit (an OOM). The answer must be the largest passing value.
  struct Curve {
    const char* name;
    std::int64_t (*cost)(std::int64_t);
  };
  const Curve curves[] = {
      {"convex", [](std::int64_t v) { return v * v; }},
      {"concave", [](std::int64_t v) { return 1000 * v / (v + 50); }},
      {"step", [](std::int64_t v) { return v < 37 ? 10 * v : 10 * v + 400; }},
      {"flat then steep", [](std::int64_t v) { return v < 60 ? 5 : 5 + (v - 59) * 1000; }},
  };
  for (const Curve& c : curves) {
    for (std::int64_t limit : {0, 3, 99, 400, 777, 1000, 2500, 5000}) {
      for (std::int64_t start : {1, 3, 16, 100}) {
        const std::int64_t max_value = 200;
        std::int64_t expected = 0;
        for (std::int64_t v = 1; v <= max_value && c.cost(v) <= limit; ++v) {
          expected = v;
        }
        const Recorded r = search(start, max_value, limit, c.cost);
        INFO(c.name << " limit " << limit << " start " << start);
        CHECK(r.result.best == expected);
        CHECK(r.result.best_is_cap == (expected == max_value));
        // At most about twice bisection's probes over [1, 200]: 2 x (8 doubling/halving + 8 bisection).
        CHECK(r.probed.size() <= 32);
      }
    }
  }
}

TEST_CASE("boundary search: a failure whose cost is under the limit is still a failure",
          "[core][boundary-search]") {
  // Passing is decided by the probe, not by the cost: values from 30 up fail (an OOM) while their cost, 1,
  // is under the limit. The secant through such points points outside the bracket, so the search bisects.
  std::vector<std::int64_t> probed;
  const BoundaryResult r = search_boundary(8, 1000, 500, [&](std::int64_t v) {
    probed.push_back(v);
    return v < 30 ? BoundaryProbe{true, 10 * v} : BoundaryProbe{false, 1};
  });
  CHECK(r.best == 29);
  CHECK(probed.size() <= 20);
}

}  // namespace
}  // namespace vramsim
