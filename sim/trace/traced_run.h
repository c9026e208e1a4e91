// A traced program (`vramsim trace`, traces/tracer) through the allocator model: the tracer's trace (vtrace)
// and its phase markers in, the report `predict` prints out. Every figure — peaks, the bill at the peak,
// phases, per-step peaks, fragmentation — is observed on the allocator model's own state after each event
// (ReplayOptions::on_event); none is re-counted from the request sizes.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/predict/step_prediction.h"
#include "traces/snapshot.h"

namespace vramsim {

// From this event on (index into the device-0 trace), the program is in `phase` of training step `step`
// (0 = setup before the first forward). Phases: setup, forward, loss, after_forward (an inference forward
// returned), backward, post_backward, optimizer, after_optimizer, zero_grad.
struct TraceMarker {
  std::size_t event_index = 0;
  int step = 0;
  std::string phase;
};

struct TracedRun {
  std::string label;  // what ran: the script, or the trace file
  Snapshot trace;
  std::vector<TraceMarker> markers;  // in event order; empty when the trace came without them
  nlohmann::ordered_json info;       // the tracer's own account (versions, operators, made-up values, ...)
};

// Reads `vtrace_path` (any trace format load_snapshot knows) and, when it exists, `markers_path` (the
// tracer's JSON). Throws InputError "<file>: <where>: <problem>" on a malformed file.
TracedRun load_traced_run(const std::string& vtrace_path, const std::string& markers_path);

struct TraceDevice {
  std::string gpu;           // GPU table name; empty = capacity_bytes
  Bytes capacity_bytes = 0;  // --capacity (no CUDA context counted)
  std::optional<std::string> alloc_conf;
};

// Replays the run on the device (total memory less the CUDA context) and explains it. Throws InputError.
Prediction analyze_traced_run(const TracedRun& run, const TraceDevice& device);

}  // namespace vramsim
