// The bounded search of `vramsim plan` (Note [Bounds on speed], sim/plan/plan_search.cpp) against
// --exhaustive, which predicts every configuration of the same grid: the same best configuration with the
// same figures, every configuration both predicted with the same figures, and every configuration the bounded
// search skipped skipped for a reason the exhaustive predictions confirm (the memory rules: it does not fit;
// the speed rules: it does not fit or is not faster than the best).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "plan_exhaustive_check.h"
#include "sim/plan/plan.h"

using namespace vramsim;
using vramsim::test::check_against_exhaustive;

namespace {

PlanRequest request(const std::string& model, const std::string& gpu, int gpus, std::int64_t global_batch,
                    std::int64_t seq) {
  PlanRequest r;
  r.model = model;
  r.gpu = gpu;
  r.gpus = gpus;
  r.global_batch = global_batch;
  r.seq = seq;
  r.threads = 2;
  return r;
}

}  // namespace

// One T4 (16 GB) and GPT-2 at 16 x 1024 with offload allowed: the larger micro-batches do not fit without
// checkpointing, so there is a boundary to find (the speed bounds skip the blocks before it is); 2 precisions
// x 3 checkpointing modes x 2 optimizers x 3 offloads (none, activations, optimizer with ZeRO-2) x 5
// micro-batches = 180 configurations.
TEST_CASE("plan search: the bounded search finds the exhaustive search's best on one GPU", "[predict]") {
  PlanRequest r = request("gpt2", "t4", 1, 16, 1024);
  r.allow = {"offload"};
  const PlanResult p = check_against_exhaustive(r);
  CHECK(p.grid.size() == 180);
  CHECK(p.pruned_throughput > 0);
}

// Four T4s, two per node, GPT-2 medium at 8 x 1024: the layouts (1, 1), TP 2 and TP 2 x PP 2 (a pipeline,
// searched micro-batch by micro-batch), five shardings, every memory and speed rule at work.
TEST_CASE("plan search: the bounded search finds the exhaustive search's best with parallel layouts",
          "[predict]") {
  PlanRequest r = request("gpt2-medium", "t4", 4, 8, 1024);
  r.gpus_per_node = 2;
  const std::vector<std::pair<int, int>> layouts = parallel_layouts(r);
  REQUIRE(layouts == std::vector<std::pair<int, int>>{{1, 1}, {2, 1}, {2, 2}});
  const PlanResult p = check_against_exhaustive(r);
  CHECK(p.pruned_throughput > 0);
}

// On a GPU everything fits, each block's largest micro-batch fits, so no smaller one is predicted: of GPT-2's
// 60 configurations at 16 x 256 on an H100 (12 groups of 5 micro-batches, plan's first test) the bounded
// search predicts at most one a group, and at least the first group of each of the 4 families (precision x
// optimizer), whose bound covers the family's checkpointing groups.
TEST_CASE("plan search: where everything fits only the largest micro-batches are predicted", "[predict]") {
  const PlanResult p = check_against_exhaustive(request("gpt2", "h100", 1, 16, 256));
  const int in_grid = p.configurations_evaluated - 1;  // the decision path's fp32 baseline is not in the grid
  CHECK(in_grid <= 12);
  CHECK(in_grid >= 4);
  CHECK(p.configurations_pruned == 60 - in_grid);
  for (const PlanEvaluation& e : p.grid) {
    if (e.evaluated) {
      CHECK(e.config.micro_batch == 16);
    }
  }
}
