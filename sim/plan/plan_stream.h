// Note [Streaming the grid]: what `vramsim plan` prints of its grid, gathered as the grid's entries are
// finished (plan.h, PlanRequest::keep_grid false), so that a plan keeps no state per configuration beyond
// what the report prints. finish_plan() computes the same figures from a complete grid; this is the same
// computation, one entry at a time, in any order of the entries:
//   * the counts (predicted, refused, skipped by reason) add up;
//   * the best is the fitting entry with the most tokens/s, the first in grid order among equal ones;
//   * the ties are the fitting entries within the time model's error of the best one's tokens/s. The best
//     only grows as entries come, and tied_within_time_model_error(best, t) is monotone in best (a product
//     compared with it), so an entry not tied with the best so far is never tied with the final best: only
//     the entries tied with the best so far are kept;
//   * the Pareto front: an entry is on it when every fitting entry before it in (needed bytes, grid index)
//     order has fewer tokens/s. "Before it with at least its tokens/s" is transitive, so an entry off the
//     front of the entries seen so far stays off it: only the front so far is kept (its tokens/s grow along
//     it).
// tests/predict/test_plan_stream.cpp compares finish() with finish_plan() on complete grids.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "sim/plan/plan.h"

namespace vramsim::plan_detail {

class PlanStream {
 public:
  // `path`: the decision path, whose predictions count as predicted once each when the grid did not predict
  // them (as finish_plan() counts them).
  explicit PlanStream(const std::vector<PlanStep>& path);

  // The grid entry at `index` (each index once, in any order).
  void add(std::size_t index, const PlanEvaluation& e);

  // The counts, best, ties and Pareto front into `out`, whose grid becomes the entries they name (in grid
  // order, each once) and whose decision path is already set.
  void finish(PlanResult& out);

 private:
  void add_tie_candidate(std::size_t index, const PlanEvaluation& e);
  void add_to_front(std::size_t index, const PlanEvaluation& e);

  PlanResult counts_;  // the counters only
  std::set<std::string> path_keys_;
  std::set<std::string> path_keys_in_grid_;  // decision-path configurations the grid predicted
  std::optional<std::pair<std::size_t, PlanEvaluation>> best_;
  std::map<std::size_t, PlanEvaluation> tie_candidates_;  // by grid index; tied with the best so far
  // by (needed bytes, grid index): the Pareto front of the entries so far, tokens/s growing along it
  std::map<std::pair<std::int64_t, std::size_t>, PlanEvaluation> front_;
};

}  // namespace vramsim::plan_detail
