// The grid `vramsim plan` searches (plan.h), shared by the files of the plan: the levers' settings, the
// parallel layouts, and the grid cut into groups and families for the search (plan_search.cpp).
//
// Grid order (the order of PlanResult::grid, of --csv and of the ties between equally fast configurations):
// precision, checkpointing, sharding, optimizer, adapters, offload, torch.compile, then the layout, then the
// micro-batch (smallest first).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sim/plan/plan.h"

namespace vramsim::plan_detail {

constexpr int kLoraRank = 16;  // PEFT's usual recipe rank; the adapters' memory is small at any rank

bool allowed(const PlanRequest& r, std::string_view lever);
// Every setting of a configuration, as one string (the decision path's cache key).
std::string key_of(const PlanConfig& c);
// The divisors of n, ascending.
std::vector<std::int64_t> divisors(std::int64_t n);

struct Layout {
  int tp = 1;
  int pp = 1;
  int ep = 1;  // expert parallelism (torchtitan's over FSDP2), for a model with mixture-of-experts layers
  int cp = 1;  // context parallelism (torchtitan's over FSDP2), with --allow cp
};

// Note [Parallel layouts] (plan.h): tp = 1, 2, 4, ... within a node, then the largest with pp > 1.
std::vector<Layout> layouts(const PlanRequest& r);

// One layout of one group: the configurations of its micro-batches, smallest first, at grid[first ...].
// `configs` is empty until expand_family() fills it: a plan keeps a family's configurations only while the
// family is searched, so its memory does not grow with the grid (Note [Streaming the grid], plan_search.cpp).
struct Block {
  Layout layout;
  std::size_t first = 0;  // grid index of the smallest micro-batch
  std::size_t size = 0;   // micro-batches (configurations) of the block
  std::size_t local = 0;  // expand_family(): index of the first in the family's own results
  std::vector<PlanConfig> configs;
};

// One group: one setting of every lever but the layout and the micro-batch; its layouts in the lever's
// order.
struct Group {
  PlanConfig base;  // the group's settings (layout and micro-batch unset)
  std::vector<Block> blocks;
};

// One family: the groups that differ only in checkpointing and offload (the levers that add time and never
// remove any: recomputation, transfers to and from the host), in grid order; the first is the one without
// either (checkpointing none, no offload), the family's fastest at any micro-batch. The unit of a thread and
// of a shard (plan.h: --shard).
struct Family {
  std::vector<Group> groups;
};

// The grid's families in grid order of their first group, their blocks' configurations not filled in;
// `total` is set to the number of grid entries.
std::vector<Family> grid_families(const PlanRequest& r, std::size_t& total);
// The configurations of the block of layout `l` in the group of settings `base`: each micro-batch that
// divides the layout's local batch, smallest first.
std::vector<PlanConfig> block_configs(const PlanRequest& r, const PlanConfig& base, const Layout& l);
// Fills every block's `configs` and `local` (blocks numbered in family order); returns the family's number of
// configurations.
std::size_t expand_family(const PlanRequest& r, Family& f);

// Throws InputError for bad requests (no GPU, a global batch the GPUs do not divide, an unknown lever).
void validate_request(const PlanRequest& r);

// One configuration through the step simulator (Note [Probing with fewer micro-batches], plan_search.cpp).
PlanEvaluation evaluate(const PlanRequest& r, const PlanConfig& c, std::int64_t limit_bytes);

// The decision path (plan.h) into out.decision_path: from fp32 with the whole local batch at once, each lever
// in turn until it fits (plan_decision_path.cpp).
void decide(const PlanRequest& r, PlanResult& out);

// Counts a configuration that was not predicted under its reason (PlanEvaluation::skipped) in `counts`; the
// one place both the kept grid (finish_plan) and the streamed one (PlanStream) count skips.
void count_skipped(PlanResult& counts, const PlanEvaluation& e);

}  // namespace vramsim::plan_detail
