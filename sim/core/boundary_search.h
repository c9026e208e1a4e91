// The largest value in [1, max_value] at which a monotone test still passes, found with few probes: `fit`'s
// search for the largest batch (or sequence length) that fits.
//
// Each probe is a whole simulation, so the search spends them where the answer is. A probe returns whether
// the value passes and a cost that grows with the value (peak reserved + context, bytes); the limit is the
// cost at which passing stops. The search keeps a bracket, `lo` (the largest value seen to pass, 0: none) and
// `hi` (the smallest seen to fail, 0: none), and ends when hi = lo + 1, both probed, exactly as bisection
// ends. Where bisection would halve the bracket, it first guesses the boundary by the secant through the two
// most recent measured probes (the step's memory grows almost linearly with batch and length: weights and
// states fixed, activations proportional) and probes the guess if it lies inside the bracket; when the secant
// says the largest value seen to pass is the boundary, it probes the value after it, which settles the
// answer. A guess beyond four times the largest value seen to pass (a nearly flat secant) becomes a step to
// four times it, and a guess outside the bracket (the cost jumped: an allocator segment, a new code path)
// falls back to doubling, halving or bisection, as does the probe after a failed guess and after three
// passing guesses in a row (a secant that keeps falling short), so a cost that bends away from the secant
// costs at most a few times bisection's probes, never a walk one value at a time. A probe that could not
// measure its cost (an OOM: the peak it saw is capped by the device) is left out of the secant. Whatever the
// guesses, the answer is the boundary of a monotone test, the value bisection finds; only the number of
// probes differs.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>

namespace vramsim {

struct BoundaryProbe {
  bool passes = false;
  std::int64_t cost = 0;   // grows with the value; passing needs cost <= the search's limit
  bool cost_known = true;  // false: the probe could not measure it (an OOM caps what it saw)
};

struct BoundaryResult {
  std::int64_t best = 0;     // largest value seen to pass (0: even 1 fails)
  bool best_is_cap = false;  // `best` is max_value and passed: the real boundary may be beyond it
};

// `probe(value)` for values in [1, max_value]; `start` is where the search begins (clamped into that range).
template <typename Probe>
BoundaryResult search_boundary(std::int64_t start, std::int64_t max_value, std::int64_t limit,
                               Probe&& probe) {
  max_value = std::max<std::int64_t>(1, max_value);
  std::int64_t lo = 0;
  std::int64_t hi = 0;
  struct Point {
    std::int64_t value = 0;
    std::int64_t cost = 0;
  };
  std::optional<Point> last;
  std::optional<Point> before_last;
  auto run = [&](std::int64_t v) {
    const BoundaryProbe p = probe(v);
    if (p.cost_known) {
      before_last = last;
      last = Point{v, p.cost};
    }
    (p.passes ? lo : hi) = v;
    return p.passes;
  };
  // The secant's estimate of the boundary: where the line through the last two measured probes reaches the
  // limit. None without two such probes or with a cost that does not grow between them.
  auto secant_estimate = [&]() -> std::optional<double> {
    if (!last || !before_last || last->value == before_last->value || last->cost == before_last->cost) {
      return std::nullopt;
    }
    const double slope = static_cast<double>(last->cost - before_last->cost) /
                         static_cast<double>(last->value - before_last->value);
    if (!(slope > 0.0)) {
      return std::nullopt;
    }
    return static_cast<double>(last->value) + static_cast<double>(limit - last->cost) / slope;
  };
  start = std::clamp<std::int64_t>(start, 1, max_value);
  run(start);
  // A guess is the secant's estimate when it lies inside the bracket, or lo's neighbour when the estimate
  // says lo is the boundary. After a failed guess, and after three passing guesses in a row (the secant keeps
  // falling short), the next probe is a safe step: doubling, halving or bisection.
  bool failed_guess = false;
  int passing_guesses = 0;
  while (hi == 0 || hi - lo > 1) {
    if (hi == 0 && lo == max_value) {
      return {lo, true};
    }
    const std::int64_t upper = hi == 0 ? max_value : hi - 1;  // the largest value still unknown
    std::int64_t next = 0;
    bool guess = false;
    const std::optional<double> at = failed_guess || passing_guesses >= 3 ? std::nullopt : secant_estimate();
    if (at && hi == 0 && lo >= 1 && *at >= 16.0 * static_cast<double>(lo)) {
      next = std::min(4 * lo,
                      max_value);  // far beyond anything measured: a nearly flat secant; step, don't leap
    } else if (at && *at >= static_cast<double>(lo + 1) && *at < static_cast<double>(upper + 1)) {
      next = static_cast<std::int64_t>(std::floor(*at));
      guess = true;
    } else if (at && lo >= 1 && *at >= static_cast<double>(lo) && *at < static_cast<double>(lo + 1)) {
      next = lo + 1;  // the secant says lo is the answer: its neighbour settles it
      guess = true;
    } else if (hi == 0) {
      next = std::min(lo * 2, max_value);
    } else if (lo == 0) {
      next = hi / 2;
    } else {
      next = lo + (hi - lo) / 2;
    }
    const bool passed = run(next);
    failed_guess = guess && !passed;
    passing_guesses = guess && passed ? passing_guesses + 1 : 0;
  }
  return {lo, false};
}

}  // namespace vramsim
