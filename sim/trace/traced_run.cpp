#include "sim/trace/traced_run.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/core/input_file.h"
#include "sim/graph/op_graph.h"
#include "sim/predict/gpu_memory.h"
#include "sim/replay/trace_replay.h"
#include "traces/json_input.h"
#include "traces/trace_io.h"

namespace vramsim {
namespace {

std::vector<TraceMarker> parse_markers(const nlohmann::json& j, const std::string& path) {
  const auto bad = [&](const std::string& where, const std::string& what) {
    return InputError(fmt::format("{}: {}: {}", path, where, what));
  };
  if (!j.is_object() || !j.contains("markers") || !j["markers"].is_array()) {
    throw bad("markers", "expected an object with a \"markers\" array");
  }
  std::vector<TraceMarker> out;
  std::size_t i = 0;
  for (const nlohmann::json& m : j["markers"]) {
    const std::string where = fmt::format("markers[{}]", i++);
    if (!m.is_object() || !m.contains("event_index") || !m["event_index"].is_number_unsigned() ||
        !m.contains("step") || !m["step"].is_number_integer() || !m.contains("phase") ||
        !m["phase"].is_string()) {
      throw bad(where, "expected {\"event_index\": unsigned, \"step\": integer, \"phase\": string}");
    }
    // Steps count up one at a time from 0 (setup), so a marker's step is at most one more than the previous
    // marker's: this also bounds the per-step table by the number of markers.
    const std::int64_t step = m["step"].get<std::int64_t>();
    const std::int64_t previous = out.empty() ? 0 : out.back().step;
    if (step < previous || step > previous + 1) {
      throw bad(where + ".step", fmt::format("{} after step {} (steps go up by one from 0)", step, previous));
    }
    TraceMarker tm{m["event_index"].get<std::size_t>(), static_cast<int>(step),
                   m["phase"].get<std::string>()};
    if (!out.empty() && tm.event_index < out.back().event_index) {
      throw bad(where + ".event_index", "markers must be in event order");
    }
    out.push_back(std::move(tm));
  }
  return out;
}

}  // namespace

TracedRun load_traced_run(const std::string& vtrace_path, const std::string& markers_path) {
  TracedRun run;
  run.label = vtrace_path;
  run.trace = load_snapshot(vtrace_path);
  if (run.trace.has_final_state) {
    throw InputError(
        fmt::format("{}: not a traced run (it records an allocator state before the trace; "
                    "use vramsim replay)",
                    vtrace_path));
  }
  std::error_code ec;
  if (!std::filesystem::exists(markers_path, ec)) {
    run.workload = workload_from_trace(run.trace, run.markers);
    return run;
  }
  const nlohmann::json j = parse_json_input(
      read_input_file(markers_path, "markers file", kMaxSmallInputBytes), markers_path, kMaxSmallJsonMemory);
  run.markers = parse_markers(j, markers_path);
  run.workload = workload_from_trace(run.trace, run.markers);
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() != "markers") {
      run.info[it.key()] = it.value();
    }
  }
  return run;
}

Prediction analyze_traced_run(const TracedRun& run, const RunDevice& device) {
  Prediction p = explain_run(run.workload, device);
  p.model_name = run.label;
  if (run.info.contains("operators") && run.info["operators"].is_number_unsigned()) {
    p.ops = run.info["operators"].get<std::size_t>();
  }
  return p;
}

}  // namespace vramsim
