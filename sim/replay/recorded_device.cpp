#include "sim/replay/recorded_device.h"

#include <algorithm>

#include <fmt/format.h>

#include "sim/alloc/size_classes.h"

namespace vramsim {

namespace {
std::string describe(TraceAction action, Bytes addr, Bytes size_bytes) {
  return fmt::format("{} 0x{:x} {} bytes", trace_action_name(action), addr, size_bytes);
}
}  // namespace

RecordedDevice::RecordedDevice(const std::vector<TraceEvent>& events, Bytes capacity_bytes,
                               Bytes initial_used_bytes)
    : m_events(events), m_capacity_bytes(capacity_bytes), m_used_bytes(initial_used_bytes) {}

void RecordedDevice::note_divergence(std::size_t event_index, std::string expected, std::string got) {
  if (!m_first_divergence) {
    m_first_divergence = Divergence{event_index, std::move(expected), std::move(got)};
  }
}

void RecordedDevice::open_window(std::size_t begin, std::size_t end, std::size_t op_index, bool ends_in_oom) {
  m_cursor = begin;
  m_end = end;
  m_op_index = op_index;
  m_ends_in_oom = ends_in_oom;
  m_recorded += end - begin;
}

void RecordedDevice::close_window() {
  if (m_cursor < m_end) {
    const TraceEvent& e = m_events[m_cursor];
    if (!diverged()) {
      note_divergence(m_cursor, describe(e.action, e.addr, e.size_bytes), "no such call by the model");
    }
  }
  m_cursor = m_end = 0;
}

bool RecordedDevice::consume(TraceAction action, Bytes addr, Bytes size_bytes) {
  ++m_model_calls;
  const TraceEvent* e = peek();
  if (e != nullptr && e->action == action && e->addr == addr && e->size_bytes == size_bytes) {
    ++m_matched;
    ++m_cursor;
    return true;
  }
  if (!diverged()) {
    note_divergence(e != nullptr ? m_cursor : m_op_index,
                    e != nullptr ? describe(e->action, e->addr, e->size_bytes) : "no segment event",
                    describe(action, addr, size_bytes));
  }
  return false;
}

bool RecordedDevice::recorded_failure_next() const {
  // The GPU refused this call when the recording goes on with releases (the OOM retry ladder) or ends the
  // operation in an oom entry.
  const TraceEvent* e = peek();
  return e != nullptr ? e->action == TraceAction::kSegmentFree || e->action == TraceAction::kSegmentUnmap
                      : m_ends_in_oom || m_refuse_unrecorded;
}

bool RecordedDevice::refuse(bool recorded_failure, Bytes size_bytes) {
  if (recorded_failure) {
    ++m_refused_as_recorded;
    const Bytes wanted = m_used_bytes + size_bytes;
    m_failed_total_bytes = m_failed_total_bytes == 0 ? wanted : std::min(m_failed_total_bytes, wanted);
    return true;
  }
  if (over_capacity(size_bytes)) {
    ++m_refused_for_capacity;
    return true;
  }
  return false;
}

Bytes RecordedDevice::synthetic_address(Bytes size_bytes) {
  const Bytes addr = m_next_synthetic;
  m_next_synthetic += (size_bytes + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
  return addr;
}

std::optional<Bytes> RecordedDevice::malloc(Bytes size_bytes, PoolKind, StreamId) {
  const TraceEvent* e = peek();
  if (e != nullptr && e->action == TraceAction::kSegmentAlloc && e->size_bytes == size_bytes &&
      !over_capacity(size_bytes)) {
    consume(TraceAction::kSegmentAlloc, e->addr, size_bytes);
    m_used_bytes += size_bytes;
    return e->addr;
  }
  const bool recorded_failure = recorded_failure_next();
  if (refuse(recorded_failure, size_bytes)) {
    return std::nullopt;
  }
  const Bytes addr = synthetic_address(size_bytes);
  consume(TraceAction::kSegmentAlloc, addr, size_bytes);
  m_used_bytes += size_bytes;
  return addr;
}

void RecordedDevice::free(Bytes addr, Bytes size_bytes) {
  consume(TraceAction::kSegmentFree, addr, size_bytes);
  m_used_bytes -= size_bytes;
}

Bytes RecordedDevice::reserve(Bytes size_bytes, PoolKind, StreamId) {
  // A new reservation is first mapped at its base (spec E2), so the next recorded map names the base.
  const TraceEvent* e = peek();
  if (e != nullptr && e->action == TraceAction::kSegmentMap) {
    return e->addr;
  }
  return synthetic_address(size_bytes);
}

void RecordedDevice::release_reservation(Bytes, Bytes) {}

bool RecordedDevice::map(Bytes addr, Bytes size_bytes) {
  const bool recorded_failure = recorded_failure_next();
  if (refuse(recorded_failure, size_bytes)) {
    return false;
  }
  consume(TraceAction::kSegmentMap, addr, size_bytes);
  m_used_bytes += size_bytes;
  return true;
}

void RecordedDevice::unmap(Bytes addr, Bytes size_bytes) {
  consume(TraceAction::kSegmentUnmap, addr, size_bytes);
  m_used_bytes -= size_bytes;
}

Bytes RecordedDevice::total_bytes() const {
  // Unknown capacity: report a large device so that expandable reservations (1.125 x total) stay plausible.
  return m_capacity_bytes != 0 ? m_capacity_bytes : Bytes{80} * kGiB;
}

Bytes RecordedDevice::free_bytes() const {
  const Bytes total = total_bytes();
  return m_used_bytes < total ? total - m_used_bytes : 0;
}

}  // namespace vramsim
