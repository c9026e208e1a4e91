// Runs a ReplayPlan on an IReplayBackend, in order, and measures the device as it goes.
//
// Measurement: after every operation that made device-level calls (IReplayBackend::segment_events() moved),
// and once at the end, the runner synchronizes and records a row: the backend's reserved bytes (for backend
// model: what the simulator's policy holds) against the device memory in use (cudaMemGetInfo, minus the
// baseline taken before the first operation). The peaks and the largest |in use - reserved| come from these
// rows. Reserved bytes change only at such operations, and only device-level calls (cudaMalloc, cuMemMap,
// pool growth) take device memory, so the rows catch every change of both. The elapsed time (CUDA events
// around the whole loop, or the host clock on a fake device) includes those synchronizations.
//
// Failures: any exception from the backend is rethrown as ReplayError naming the trace event, the operation
// and the original message (for CUDA calls: the call as written and CUDA's error name).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/replay/replay_backend.h"
#include "kernels/replay/replay_plan.h"

namespace vramsim::hw {

class ReplayError : public std::runtime_error {
 public:
  explicit ReplayError(const std::string& message) : std::runtime_error(message) {}
};

struct ReplayRow {
  std::size_t op_index = 0;     // ReplayPlan::ops index; == ops.size() for the final row
  std::size_t trace_index = 0;  // trace event of that op (the last event + 1 for the final row)
  ReplayOpKind kind = ReplayOpKind::kAlloc;
  Bytes size_bytes = 0;
  std::uint64_t segment_events = 0;  // device-level calls so far (cumulative)
  Bytes reserved_bytes = 0;          // backend's account after the op
  std::int64_t in_use_bytes = 0;     // measured after the op, relative to the baseline
  Bytes live_requested_bytes = 0;    // the trace's own view: requested bytes live after the op
  bool final = false;

  std::int64_t difference_bytes() const { return in_use_bytes - static_cast<std::int64_t>(reserved_bytes); }
};

struct RunOptions {
  bool verify = false;    // before each free, check the allocation still holds its pattern
  bool keep_rows = true;  // false: only peaks and the final row (for long traces)
};

struct ReplayRunResult {
  std::string backend;
  std::string reserved_meaning;
  bool fake = false;
  std::size_t ops_replayed = 0;
  std::size_t allocs = 0;
  std::size_t frees = 0;
  std::size_t empty_caches = 0;
  std::uint64_t segment_events = 0;
  std::size_t measurements = 0;        // rows taken (kept or not)
  std::int64_t peak_in_use_bytes = 0;  // max over the rows
  Bytes peak_reserved_bytes = 0;       // max after any op
  Bytes peak_live_requested_bytes = 0;
  std::int64_t max_abs_difference_bytes = 0;
  ReplayRow max_difference_row;  // where |in use - reserved| was largest (first such row)
  ReplayRow final_row;
  std::uint64_t verify_mismatches = 0;  // bytes that lost their pattern (RunOptions::verify)
  std::size_t verified_allocations = 0;
  double elapsed_ms = 0.0;
  std::vector<ReplayRow> rows;  // in order; the final row last
};

// pre: `backend` is fresh (nothing allocated; its baseline taken). The plan's live-at-end allocations stay
// allocated when this returns (the backend owns them).
ReplayRunResult run_replay(const ReplayPlan& plan, IReplayBackend& backend, const RunOptions& options = {});

std::string_view op_kind_name(ReplayOpKind kind);  // "alloc", "free", "empty_cache"

}  // namespace vramsim::hw
