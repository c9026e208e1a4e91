#include "kernels/replay/replay_plan.h"

#include <algorithm>
#include <unordered_map>

#include <fmt/format.h>

#include "sim/core/error.h"
#include "traces/trace_io.h"

namespace vramsim::hw {
namespace {

int pick_device(const Snapshot& snapshot, int requested) {
  if (requested >= 0) {
    if (static_cast<std::size_t>(requested) >= snapshot.device_traces.size() && requested != 0) {
      throw InputError(
          fmt::format("--device {}: {} has no trace for that device", requested, snapshot.source));
    }
    return requested;
  }
  for (std::size_t d = 0; d < snapshot.device_traces.size(); ++d) {
    if (!snapshot.device_traces[d].events.empty()) {
      return static_cast<int>(d);
    }
  }
  return 0;
}

// Builds the ops while walking the trace once; keeps the live set and the running requested total.
class PlanBuilder {
 public:
  PlanBuilder(ReplayPlan& plan, const std::vector<TraceEvent>& events) : m_plan(plan), m_events(events) {}

  void run() {
    bool any_op_yet = false;
    for (std::size_t i = 0; i < m_events.size(); ++i) {
      const TraceEvent& e = m_events[i];
      switch (e.action) {
        case TraceAction::kSegmentAlloc:
        case TraceAction::kSegmentFree:
        case TraceAction::kSegmentMap:
        case TraceAction::kSegmentUnmap:
          i = segment_run(i, any_op_yet) - 1;
          break;
        case TraceAction::kAlloc:
          any_op_yet = true;
          alloc(i, e);
          break;
        case TraceAction::kFreeRequested:
          any_op_yet = true;
          i = free_requested(i, e);
          break;
        case TraceAction::kFreeCompleted:
          free_completed(i, e);
          break;
        case TraceAction::kOom:
          any_op_yet = true;
          ++m_plan.ooms;
          break;
        case TraceAction::kSnapshot:
          ++m_plan.other_events;
          break;
        // Private pools and an explicit empty_cache change where the caching allocator puts blocks, not
        // which requests the program makes: the hardware replay issues the same requests and counts these.
        case TraceAction::kPoolCreate:
        case TraceAction::kPoolUseOnOom:
        case TraceAction::kCaptureBegin:
        case TraceAction::kPoolBegin:
        case TraceAction::kPoolEnd:
        case TraceAction::kPoolRelease:
        case TraceAction::kEmptyCache:
          ++m_plan.other_events;
          break;
      }
    }
    m_plan.live_at_end = m_live.size() + m_pending.size();
  }

 private:
  std::string where(std::size_t i) const {
    return fmt::format("{}: device_traces[{}][{}]", m_plan.source, m_plan.device, i);
  }

  // Counts the run of segment events starting at `i`; a run of releases that feeds no allocation is an
  // empty_cache (see replay_plan.h). Returns the index just past the run.
  std::size_t segment_run(std::size_t i, bool any_op_yet) {
    std::size_t j = i;
    bool has_release = false;
    while (j < m_events.size() && is_segment_event(m_events[j].action)) {
      has_release = has_release || is_segment_release(m_events[j].action);
      ++j;
    }
    m_plan.segment_events += j - i;
    const bool feeds_op = j < m_events.size() && (m_events[j].action == TraceAction::kAlloc ||
                                                  m_events[j].action == TraceAction::kOom);
    const bool leading_release = !any_op_yet && is_segment_release(m_events[i].action);
    if (has_release && (!feeds_op || leading_release)) {
      ReplayOp op;
      op.kind = ReplayOpKind::kEmptyCache;
      op.trace_index = i;
      m_plan.ops.push_back(op);
      ++m_plan.empty_caches;
    }
    return j;
  }

  void alloc(std::size_t i, const TraceEvent& e) {
    if (m_live.contains(e.addr) || m_pending.contains(e.addr)) {
      throw InputError(fmt::format("{}: alloc at 0x{:x}, which is already live", where(i), e.addr));
    }
    ReplayOp op;
    op.kind = ReplayOpKind::kAlloc;
    op.size_bytes = std::max<Bytes>(e.size_bytes, 1);
    op.stream = e.stream;
    op.trace_index = i;
    m_live.emplace(e.addr, m_plan.ops.size());
    m_plan.ops.push_back(op);
    ++m_plan.allocs;
    m_plan.total_allocated_bytes += op.size_bytes;
    m_live_requested_bytes += op.size_bytes;
    m_plan.peak_live_requested_bytes = std::max(m_plan.peak_live_requested_bytes, m_live_requested_bytes);
    if (std::find(m_plan.streams.begin(), m_plan.streams.end(), e.stream) == m_plan.streams.end()) {
      m_plan.streams.push_back(e.stream);
    }
  }

