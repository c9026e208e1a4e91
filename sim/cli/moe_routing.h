// `predict --moe-imbalance-dist uniform:LO..HI`: the peak as a function of routing imbalance and the
// probability of an OOM over a routing model (expert_parallel.h's --moe-imbalance F drawn uniformly from
// [LO, HI]), as `sweep` answers for shapes drawn from a distribution.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/predict/step_prediction.h"

namespace vramsim::cli {

struct ImbalanceDist {
  double lo = 1.0;
  double hi = 1.0;
};
// "uniform:LO..HI" with 1 <= LO <= HI; throws InputError("--moe-imbalance-dist: ...").
ImbalanceDist parse_imbalance_dist(const std::string& text);

struct ImbalancePoint {
  double imbalance = 1.0;
  std::int64_t peak_allocated_bytes = 0;  // what the run allocates at its peak without the device limit
  std::int64_t peak_reserved_bytes = 0;
  bool fits = false;  // no OOM on the device
};
struct ImbalanceSweep {
  std::vector<ImbalancePoint> grid;  // LO, two points between, HI
  bool any_fits = false;
  double largest_fitting = 0.0;  // the largest F found to fit (bisection to within `tolerance`)
  double tolerance = 0.01;
  double oom_probability = 0.0;  // P(F > largest_fitting) under the uniform model
};
// Predicts `request` at the grid's imbalances, then bisects on "fits" between the largest fitting and the
// smallest failing point. Assumes fitting is monotone in F (the busiest rank's rows grow with it).
ImbalanceSweep sweep_imbalance(const PredictRequest& request, const ImbalanceDist& dist);
void print_imbalance_sweep(const ImbalanceSweep& sweep, const ImbalanceDist& dist);

}  // namespace vramsim::cli
