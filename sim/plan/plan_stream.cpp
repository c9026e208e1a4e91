// The report's figures of a plan's grid, gathered one entry at a time (Note [Streaming the grid],
// plan_stream.h).
#include "sim/plan/plan_stream.h"

#include <iterator>

#include "sim/plan/plan_grid.h"
#include "sim/predict/time_model_error.h"

namespace vramsim::plan_detail {

PlanStream::PlanStream(const std::vector<PlanStep>& path) {
  for (const PlanStep& s : path) {
    path_keys_.insert(key_of(s.result.config));
  }
}

void PlanStream::add(std::size_t index, const PlanEvaluation& e) {
  if (!e.evaluated) {
    plan_detail::count_skipped(counts_, e);
    return;
  }
  ++counts_.configurations_evaluated;
  counts_.errors += e.error.empty() ? 0 : 1;
  if (!path_keys_.empty()) {
    const std::string key = key_of(e.config);
    if (path_keys_.count(key) > 0) {
      path_keys_in_grid_.insert(key);
    }
  }
  if (!e.fits) {
    return;
  }
  // the first in grid order among equally fast ones, as finish_plan()'s walk in grid order keeps it
  if (!best_ || e.tokens_per_s > best_->second.tokens_per_s ||
      (e.tokens_per_s == best_->second.tokens_per_s && index < best_->first)) {
    best_.emplace(index, e);
    for (auto it = tie_candidates_.begin(); it != tie_candidates_.end();) {
      const bool tied = tied_within_time_model_error(e.tokens_per_s, it->second.tokens_per_s);
      it = tied ? std::next(it) : tie_candidates_.erase(it);
    }
  }
  add_tie_candidate(index, e);
  add_to_front(index, e);
}

void PlanStream::add_tie_candidate(std::size_t index, const PlanEvaluation& e) {
  if (tied_within_time_model_error(best_->second.tokens_per_s, e.tokens_per_s)) {
    tie_candidates_.emplace(index, e);
  }
}

void PlanStream::add_to_front(std::size_t index, const PlanEvaluation& e) {
  const std::pair<std::int64_t, std::size_t> key{e.needed_bytes, index};
  auto it = front_.lower_bound(key);
  if (it != front_.begin() && std::prev(it)->second.tokens_per_s >= e.tokens_per_s) {
    return;  // one before it is at least as fast
  }
  while (it != front_.end() && it->second.tokens_per_s <= e.tokens_per_s) {
    it = front_.erase(it);  // it comes before them and is at least as fast
  }
  front_.emplace_hint(it, key, e);
}

void PlanStream::finish(PlanResult& out) {
  out.configurations_evaluated = counts_.configurations_evaluated;
  out.configurations_pruned = counts_.configurations_pruned;
  out.pruned_model_states = counts_.pruned_model_states;
  out.pruned_micro_batch = counts_.pruned_micro_batch;
  out.pruned_layout = counts_.pruned_layout;
  out.pruned_throughput = counts_.pruned_throughput;
  out.errors = counts_.errors;
  // the decision path's own predictions, each once (finish_plan())
  for (const std::string& key : path_keys_) {
    out.configurations_evaluated += path_keys_in_grid_.count(key) > 0 ? 0 : 1;
  }
  out.time_model_error = kTimeModelRelativeError;
  out.best.reset();
  out.tied.clear();
  out.pareto.clear();
  // the entries the report names, in grid order
  std::map<std::size_t, PlanEvaluation> kept = tie_candidates_;
  for (const auto& [key, e] : front_) {
    kept.emplace(key.second, e);
  }
  if (best_) {
    kept.emplace(best_->first, best_->second);
  }
  out.grid.clear();
  std::map<std::size_t, std::size_t> position;
  for (auto& [index, e] : kept) {
    e.tied_with_best = best_ && index != best_->first && e.fits &&
                       tied_within_time_model_error(best_->second.tokens_per_s, e.tokens_per_s);
    position[index] = out.grid.size();
    if (e.tied_with_best) {
      out.tied.push_back(out.grid.size());
    }
    out.grid.push_back(e);
  }
  if (best_) {
    out.best = position.at(best_->first);
  }
  for (const auto& [key, e] : front_) {
    out.pareto.push_back(position.at(key.second));
  }
}

}  // namespace vramsim::plan_detail
