// The search of `vramsim plan` (plan.h): each configuration through the step simulator, the grid searched
// family by family with the bounds before simulation (Note [Bounds on speed]), and the result's best, ties
// and Pareto front.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "sim/core/error.h"
#include "sim/core/thread_pool.h"
#include "sim/hub/checkpoint_quantization.h"
#include "sim/plan/plan.h"
#include "sim/plan/plan_grid.h"
#include "sim/plan/plan_stream.h"
#include "sim/predict/gpu_memory.h"
#include "sim/predict/time_model_error.h"

namespace vramsim {
namespace plan_detail {
namespace {

PlanEvaluation evaluate_exact(const PlanRequest& r, const PlanConfig& c, std::int64_t limit_bytes) {
  PlanEvaluation e;
  e.config = c;
  e.evaluated = true;
  e.model_states_bytes = model_states_lower_bound(r, c);
  try {
    const Prediction p = predict(make_request(predict_args(r, c)));
    e.peak_reserved_bytes = p.peak_reserved_bytes;
    // after an OOM the device's reserved memory is capped: what the run needs is at least its allocated
    // bytes without the device limit; a pipeline's prediction is its stage with the most of both
    e.needed_bytes =
        std::max(p.peak_reserved_bytes, p.peak_allocated_needed_bytes) + p.cuda_context_bytes + p.nccl_bytes;
    e.headroom_bytes = limit_bytes - e.needed_bytes;
    e.fits = p.num_ooms == 0 && e.headroom_bytes >= 0;
    if (p.pipeline) {
      for (const Prediction::PipelineStagePeak& s : p.pipeline->simulated) {
        e.fits = e.fits && s.fits;
      }
    }
    // a replica's tokens/s (every rank of a tensor-parallel group or a pipeline works on the same tokens)
    // times the data-parallel replicas
    e.tokens_per_s = p.timing ? p.timing->tokens_per_s * data_parallel_degree(r, c) : 0.0;
  } catch (const InputError& err) {
    e.error = err.what();
  }
  return e;
}

// Note [Probing with fewer micro-batches]: a step's cost in the simulator grows with its micro-batches, and
// a layout with few data-parallel replicas has many (a 70B on 64 GPUs at tp 8 x pp 8 runs the whole global
// batch through one replica). Memory does not grow after the first few: from the second micro-batch on the
// gradients accumulate in place, and under 1F1B stage r holds min(pp - r, M) micro-batches in flight. So a
// configuration of many micro-batches is first predicted with probe_micro_batches() of them (2; pp + 1 with a
// pipeline): that needs no more memory than the configuration, and when it does not fit, neither does the
// configuration; only a probe that fits is followed by the full prediction. test_plan.cpp checks the
// monotonicity on small models.
int probe_micro_batches(const PlanConfig& c) { return c.pp > 1 ? c.pp + 1 : 2; }

// The probe of `c` alone: the configuration's evaluation when the probe does not fit (or is refused);
// nothing when it fits or `c` has too few micro-batches for a probe.
std::optional<PlanEvaluation> failed_probe(const PlanRequest& r, const PlanConfig& c,
                                           std::int64_t limit_bytes) {
  const int probe = probe_micro_batches(c);
  if (c.grad_accumulation <= probe) {
    return std::nullopt;
  }
  PlanConfig q = c;
  q.grad_accumulation = probe;
  PlanEvaluation e = evaluate_exact(r, q, limit_bytes);
  if (e.error.empty() && e.fits) {
    return std::nullopt;
  }
  e.config = c;
  e.probe_micro_batches = e.error.empty() ? probe : 0;
  e.tokens_per_s = 0.0;
  return e;
}

}  // namespace

PlanEvaluation evaluate(const PlanRequest& r, const PlanConfig& c, std::int64_t limit_bytes) {
  if (std::optional<PlanEvaluation> e = failed_probe(r, c, limit_bytes)) {
    return *e;
  }
  return evaluate_exact(r, c, limit_bytes);
}

// Every configuration that fits and whose step time is within the time model's error of the best one's.
namespace {
void mark_ties(PlanResult& out) {
  for (std::size_t i = 0; i < out.grid.size(); ++i) {
    PlanEvaluation& e = out.grid[i];
    e.tied_with_best =
        out.best && i != *out.best && e.fits &&
        tied_within_time_model_error(out.grid[*out.best].tokens_per_s, e.tokens_per_s, out.time_model_error);
    if (e.tied_with_best) {
      out.tied.push_back(i);
    }
  }
}
}  // namespace

namespace {

// Note [Bounds on speed]: the search predicts a configuration only when it could be the answer, the fastest
// grid configuration that fits. Memory is monotone in the micro-batch (test_plan.cpp checks it), so each
// block (one group's layout) has a boundary: the micro-batches up to it fit, those above do not. The time
// model's tokens/s grow with the micro-batch when there is no pipeline (at a fixed local batch a larger
// micro-batch runs the same tokens in fewer, larger kernels and fewer per-micro-batch collectives; a
// pipeline's bubble grows with it instead, so pipeline blocks are searched micro-batch by micro-batch). So
// of a block only its largest micro-batch that fits can be the answer, and its largest micro-batch's tokens/s
// (predicted whether it fits or not) bound every one of its configurations: the block's largest micro-batch
// is predicted first; if it fits, the smaller ones are not predicted ("throughput"); if its tokens/s are
// below the fastest fitting configuration found so far, nothing else of the block is; otherwise a bisection
// finds the boundary, predicting O(log n) micro-batches instead of n. Activation checkpointing and offload
// only add time (recomputation, host transfers), so the family's first group (neither of them) bounds the
// family's other groups at the same layout without any prediction of theirs. "Found so far" is per family
// (one thread, in grid order), started from the fastest decision-path configuration that fits and is in the
// grid, which every shard predicts alike: the result depends on neither the threads nor the shards.
// --exhaustive predicts every configuration instead (only the layout rule stays: Note [Parallel layouts]),
// and test_plan_search.cpp checks that both give the same best configuration.
class FamilySearch {
 public:
  FamilySearch(const PlanRequest& r, std::int64_t limit_bytes, std::int64_t context_bytes,
               const std::map<std::string, PlanEvaluation>& known, double seed)
      : r_(r), limit_(limit_bytes), context_(context_bytes), known_(known), best_(seed) {}

