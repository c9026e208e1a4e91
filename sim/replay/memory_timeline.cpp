#include "sim/replay/memory_timeline.h"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>

#include "sim/alloc/registry.h"

namespace vramsim {
namespace {

// The model's calls to the device, numbered with the trace event that caused them once the replay reports
// that event (on_event comes after the policy's own events).
class DeviceCalls final : public IAllocObserver {
 public:
  explicit DeviceCalls(std::vector<MemoryTimeline::DeviceCall>& out) : m_out(out) {}

  void on_segment_alloc(const SegmentEventInfo& e) override { add(TraceAction::kSegmentAlloc, e); }
  void on_segment_free(const SegmentEventInfo& e) override { add(TraceAction::kSegmentFree, e); }
  void on_segment_map(const SegmentEventInfo& e) override { add(TraceAction::kSegmentMap, e); }
  void on_segment_unmap(const SegmentEventInfo& e) override { add(TraceAction::kSegmentUnmap, e); }
  void on_oom(const OomInfo& e) override {
    m_out.push_back({kPending, e.time_ns, TraceAction::kOom, e.rounded_bytes, e.stream});
  }
  // Where the model put a block: a generated trace's addresses are allocation ids, not the model's.
  void on_alloc(const BlockEventInfo& e) override { m_placed.emplace_back(kPending, e.addr); }
  // The calls not yet numbered were caused by event `index`.
  void caused_by(std::size_t index) {
    for (auto it = m_out.rbegin(); it != m_out.rend() && it->event_index == kPending; ++it) {
      it->event_index = index;
    }
    for (auto it = m_placed.rbegin(); it != m_placed.rend() && it->first == kPending; ++it) {
      it->first = index;
    }
  }
  // (trace event, the model's block address) of every allocation the model served, in event order.
  const std::vector<std::pair<std::size_t, Bytes>>& placed() const { return m_placed; }

 private:
  static constexpr std::size_t kPending = std::numeric_limits<std::size_t>::max();
  void add(TraceAction action, const SegmentEventInfo& e) {
    m_out.push_back({kPending, e.time_ns, action, e.size_bytes, e.stream});
  }
  std::vector<MemoryTimeline::DeviceCall>& m_out;
  std::vector<std::pair<std::size_t, Bytes>> m_placed;
};

// A request as the requested-bytes series count it: an allocation, or the moment its bytes stop being live.
struct CountedRequest {
  std::size_t index = 0;  // the sample index space: trace event or workload request
  bool alloc = false;
  std::uint64_t key = 0;  // pairs an allocation with its end: a trace address or an allocation id
  Bytes size_bytes = 0;
  std::uint32_t category_tag = kNoTag;  // allocations only
};

// The requested bytes alive per category after each sample, and the category of every block live after the
// peak sample.
void requested_by_category(const std::vector<CountedRequest>& requests,
                           const std::vector<std::string>& strings,
                           const std::vector<std::pair<std::size_t, Bytes>>& placed, MemoryTimeline& t) {
  std::map<std::uint32_t, int> category_of_tag;
  std::vector<std::int64_t> live;
  struct Live {
    int category = 0;
    Bytes requested = 0;
    std::optional<Bytes> model_addr;  // unset: the model refused it
  };
  std::map<std::uint64_t, Live> blocks;  // by key
  const auto category = [&](std::uint32_t tag) {
    const auto [it, added] = category_of_tag.emplace(tag, static_cast<int>(t.categories.size()));
    if (added) {
      t.categories.push_back(tag == kNoTag || tag >= strings.size() ? "untagged" : strings[tag]);
      t.tagged = t.tagged || tag != kNoTag;
      live.push_back(0);
    }
    return it->second;
  };
  // A recording that starts mid-run: its blocks live at the start are one series of their own, which their
  // frees in the trace shrink.
  const bool from_start = t.requested_at_start_bytes > 0;
  if (from_start) {
    t.categories.push_back("live at trace start");
    live.push_back(t.requested_at_start_bytes);
  }
  // Pass one names the categories, so every sample's vector has them all.
  for (const CountedRequest& r : requests) {
    if (r.alloc) {
      category(r.category_tag);
    }
  }
  const std::size_t peak_index =
      t.samples.empty() ? 0 : t.samples[std::min(t.peak_sample, t.samples.size() - 1)].event_index;
  std::size_t next = 0;
  std::size_t next_placed = 0;
  bool peak_taken = false;
  const auto take_peak = [&] {
    for (const auto& [key, block] : blocks) {
      if (block.model_addr) {
        t.block_category_at_peak.emplace_back(*block.model_addr, block.category);
      }
    }
    std::sort(t.block_category_at_peak.begin(), t.block_category_at_peak.end());
    peak_taken = true;
  };
  for (const CountedRequest& r : requests) {
    // Samples before this request see the state before it.
    while (next < t.samples.size() && t.samples[next].event_index < r.index) {
      t.samples[next++].requested_bytes = live;
    }
    if (!peak_taken && r.index > peak_index) {
      take_peak();
    }
    if (r.alloc) {
      const int c = category(r.category_tag);
      live[static_cast<std::size_t>(c)] += static_cast<std::int64_t>(r.size_bytes);
      while (next_placed < placed.size() && placed[next_placed].first < r.index) {
        ++next_placed;
      }
      std::optional<Bytes> model_addr;
      if (next_placed < placed.size() && placed[next_placed].first == r.index) {
        model_addr = placed[next_placed++].second;
      }
      blocks[r.key] = {c, r.size_bytes, model_addr};
    } else if (const auto it = blocks.find(r.key); it != blocks.end()) {
      live[static_cast<std::size_t>(it->second.category)] -= static_cast<std::int64_t>(it->second.requested);
      blocks.erase(it);
    } else if (from_start) {
      live[0] = std::max<std::int64_t>(0, live[0] - static_cast<std::int64_t>(r.size_bytes));
    }
  }
  for (; next < t.samples.size(); ++next) {
    t.samples[next].requested_bytes = live;
  }
  if (!peak_taken) {
    take_peak();
  }
}

}  // namespace

MemoryTimeline observe_memory_timeline(const Snapshot& trace, ReplayOptions options) {
  MemoryTimeline t;
  DeviceCalls calls(t.device_calls);
  const int device = replay_device(trace, options.device);
  const std::size_t dev = static_cast<std::size_t>(device);
  static const std::vector<TraceEvent> kNoEvents;
  const std::vector<TraceEvent>& events =
      dev < trace.device_traces.size() ? trace.device_traces[dev].events : kNoEvents;
  options.device = device;
  options.observer = &calls;
  options.segments_after_event.reset();
  options.on_event = [&](std::size_t i, const DeviceStats& s) {
    calls.caused_by(i);
    t.samples.push_back(MemoryTimeline::Sample{i,
                                               i < events.size() ? events[i].time_ns : 0,
                                               s.allocated_bytes[kStatAll].current,
                                               s.reserved_bytes[kStatAll].current,
                                               s.active_bytes[kStatAll].current,
                                               {}});
    if (s.allocated_bytes[kStatAll].current > t.samples[t.peak_sample].allocated_bytes) {
      t.peak_sample = t.samples.size() - 1;
    }
  };
  const ReplayResult first = replay_snapshot(trace, options);
  t.requested_at_start_bytes = first.requested_at_start_bytes;
  std::vector<CountedRequest> counted;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const TraceEvent& e = events[i];
    if (e.action == TraceAction::kAlloc || e.action == TraceAction::kFreeCompleted) {
      counted.push_back({i, e.action == TraceAction::kAlloc, e.addr, e.size_bytes, e.category_tag});
    }
  }
  requested_by_category(counted, trace.strings, calls.placed(), t);
  if (!t.samples.empty()) {
    options.on_event = nullptr;
    options.observer = nullptr;
    options.segments_after_event = t.samples[t.peak_sample].event_index;
    t.segments_at_peak = replay_snapshot(trace, options).segments_at_event;
  }
  return t;
}

