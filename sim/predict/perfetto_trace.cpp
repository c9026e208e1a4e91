#include "sim/predict/perfetto_trace.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "sim/graph/op_graph.h"
#include "sim/predict/step_timeline.h"

namespace vramsim {
namespace {

constexpr int kPid = 1;
constexpr int kAllocatorTid = 1000;  // the track of the allocator's instant events, apart from the streams

const char* call_name(TraceAction a) {
  switch (a) {
    case TraceAction::kSegmentAlloc:
      return "cudaMalloc";
    case TraceAction::kSegmentFree:
      return "cudaFree";
    case TraceAction::kSegmentMap:
      return "map (expandable segment)";
    case TraceAction::kSegmentUnmap:
      return "unmap (expandable segment)";
    case TraceAction::kOom:
      return "OOM";
    default:
      return "allocator";
  }
}

}  // namespace

std::vector<OpSlice> op_slices(const OpGraph& graph, const Timeline& timeline) {
  std::vector<OpSlice> out;
  out.reserve(graph.op_count());
  for (OpId id = 0; id < graph.op_count(); ++id) {
    const Op& op = graph.op(id);
    const OpTime& time = timeline.ops.at(id);
    out.push_back(OpSlice{op.name, op.stream, time.start_ns, time.end_ns, op.step,
                          std::string(phase_name(op.phase)), op.layer});
  }
  return out;
}

std::string perfetto_json(const std::vector<OpSlice>& ops, const MemoryTimeline& memory,
                          const std::string& title) {
  nlohmann::ordered_json events = nlohmann::ordered_json::array();
  // A trace without times: one event per microsecond, in order.
  bool timed = false;
  for (const MemoryTimeline::Sample& s : memory.samples) {
    timed = timed || s.time_ns != 0;
  }
  const auto ts = [&](TimeNs ns, std::size_t event) {
    return timed ? static_cast<double>(ns) / 1000.0 : static_cast<double>(event);
  };
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", kPid}, {"args", {{"name", title}}}});
  std::vector<StreamId> streams;
  for (const OpSlice& op : ops) {
    if (std::find(streams.begin(), streams.end(), op.stream) == streams.end()) {
      streams.push_back(op.stream);
    }
  }
  std::sort(streams.begin(), streams.end());
  for (StreamId s : streams) {
    events.push_back(
        {{"name", "thread_name"},
         {"ph", "M"},
         {"pid", kPid},
         {"tid", s},
         {"args", {{"name", s == 0 ? std::string("stream 0 (compute)") : "stream " + std::to_string(s)}}}});
  }
  events.push_back({{"name", "thread_name"},
                    {"ph", "M"},
                    {"pid", kPid},
                    {"tid", kAllocatorTid},
                    {"args", {{"name", "caching allocator (model)"}}}});
  for (const OpSlice& op : ops) {
    nlohmann::ordered_json args = {{"step", op.step}, {"phase", op.phase}};
    if (op.layer >= 0) {
      args["layer"] = op.layer;
    }
    events.push_back({{"name", op.name},
                      {"cat", op.phase},
                      {"ph", "X"},
                      {"ts", static_cast<double>(op.start_ns) / 1000.0},
                      {"dur", static_cast<double>(op.end_ns - op.start_ns) / 1000.0},
                      {"pid", kPid},
                      {"tid", op.stream},
                      {"args", args}});
  }
  // Counters: every change, so that no peak is lost (events at the same instant share a timestamp; the UIs
  // show the last value there).
  for (std::size_t i = 0; i < memory.samples.size(); ++i) {
    const MemoryTimeline::Sample& s = memory.samples[i];
    if (i > 0) {
      const MemoryTimeline::Sample& before = memory.samples[i - 1];
      if (before.allocated_bytes == s.allocated_bytes && before.reserved_bytes == s.reserved_bytes &&
          before.active_bytes == s.active_bytes && before.requested_bytes == s.requested_bytes) {
        continue;
      }
    }
    events.push_back(
        {{"name", "allocator"},
         {"ph", "C"},
         {"ts", ts(s.time_ns, i)},
         {"pid", kPid},
         {"args",
          {{"allocated", s.allocated_bytes}, {"reserved", s.reserved_bytes}, {"active", s.active_bytes}}}});
    nlohmann::ordered_json live = nlohmann::ordered_json::object();
    for (std::size_t c = 0; c < memory.categories.size() && c < s.requested_bytes.size(); ++c) {
      live[memory.categories[c]] = s.requested_bytes[c];
    }
    events.push_back({{"name", "requested bytes alive"},
                      {"ph", "C"},
                      {"ts", ts(s.time_ns, i)},
                      {"pid", kPid},
                      {"args", live}});
  }
  // The model's device calls, at the time of the trace event that caused them.
  std::size_t sample = 0;
  for (const MemoryTimeline::DeviceCall& c : memory.device_calls) {
    while (sample + 1 < memory.samples.size() && memory.samples[sample].event_index < c.event_index) {
      ++sample;
    }
    events.push_back({{"name", call_name(c.action)},
                      {"cat", "allocator"},
                      {"ph", "i"},
                      {"s", "t"},
                      {"ts", ts(c.time_ns, sample)},
                      {"pid", kPid},
                      {"tid", kAllocatorTid},
                      {"args", {{"bytes", c.size_bytes}, {"stream", c.stream}, {"event", c.event_index}}}});
  }
  nlohmann::ordered_json j;
  j["traceEvents"] = events;
  j["displayTimeUnit"] = "ms";
  return j.dump();
}

}  // namespace vramsim