  // The family's groups, layout by layout (a group's layouts in order: the layout rule), each layout's
  // groups in grid order (the first bounds the others). `f` has its configurations (expand_family(), `size`
  // of them); returns the family's entries, block b's at [b.local, b.local + its configurations).
  std::vector<PlanEvaluation> run(const Family& f, std::size_t size,
                                  const std::function<void(std::size_t)>& tick) {
    results_.assign(size, PlanEvaluation{});
    std::vector<GroupState> state(f.groups.size());
    std::size_t layouts = 0;
    for (const Group& g : f.groups) {
      layouts = std::max(layouts, g.blocks.size());
    }
    for (std::size_t k = 0; k < layouts; ++k) {
      std::optional<Bound> family_bound;
      for (std::size_t g = 0; g < f.groups.size(); ++g) {
        if (k >= f.groups[g].blocks.size()) {
          continue;
        }
        const Block& b = f.groups[g].blocks[k];
        const std::optional<Bound> bound = search_block(b, state[g], family_bound);
        if (g == 0) {
          family_bound = bound;
        }
        tick(b.configs.size());
      }
    }
    return std::move(results_);
  }

 private:
  // The tokens/s of a block's largest micro-batch, and whether it fits.
  struct Bound {
    double tokens_per_s = 0.0;
    bool fits = false;
  };

  // Whether nothing a bound covers can be the answer. A configuration as fast as the best one found is not
  // the answer either when it comes later in grid order (the first of equally fast ones is): the family's
  // first group's largest micro-batch comes before the family's other groups.
  bool below_best(const Bound& b) const {
    return b.tokens_per_s < best_ || (b.fits && b.tokens_per_s == best_);
  }

  struct GroupState {
    bool layout_fits = false;           // a block of an earlier layout has a configuration that fits
    std::vector<const Block*> unknown;  // earlier blocks pruned by speed: whether they fit is not known
  };

