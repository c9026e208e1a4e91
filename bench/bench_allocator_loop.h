// The allocator alone over a prediction's workload, as predict drives it: run_policy over the schedule's
// requests with the allocated bytes observed after each one (what the timeline and the report read). Shared
// by the predict-stage and quick-start benchmarks so both time the same loop.
#pragma once

#include <cstdint>

#include <benchmark/benchmark.h>

#include "sim/alloc/registry.h"
#include "sim/alloc/workload.h"
#include "sim/simulate/policy_run.h"

namespace vramsim::bench {

inline void run_allocator_loop(benchmark::State& state, const Workload& workload,
                               std::int64_t capacity_bytes) {
  PolicyRunOptions options;
  options.capacity_bytes = capacity_bytes;
  options.free_space_at_allocated_peak = false;
  std::int64_t observed = 0;
  options.on_request = [&](std::size_t, const DeviceStats& s) {
    observed = s.allocated_bytes[kStatAll].current;
  };
  for (auto _ : state) {
    const PolicyRunResult r = run_policy(find_policy("pytorch"), workload.requests, options);
    benchmark::DoNotOptimize(r.peaks.peak_reserved_bytes);
    benchmark::DoNotOptimize(observed);
  }
  state.counters["requests"] = static_cast<double>(workload.requests.ops().size());
}

}  // namespace vramsim::bench
