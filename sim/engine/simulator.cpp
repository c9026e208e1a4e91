#include "sim/engine/simulator.h"

#include <utility>

#include "sim/core/assert.h"
#include "sim/engine/queue_registry.h"

namespace vramsim {

Simulator::Simulator(std::string_view queue_backend) : Simulator(find_event_queue(queue_backend).make()) {}

Simulator::Simulator(std::unique_ptr<IEventQueue> queue) : m_queue(std::move(queue)) {
  SIM_ASSERT(m_queue != nullptr);
}

std::uint32_t Simulator::take_slot() {
  if (!m_free_slots.empty()) {
    const std::uint32_t slot = m_free_slots.back();
    m_free_slots.pop_back();
    return slot;
  }
  SIM_ASSERT(m_events.size() < UINT32_MAX);
  m_events.emplace_back();
  return static_cast<std::uint32_t>(m_events.size() - 1);
}

EventId Simulator::schedule_at(TimeNs time_ns, EventCallback callback) {
  SIM_ASSERT(time_ns >= m_now_ns);
  SIM_ASSERT(callback != nullptr);
  const std::uint32_t slot = take_slot();
  Event& ev = m_events[slot];
  ev.key = EventKey{time_ns, m_next_seq++};
  ev.callback.swap(callback);  // the free slot's is empty: a swap, not a move-assignment and a destruction
  ev.cancelled = false;
  m_queue->push(QueueEntry{ev.key, slot});
  ++m_scheduled;
  ++m_queued;
  return EventId{ev.key.seq, slot};
}

bool Simulator::is_pending(EventId id) const {
  return id.seq != kNoSeq && id.slot < m_events.size() && m_events[id.slot].key.seq == id.seq &&
         !m_events[id.slot].cancelled;
}

bool Simulator::cancel(EventId id) {
  if (!is_pending(id)) {
    return false;
  }
  m_events[id.slot].cancelled = true;
  ++m_cancelled_queued;
  return true;
}

// Pops the next entry and either skips it (cancelled) or runs it. The slot is released before the callback
// runs: the callback may schedule (which may reuse the slot or grow the table), and the running event must
// no longer look pending to cancel().
void Simulator::process_one_event() {
  const QueueEntry entry = m_queue->pop();
  --m_queued;
  SIM_ASSERT(m_last_key.seq == kNoSeq || m_last_key < entry.key);  // queue order is (time, seq)
  SIM_ASSERT(entry.key.time_ns >= m_now_ns);                       // time never goes backwards
  m_last_key = entry.key;
  Event& ev = m_events[entry.slot];
  SIM_ASSERT(ev.key == entry.key);
  EventCallback callback;
  callback.swap(ev.callback);  // leaves the slot's empty
  const bool cancelled = ev.cancelled;
  // The slot as Event{} leaves it, field by field: assigning a temporary Event moved an empty std::function
  // in and destroyed another (issue 40: the engine runs one event per op start, end and host resume).
  ev.key = EventKey{0, kNoSeq};
  ev.cancelled = false;
  m_free_slots.push_back(entry.slot);
  if (cancelled) {
    --m_cancelled_queued;
    ++m_skipped;
    return;
  }
  m_now_ns = entry.key.time_ns;
  ++m_dispatched;
  callback();
}

void Simulator::run() {
  SIM_ASSERT(!m_running && "run() called from inside a callback");
  m_running = true;
  m_stop_requested = false;
  const TimeNs start_ns = m_now_ns;
  while (!m_stop_requested && !m_queue->empty()) {
    process_one_event();
  }
  m_running = false;
  check_end_of_run(start_ns);
}

void Simulator::run_until(TimeNs time_ns) {
  SIM_ASSERT(!m_running && "run_until() called from inside a callback");
  SIM_ASSERT(time_ns >= m_now_ns);
  m_running = true;
  m_stop_requested = false;
  const TimeNs start_ns = m_now_ns;
  while (!m_stop_requested && !m_queue->empty() && m_queue->peek().key.time_ns <= time_ns) {
    process_one_event();
  }
  if (!m_stop_requested) {
    m_now_ns = time_ns;
  }
  m_running = false;
  check_end_of_run(start_ns);
}

// No event lost: everything ever scheduled was dispatched, skipped as cancelled, or is still queued, and
// the queue agrees with the count. Time never went backwards over the run.
void Simulator::check_end_of_run(TimeNs start_ns) const {
  SIM_ASSERT(m_now_ns >= start_ns);
  SIM_ASSERT(m_scheduled == m_dispatched + m_skipped + m_queued);
  SIM_ASSERT(m_queue->empty() == (m_queued == 0));
  SIM_ASSERT(m_cancelled_queued <= m_queued);
  SIM_ASSERT(m_events.size() == m_free_slots.size() + m_queued);
}

}  // namespace vramsim