  // Handles free_requested at `i`; returns the index of its free_completed when that follows directly (then
  // consumed here), else `i`.
  std::size_t free_requested(std::size_t i, const TraceEvent& e) {
    const bool completes_now = i + 1 < m_events.size() &&
                               m_events[i + 1].action == TraceAction::kFreeCompleted &&
                               m_events[i + 1].addr == e.addr;
    const std::size_t next = completes_now ? i + 1 : i;
    m_plan.free_completed += completes_now ? 1 : 0;
    const auto it = m_live.find(e.addr);
    if (it == m_live.end()) {
      if (m_pending.contains(e.addr)) {
        throw InputError(
            fmt::format("{}: free_requested of 0x{:x}, which was already freed", where(i), e.addr));
      }
      if (m_plan.starts_empty) {
        throw InputError(fmt::format(
            "{}: free_requested of 0x{:x}, which was never allocated (the trace has no final state, so it "
            "starts from an empty allocator)",
            where(i), e.addr));
      }
      ++m_plan.frees_before_trace;  // Note [Frees of blocks from before the trace]
      return next;
    }
    const std::size_t alloc_op = it->second;
    m_live.erase(it);
    if (completes_now) {
      add_free(i, alloc_op);
    } else {
      m_pending.emplace(e.addr, alloc_op);
    }
    return next;
  }

  // A free_completed that does not directly follow its free_requested: a record_stream'ed block.
  void free_completed(std::size_t i, const TraceEvent& e) {
    ++m_plan.free_completed;
    if (const auto it = m_pending.find(e.addr); it != m_pending.end()) {
      add_free(i, it->second);
      m_pending.erase(it);
      return;
    }
    if (m_plan.starts_empty) {
      throw InputError(fmt::format("{}: free_completed of 0x{:x} without a pending free", where(i), e.addr));
    }
    // else: the block was freed before the trace (or its free_requested was skipped as such)
  }

  void add_free(std::size_t i, std::size_t alloc_op) {
    ReplayOp op;
    op.kind = ReplayOpKind::kFree;
    op.size_bytes = m_plan.ops[alloc_op].size_bytes;
    op.stream = m_plan.ops[alloc_op].stream;
    op.trace_index = i;
    op.alloc_op = alloc_op;
    m_plan.ops[alloc_op].free_op = m_plan.ops.size();
    m_plan.ops.push_back(op);
    ++m_plan.frees;
    m_live_requested_bytes -= op.size_bytes;
  }

  ReplayPlan& m_plan;
  const std::vector<TraceEvent>& m_events;
  std::unordered_map<Bytes, std::size_t> m_live;     // address -> its kAlloc op
  std::unordered_map<Bytes, std::size_t> m_pending;  // freed, waiting for free_completed
  Bytes m_live_requested_bytes = 0;
};

}  // namespace

ReplayPlan build_replay_plan(const Snapshot& snapshot, int device) {
  ReplayPlan plan;
  plan.source = snapshot.source;
  plan.device = pick_device(snapshot, device);
  plan.starts_empty = !snapshot.has_final_state;
  static const std::vector<TraceEvent> kNoEvents;
  const auto dev = static_cast<std::size_t>(plan.device);
  const std::vector<TraceEvent>& events =
      dev < snapshot.device_traces.size() ? snapshot.device_traces[dev].events : kNoEvents;
  plan.trace_events = events.size();
  PlanBuilder(plan, events).run();
  return plan;
}

ReplayPlan load_replay_plan(const std::string& path, int device) {
  return build_replay_plan(load_snapshot(path), device);
}

RequestSequence request_sequence(const ReplayPlan& plan) {
  RequestSequence sequence;
  std::unordered_map<std::size_t, std::size_t> alloc_id;  // kAlloc op index -> allocation id
  for (std::size_t i = 0; i < plan.ops.size(); ++i) {
    const ReplayOp& op = plan.ops[i];
    if (op.kind == ReplayOpKind::kAlloc) {
      alloc_id.emplace(i, sequence.add_alloc(op.size_bytes, op.stream));
    } else if (op.kind == ReplayOpKind::kFree) {
      sequence.add_free(alloc_id.at(op.alloc_op));
    }
  }
  return sequence;
}

}  // namespace vramsim::hw
