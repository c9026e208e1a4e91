#include "sim/predict/perfetto_trace.h"

#include <nlohmann/json.hpp>

#include "sim/graph/op_graph.h"
#include "sim/graph/tensor_lifetime.h"
#include "sim/predict/step_timeline.h"

namespace vramsim {

PredictedTimeline predicted_timeline(const OpGraph& graph, const Timeline& timeline,
                                     const AllocationSchedule& timed, std::size_t peak_event) {
  PredictedTimeline t;
  for (OpId id = 0; id < graph.op_count(); ++id) {
    const Op& op = graph.op(id);
    const OpTime& time = timeline.ops.at(id);
    t.ops.push_back(PredictedTimeline::OpSlice{op.name, op.stream, time.start_ns, time.end_ns, op.step,
                                               std::string(phase_name(op.phase)), op.layer});
  }
  constexpr int kCategories = static_cast<int>(TensorCategory::kKvCache) + 1;
  for (int c = 0; c < kCategories; ++c) {
    t.categories.emplace_back(category_name(static_cast<TensorCategory>(c)));
  }
  std::vector<std::int64_t> live(kCategories, 0);
  for (std::size_t i = 0; i < timed.events.size(); ++i) {
    const TraceEvent& e = timed.events[i];
    const Tensor& tensor = graph.tensor(timed.event_tensor[i]);
    const auto c = static_cast<std::size_t>(tensor.category);
    if (e.action == TraceAction::kAlloc) {
      live[c] += static_cast<std::int64_t>(tensor.size_bytes);
    } else if (e.action == TraceAction::kFreeCompleted) {
      live[c] -= static_cast<std::int64_t>(tensor.size_bytes);
    } else {
      continue;
    }
    if (!t.memory.empty() && t.memory.back().time_ns == e.time_ns) {
      t.memory.back().live_bytes = live;  // the state after the last event at that instant
    } else {
      t.memory.push_back(PredictedTimeline::MemorySample{e.time_ns, live});
    }
    if (i <= peak_event) {
      t.peak_sample = t.memory.size() - 1;
    }
  }
  return t;
}

std::string perfetto_json(const PredictedTimeline& t, const std::string& title) {
  nlohmann::ordered_json events = nlohmann::ordered_json::array();
  const auto us = [](TimeNs ns) { return static_cast<double>(ns) / 1000.0; };
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 1}, {"args", {{"name", title}}}});
  std::vector<StreamId> streams;
  for (const PredictedTimeline::OpSlice& op : t.ops) {
    if (std::find(streams.begin(), streams.end(), op.stream) == streams.end()) {
      streams.push_back(op.stream);
    }
  }
  std::sort(streams.begin(), streams.end());
  for (StreamId s : streams) {
    events.push_back(
        {{"name", "thread_name"},
         {"ph", "M"},
         {"pid", 1},
         {"tid", s},
         {"args", {{"name", s == 0 ? std::string("stream 0 (compute)") : "stream " + std::to_string(s)}}}});
  }
  for (const PredictedTimeline::OpSlice& op : t.ops) {
    nlohmann::ordered_json args = {{"step", op.step}, {"phase", op.phase}};
    if (op.layer >= 0) {
      args["layer"] = op.layer;
    }
    events.push_back({{"name", op.name},
                      {"cat", op.phase},
                      {"ph", "X"},
                      {"ts", us(op.start_ns)},
                      {"dur", us(op.end_ns - op.start_ns)},
                      {"pid", 1},
                      {"tid", op.stream},
                      {"args", args}});
  }
  for (const PredictedTimeline::MemorySample& m : t.memory) {
    nlohmann::ordered_json args = nlohmann::ordered_json::object();
    for (std::size_t c = 0; c < t.categories.size(); ++c) {
      args[t.categories[c]] = m.live_bytes[c];
    }
    events.push_back(
        {{"name", "requested bytes alive"}, {"ph", "C"}, {"ts", us(m.time_ns)}, {"pid", 1}, {"args", args}});
  }
  nlohmann::ordered_json j;
  j["traceEvents"] = events;
  j["displayTimeUnit"] = "ms";
  return j.dump();
}

}  // namespace vramsim