  PlanEvaluation& slot(const Block& b, std::size_t i) { return results_[b.local + i]; }

  void predict(const Block& b, std::size_t i) {
    const auto it = known_.find(key_of(b.configs[i]));
    PlanEvaluation& s = slot(b, i);
    s = it != known_.end() ? it->second : evaluate(r_, b.configs[i], limit_);
    if (s.fits) {
      best_ = std::max(best_, s.tokens_per_s);
    }
  }

  void skip(const Block& b, std::size_t from, std::size_t to, const char* why) {
    for (std::size_t i = from; i < to; ++i) {
      if (!slot(b, i).evaluated) {
        slot(b, i).skipped = why;
      }
    }
  }

  // Whether the smallest micro-batch of `b` does not fit, found cheaply: its probe (a few micro-batches) when
  // it has one, else its prediction (then in its slot either way). Where memory is tight most blocks fit
  // nothing, and one cheap prediction settles them.
  bool nothing_fits(const Block& b) {
    const PlanConfig& c = b.configs.front();
    if (known_.count(key_of(c)) > 0 || c.grad_accumulation <= probe_micro_batches(c)) {
      predict(b, 0);
      return !slot(b, 0).fits;
    }
    if (std::optional<PlanEvaluation> e = failed_probe(r_, c, limit_)) {
      slot(b, 0) = *e;
      return true;
    }
    return false;
  }

  // Whether one of the group's blocks pruned by speed fits (its smallest micro-batch does).
  bool resolve_unknown(GroupState& g) {
    for (const Block* b : g.unknown) {
      if (!slot(*b, 0).evaluated) {
        predict(*b, 0);
      }
      if (slot(*b, 0).fits) {
        g.layout_fits = true;
        break;
      }
    }
    g.unknown.clear();
    return g.layout_fits;
  }

  // One block; returns the tokens/s of its largest micro-batch when predicted (a bound on every
  // configuration of the block, and of the family's later groups at this layout when it is the first).
  std::optional<Bound> search_block(const Block& b, GroupState& g, std::optional<Bound> family_bound) {
    const std::size_t n = b.configs.size();
    const std::int64_t states = model_states_lower_bound(r_, b.configs.front());
    for (std::size_t i = 0; i < n; ++i) {
      slot(b, i).config = b.configs[i];
      slot(b, i).model_states_bytes = states;
    }
    if (g.layout_fits) {
      skip(b, 0, n, "layout");
      return std::nullopt;
    }
    if (r_.exhaustive) {
      for (std::size_t i = 0; i < n; ++i) {
        predict(b, i);
        g.layout_fits = g.layout_fits || slot(b, i).fits;
      }
      return std::nullopt;
    }
    if (states + context_ > limit_) {
      skip(b, 0, n, "model states");
      return std::nullopt;
    }
    const bool speed_bounds = b.layout.pp == 1;
    if (speed_bounds && family_bound && below_best(*family_bound)) {
      skip(b, 0, n, "throughput");
      g.unknown.push_back(&b);
      return std::nullopt;
    }
    if (!g.unknown.empty() && resolve_unknown(g)) {
      skip(b, 0, n, "layout");
      return std::nullopt;
    }
    if (!speed_bounds) {  // smallest first, until one does not fit
      std::size_t i = 0;
      for (; i < n; ++i) {
        predict(b, i);
        g.layout_fits = g.layout_fits || slot(b, i).fits;
        if (!slot(b, i).fits) {
          break;
        }
      }
      skip(b, i + 1, n, "micro-batch");
      return std::nullopt;
    }
    if (n > 1 && nothing_fits(b)) {
      skip(b, 1, n, "micro-batch");
      return std::nullopt;
    }
    predict(b, n - 1);
    const PlanEvaluation& top = slot(b, n - 1);
    // a refused configuration has no tokens/s: no bound from it
    const Bound bound{top.error.empty() ? top.tokens_per_s : std::numeric_limits<double>::infinity(),
                      top.fits};
    if (top.fits) {
      skip(b, 0, n - 1, "throughput");
      g.layout_fits = true;
      return bound;
    }
    if (bound.tokens_per_s < best_) {
      skip(b, 0, n - 1, "throughput");
      g.unknown.push_back(&b);
      return bound;
    }
    // the boundary: lo fits (-1: none known to), hi does not
    std::ptrdiff_t lo = -1;
    auto hi = static_cast<std::ptrdiff_t>(n) - 1;
    while (hi - lo > 1) {
      const std::ptrdiff_t mid = lo + (hi - lo) / 2;
      predict(b, static_cast<std::size_t>(mid));
      (slot(b, static_cast<std::size_t>(mid)).fits ? lo : hi) = mid;
    }
    skip(b, 0, static_cast<std::size_t>(std::max<std::ptrdiff_t>(lo, 0)), "throughput");
    skip(b, static_cast<std::size_t>(hi) + 1, n, "micro-batch");
    g.layout_fits = lo >= 0;
    return bound;
  }

