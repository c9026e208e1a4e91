// A traced program (`vramsim trace`, traces/tracer): the tracer's trace (vtrace) and its phase markers, read
// back as a workload (workload_from_trace) and explained by explain_run() (sim/predict/run_report.h) as
// predict's own runs are.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/alloc/workload.h"
#include "sim/predict/run_report.h"
#include "sim/replay/request_sequence_from_trace.h"
#include "traces/snapshot.h"

namespace vramsim {

struct TracedRun {
  std::string label;                 // what ran: the script, or the trace file
  Snapshot trace;                    // as the tracer wrote it (what `--out` saves)
  std::vector<TraceMarker> markers;  // in event order; empty when the trace came without them
  Workload workload;                 // the trace's requests and markers, as the allocator model takes them
  nlohmann::ordered_json info;       // the tracer's own account (versions, operators, made-up values, ...)
};

// Reads `vtrace_path` (any trace format load_snapshot knows) and, when it exists, `markers_path` (the
// tracer's JSON). Throws InputError "<file>: <where>: <problem>" on a malformed file.
TracedRun load_traced_run(const std::string& vtrace_path, const std::string& markers_path);

// explain_run() on the traced run, labelled with what ran and its operator count. Throws InputError.
Prediction analyze_traced_run(const TracedRun& run, const RunDevice& device);

}  // namespace vramsim
