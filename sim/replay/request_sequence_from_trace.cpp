#include "sim/replay/request_sequence_from_trace.h"

#include <algorithm>
#include <unordered_map>

#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/replay/trace_replay.h"

namespace vramsim {

RequestSequence request_sequence_from_trace(const Snapshot& snapshot, int device) {
  if (device < 0) {
    device = 0;
    for (std::size_t d = 0; d < snapshot.device_traces.size(); ++d) {
      if (!snapshot.device_traces[d].events.empty()) {
        device = static_cast<int>(d);
        break;
      }
    }
  }
  const auto dev = static_cast<std::size_t>(device);
  if (dev >= snapshot.device_traces.size()) {
    if (device == 0) {
      return {};  // no trace at all: nothing was requested
    }
    throw InputError(fmt::format("{}: device {}: no trace for that device", snapshot.source, device));
  }
  RequestSequence sequence;
  std::unordered_map<Bytes, std::size_t> live;  // address -> allocation id
  const std::vector<TraceEvent>& events = snapshot.device_traces[dev].events;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const TraceEvent& e = events[i];
    if (e.action == TraceAction::kAlloc) {
      if (e.size_bytes == 0) {
        continue;  // nothing requested (PyTorch does not record these; be lenient with generated traces)
      }
      const auto [it, inserted] = live.emplace(e.addr, 0);
      if (!inserted) {
        throw InputError(fmt::format("{}: device_traces[{}][{}]: alloc at 0x{:x}, which is still allocated",
                                     snapshot.source, device, i, e.addr));
      }
      it->second = sequence.add_alloc(e.size_bytes, e.stream);
    } else if (e.action == TraceAction::kFreeRequested) {
      auto it = live.find(e.addr);
      if (it != live.end()) {
        sequence.add_free(it->second);
        live.erase(it);
      }
    }
  }
  return sequence;
}

Workload workload_from_trace(const Snapshot& trace, const std::vector<TraceMarker>& markers, int device) {
  Workload w;
  w.source = trace.source;
  w.strings = trace.strings;
  if (w.strings.empty()) {
    w.strings.emplace_back();
  }
  const auto dev = static_cast<std::size_t>(device);
  static const std::vector<TraceEvent> kNoEvents;
  const std::vector<TraceEvent>& events =
      dev < trace.device_traces.size() ? trace.device_traces[dev].events : kNoEvents;
  std::unordered_map<Bytes, std::size_t> live;     // address -> allocation id
  std::unordered_map<Bytes, std::size_t> pending;  // freed, the free made at its free_completed
  std::vector<std::size_t> requests_before(events.size() + 1, 0);
  const auto add = [&](std::size_t id, bool alloc, const TraceEvent& e) {
    if (!alloc) {
      w.requests.add_free(id, e.time_ns);
    }
    w.labels.push_back(RequestLabel{e.op_tag, e.category_tag, e.phase_tag, e.layer});
  };
  for (std::size_t i = 0; i < events.size(); ++i) {
    requests_before[i] = w.requests.ops().size();
    const TraceEvent& e = events[i];
    const auto where = [&] { return fmt::format("{}: device_traces[{}][{}]", trace.source, device, i); };
    if (e.action == TraceAction::kAlloc && e.size_bytes > 0) {
      if (live.count(e.addr) != 0 || pending.count(e.addr) != 0) {
        throw InputError(fmt::format("{}: alloc at 0x{:x}, which is still allocated", where(), e.addr));
      }
      live[e.addr] = w.requests.add_alloc(e.size_bytes, e.stream, e.time_ns);
      add(live[e.addr], true, e);
    } else if (e.action == TraceAction::kFreeRequested) {
      const auto it = live.find(e.addr);
      if (it == live.end()) {
        throw InputError(
            fmt::format("{}: free_requested of 0x{:x}, which is not allocated", where(), e.addr));
      }
      const bool completes_now = i + 1 < events.size() &&
                                 events[i + 1].action == TraceAction::kFreeCompleted &&
                                 events[i + 1].addr == e.addr;
      if (completes_now) {
        add(it->second, false, e);
      } else {
        pending[e.addr] = it->second;
      }
      live.erase(it);
    } else if (e.action == TraceAction::kFreeCompleted) {
      if (const auto it = pending.find(e.addr); it != pending.end()) {
        add(it->second, false, e);
        pending.erase(it);
      }
    }
  }
  requests_before[events.size()] = w.requests.ops().size();
  for (const TraceMarker& m : markers) {
    w.markers.push_back(RunMarker{requests_before[std::min(m.event_index, events.size())], m.step, m.phase});
  }
  return w;
}

TraceRequests trace_requests(const Snapshot& snapshot, int device, const CachingConfig& config) {
  TraceRequests out;
  out.source = snapshot.source;
  out.device = replay_device(snapshot, device);
  out.initial = rebuild_initial_state(snapshot, out.device, config);
  std::unordered_map<Bytes, std::size_t> live;     // address -> allocation id, freed at free_requested
  std::unordered_map<Bytes, std::size_t> pending;  // address -> allocation id, freed at free_completed
  for (const InitialSegment& seg : out.initial.segments) {  // address order, blocks tiling each segment
    for (const InitialBlock& b : seg.blocks) {
      if (!b.allocated) {
        continue;
      }
      const std::size_t id = out.sequence.add_alloc(std::max<Bytes>(b.requested_bytes, 1), seg.stream);
      (b.pending_free ? pending : live)[b.addr] = id;
      out.start_addr.push_back(b.addr);
      out.start_pending.push_back(b.pending_free);
      out.start_requested_bytes += b.requested_bytes;
    }
  }
  out.start_blocks = out.sequence.alloc_count();

  const auto dev = static_cast<std::size_t>(out.device);
  static const std::vector<TraceEvent> kNoEvents;
  const std::vector<TraceEvent>& events =
      dev < snapshot.device_traces.size() ? snapshot.device_traces[dev].events : kNoEvents;
  bool any_op_yet = false;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const TraceEvent& e = events[i];
    if (is_segment_event(e.action)) {
      std::size_t j = i;
      while (j < events.size() && is_segment_event(events[j].action)) {
        ++j;
      }
      const bool feeds_op = j < events.size() && (events[j].action == TraceAction::kAlloc ||
                                                  events[j].action == TraceAction::kOom);
      const bool releases = is_segment_release(e.action);
      if (!feeds_op || (!any_op_yet && releases)) {
        out.empty_cache_after.push_back(out.sequence.ops().size());
      }
      i = j - 1;
      continue;
    }
    if (e.action == TraceAction::kAlloc || e.action == TraceAction::kOom) {
      any_op_yet = true;
    }
    if (e.action == TraceAction::kAlloc && e.size_bytes > 0) {
      if (live.count(e.addr) != 0) {
        throw InputError(fmt::format("{}: device_traces[{}][{}]: alloc at 0x{:x}, which is still allocated",
                                     snapshot.source, out.device, i, e.addr));
      }
      live[e.addr] = out.sequence.add_alloc(e.size_bytes, e.stream);
    } else if (e.action == TraceAction::kFreeRequested) {
      any_op_yet = true;
      if (auto it = live.find(e.addr); it != live.end()) {
        out.sequence.add_free(it->second);
        live.erase(it);
      }
    } else if (e.action == TraceAction::kFreeCompleted) {
      if (auto it = pending.find(e.addr); it != pending.end()) {
        out.sequence.add_free(it->second);
        pending.erase(it);
      }
    }
  }
  return out;
}

}  // namespace vramsim