  const PlanRequest& r_;
  std::int64_t limit_;
  std::int64_t context_;
  const std::map<std::string, PlanEvaluation>& known_;
  std::vector<PlanEvaluation> results_;  // the family's entries (slot())
  double best_;  // tokens/s of the fastest grid configuration found to fit (-1: none yet)
};

// The fastest configuration of the decision path that fits and is a grid configuration: every shard
// predicts the path alike, so it is where every family's search starts.
double seed_of(const PlanRequest& r, const PlanResult& out, const std::vector<Family>& families) {
  std::set<std::string> in_grid;
  for (const PlanStep& s : out.decision_path) {
    if (s.result.fits) {
      in_grid.insert(key_of(s.result.config));
    }
  }
  std::set<std::string> found;
  for (const Family& f : families) {
    for (const Group& g : f.groups) {
      for (const Block& b : g.blocks) {
        for (const PlanConfig& c : block_configs(r, g.base, b.layout)) {
          if (in_grid.count(key_of(c)) > 0) {
            found.insert(key_of(c));
          }
        }
      }
    }
  }
  double seed = -1.0;
  for (const PlanStep& s : out.decision_path) {
    if (s.result.fits && found.count(key_of(s.result.config)) > 0) {
      seed = std::max(seed, s.result.tokens_per_s);
    }
  }
  return seed;
}

// Runs every family of this shard on `threads` threads (a family on one of them, Note [Bounds on speed]). A
// family's entries go into out.grid (PlanRequest::keep_grid) or through a PlanStream into the report's
// figures once the family is searched (Note [Streaming the grid], plan_stream.h); either way only the
// families being searched hold their configurations.
void search_grid(const PlanRequest& r, std::int64_t context_bytes, PlanResult& out,
                 const PlanProgress& progress) {
  std::size_t total = 0;
  const std::vector<Family> families = grid_families(r, total);
  const bool keep = r.keep_grid || r.shards > 1;
  if (keep) {
    out.grid.assign(total, PlanEvaluation{});
  }
  std::map<std::string, PlanEvaluation> known;  // the decision path's predictions
  for (const PlanStep& s : out.decision_path) {
    known.emplace(key_of(s.result.config), s.result);
  }
  const double seed = seed_of(r, out, families);
  PlanStream stream(out.decision_path);
  std::atomic<std::size_t> next{0};
  std::size_t done = 0;
  std::mutex mutex;  // the progress count and the stream
  const std::function<void(std::size_t)> tick = [&](std::size_t n) {
    const std::lock_guard<std::mutex> lock(mutex);
    done += n;
    if (progress) {
      progress(static_cast<int>(done), static_cast<int>(total));
    }
  };
  // a family's entries into their grid slots (each thread its own: no lock) or through the stream
  const auto emit = [&](const Family& f, std::vector<PlanEvaluation>& results) {
    std::unique_lock<std::mutex> lock(mutex, std::defer_lock);
    if (!keep) {
      lock.lock();
    }
    for (const Group& g : f.groups) {
      for (const Block& b : g.blocks) {
        for (std::size_t k = 0; k < b.configs.size(); ++k) {
          if (keep) {
            out.grid[b.first + k] = std::move(results[b.local + k]);
          } else {
            stream.add(b.first + k, results[b.local + k]);
          }
        }
      }
    }
  };
  const auto worker = [&]() {
    for (std::size_t i = next++; i < families.size(); i = next++) {
      Family f = families[i];
      const std::size_t size = expand_family(r, f);
      if (i % static_cast<std::size_t>(r.shards) != static_cast<std::size_t>(r.shard)) {
        for (const Group& g : f.groups) {
          for (const Block& b : g.blocks) {
            for (std::size_t k = 0; k < b.configs.size(); ++k) {
              out.grid[b.first + k].config = b.configs[k];
              out.grid[b.first + k].in_shard = false;
            }
            tick(b.configs.size());
          }
        }
        continue;
      }
      std::vector<PlanEvaluation> results =
          FamilySearch(r, out.limit_bytes, context_bytes, known, seed).run(f, size, tick);
      emit(f, results);
    }
  };
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const std::size_t n = r.threads > 0 ? static_cast<std::size_t>(r.threads) : hw;
  run_on_threads(std::min(n, std::max<std::size_t>(1, families.size())), worker);
  if (!keep) {
    stream.finish(out);
  }
}

}  // namespace

}  // namespace plan_detail

using plan_detail::key_of;
using plan_detail::mark_ties;

void finish_plan(PlanResult& out) {
  out.configurations_evaluated = 0;
  out.configurations_pruned = 0;
  out.pruned_model_states = 0;
  out.pruned_micro_batch = 0;
  out.pruned_layout = 0;
  out.pruned_throughput = 0;
  out.errors = 0;
  out.best.reset();
  out.pareto.clear();
  out.tied.clear();
  out.time_model_error = kTimeModelRelativeError;
  std::map<std::string, bool> predicted;
  for (std::size_t i = 0; i < out.grid.size(); ++i) {
    const PlanEvaluation& e = out.grid[i];
    if (!e.evaluated) {
      plan_detail::count_skipped(out, e);
      continue;
    }
    ++out.configurations_evaluated;
    predicted[key_of(e.config)] = true;
    out.errors += e.error.empty() ? 0 : 1;
    if (e.fits && (!out.best || e.tokens_per_s > out.grid[*out.best].tokens_per_s)) {
      out.best = i;
    }
  }
  mark_ties(out);
  for (const PlanStep& s : out.decision_path) {  // the path's own predictions
    out.configurations_evaluated += predicted.emplace(key_of(s.result.config), true).second ? 1 : 0;
  }
  // The Pareto front of the configurations that fit: less memory, or more tokens/s than every one with less.
  std::vector<std::size_t> fitting;
  for (std::size_t i = 0; i < out.grid.size(); ++i) {
    if (out.grid[i].fits) {
      fitting.push_back(i);
    }
  }
  std::stable_sort(fitting.begin(), fitting.end(), [&out](std::size_t a, std::size_t b) {
    return out.grid[a].needed_bytes < out.grid[b].needed_bytes;
  });
  double best_rate = -1.0;
  for (std::size_t i : fitting) {
    if (out.grid[i].tokens_per_s > best_rate) {
      out.pareto.push_back(i);
      best_rate = out.grid[i].tokens_per_s;
    }
  }
}

PlanResult plan(const PlanRequest& r, const PlanProgress& progress) {
  plan_detail::validate_request(r);
  // every configuration would be refused alike: say why once (checkpoint_quantization.h)
  if (const std::optional<CheckpointQuantization> q = checkpoint_quantization_of(r.model)) {
    refuse_unmodelled_quantization(*q, r.model);
  }
  PlanResult out;
  const GpuMemory d = device_memory(r.gpu, 0, ContextOptions{});
  out.total_bytes = d.total_bytes;
  out.limit_bytes = static_cast<std::int64_t>((1.0 - r.margin) * static_cast<double>(d.total_bytes));
  // the decision path first, in every shard: the search's bound on speed starts from it (Note [Bounds on
  // speed]); only shard 0 reports it
  plan_detail::decide(r, out);
  plan_detail::search_grid(r, d.context_bytes, out, progress);
  if (r.shard != 0) {
    out.decision_path.clear();
  }
  if (r.keep_grid || r.shards > 1) {
    finish_plan(out);  // else search_grid() finished it as it streamed the grid
  }
  return out;
}

}  // namespace vramsim