MemoryTimeline observe_workload_timeline(const Workload& workload, PolicyRunOptions options) {
  MemoryTimeline t;
  DeviceCalls calls(t.device_calls);
  const std::vector<RequestOp>& ops = workload.requests.ops();
  options.observer = &calls;
  options.segments_after_request.reset();
  options.free_space_at_allocated_peak = false;
  options.on_request = [&](std::size_t i, const DeviceStats& s) {
    calls.caused_by(i);
    t.samples.push_back(MemoryTimeline::Sample{i,
                                               ops[i].time_ns,
                                               s.allocated_bytes[kStatAll].current,
                                               s.reserved_bytes[kStatAll].current,
                                               s.active_bytes[kStatAll].current,
                                               {}});
    if (s.allocated_bytes[kStatAll].current > t.samples[t.peak_sample].allocated_bytes) {
      t.peak_sample = t.samples.size() - 1;
    }
  };
  const PolicyEntry& pytorch = find_policy("pytorch");  // the configuration decides expandable segments
  (void)run_policy(pytorch, workload.requests, options);
  std::vector<CountedRequest> counted;
  counted.reserve(ops.size());
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const RequestOp& op = ops[i];
    const bool alloc = op.kind == RequestOp::Kind::kAlloc;
    const Bytes size = alloc ? op.size_bytes : workload.requests.alloc_op(op.alloc_id).size_bytes;
    counted.push_back({i, alloc, op.alloc_id, size, alloc ? workload.labels[i].category_tag : kNoTag});
  }
  requested_by_category(counted, workload.strings, calls.placed(), t);
  if (!t.samples.empty()) {
    options.on_request = nullptr;
    options.observer = nullptr;
    options.segments_after_request = t.samples[t.peak_sample].event_index;
    t.segments_at_peak = run_policy(pytorch, workload.requests, options).segments_at_request;
  }
  return t;
}

}  // namespace vramsim
