// The discrete-event core: a clock, a future-event list (any IEventQueue backend), and a run loop.
//
// Design (after ns-3's DefaultSimulatorImpl):
//   * schedule*() stores the callback in the event table (a slab of Event slots, reused through a free list)
//     and pushes only the 24-byte (key, slot) entry into the queue;
//   * cancel() is lazy: it sets the event's flag and the run loop skips the entry when it comes to the front
//     (Note [Deterministic event order] in event.h says why (time, seq) orders everything);
//   * run() pops in key order until the queue is empty or stop() was called, and on exit asserts that time
//     never went backwards and that every event scheduled was dispatched, skipped or is still queued.
//
// Units: all times are simulated nanoseconds (TimeNs). The clock starts at 0.
// Callbacks may schedule, cancel and stop from inside the run loop; they must not call run() recursively.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "sim/core/assert.h"
#include "sim/core/types.h"
#include "sim/engine/event.h"
#include "sim/engine/i_event_queue.h"

namespace vramsim {

class Simulator {
 public:
  // `queue_backend` names an entry of event_queue_registry(); throws InputError if unknown.
  explicit Simulator(std::string_view queue_backend = "binary-heap");
  explicit Simulator(std::unique_ptr<IEventQueue> queue);
  Simulator(const Simulator&) = delete;
  Simulator& operator=(const Simulator&) = delete;

  TimeNs now() const { return m_now_ns; }

  // Runs `callback` at now() + delay_ns. pre: delay_ns >= 0. Inline: the callback moves straight on.
  EventId schedule(TimeNs delay_ns, EventCallback callback) {
    SIM_ASSERT(delay_ns >= 0);
    return schedule_at(m_now_ns + delay_ns, std::move(callback));
  }
  // Runs `callback` at time_ns. pre: time_ns >= now().
  EventId schedule_at(TimeNs time_ns, EventCallback callback);
  // Lazy cancel. Returns true if the event was pending and is now cancelled; false if it already ran, was
  // already cancelled, or is the event running right now.
  bool cancel(EventId id);
  bool is_pending(EventId id) const;

  // Runs events in (time, seq) order until none is left or stop() is called.
  void run();
  // Runs every event with time <= time_ns, then advances the clock to time_ns. pre: time_ns >= now().
  void run_until(TimeNs time_ns);
  // From inside a callback: run()/run_until() return after the current event.
  void stop() { m_stop_requested = true; }

  // Counters since construction. scheduled == dispatched + skipped_cancelled + queued, always.
  std::uint64_t events_scheduled() const { return m_scheduled; }
  std::uint64_t events_dispatched() const { return m_dispatched; }
  std::uint64_t events_skipped() const { return m_skipped; }
  std::uint64_t events_queued() const { return m_queued; }  // includes cancelled ones not yet skipped
  std::uint64_t events_pending() const { return m_queued - m_cancelled_queued; }

 private:
  void process_one_event();
  void check_end_of_run(TimeNs start_ns) const;
  std::uint32_t take_slot();

  std::unique_ptr<IEventQueue> m_queue;
  std::vector<Event> m_events;              // the event table, indexed by QueueEntry::slot
  std::vector<std::uint32_t> m_free_slots;  // LIFO, so the table stays as small as the peak queue
  TimeNs m_now_ns = 0;
  EventKey m_last_key{0, kNoSeq};  // key of the last event popped (dispatched or skipped)
  std::uint64_t m_next_seq = 0;
  std::uint64_t m_scheduled = 0;
  std::uint64_t m_dispatched = 0;
  std::uint64_t m_skipped = 0;
  std::uint64_t m_queued = 0;
  std::uint64_t m_cancelled_queued = 0;
  bool m_stop_requested = false;
  bool m_running = false;
};

}  // namespace vramsim
