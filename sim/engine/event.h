// The vocabulary of the discrete-event engine: an event's key (when, and in which order among events at the
// same time), the event itself, and the handle callers keep to cancel it.
//
// Note [Deterministic event order]: events are ordered by (time_ns, seq), where seq is drawn from one counter
// owned by the Simulator and incremented on every schedule() call. Two events at the same simulated time
// therefore run in the order they were scheduled, whatever queue backend holds them, and a run is a pure
// function of its inputs: the same schedule() calls give the same dispatch order, bit for bit. (ns-3's
// Scheduler::EventKey orders by (m_ts, m_uid) for the same reason.)
#pragma once

#include <cstdint>
#include <functional>
#include <limits>

#include "sim/core/types.h"

namespace vramsim {

struct EventKey {
  TimeNs time_ns = 0;     // simulated time the event fires at; never before the time it was scheduled
  std::uint64_t seq = 0;  // unique per Simulator; breaks ties between events at the same time

  friend constexpr bool operator==(const EventKey&, const EventKey&) = default;
  friend constexpr bool operator<(const EventKey& a, const EventKey& b) {
    return a.time_ns < b.time_ns || (a.time_ns == b.time_ns && a.seq < b.seq);
  }
};

// What a queue backend stores: the key, and the slot of the Event in the Simulator's event table. The
// queue never sees the callback, so its entries are 24 trivially-copyable bytes (the analogue of ns-3's
// Scheduler::Event {EventImpl*, EventKey}).
struct QueueEntry {
  EventKey key;
  std::uint32_t slot = 0;

  friend constexpr bool operator==(const QueueEntry&, const QueueEntry&) = default;
};

using EventCallback = std::function<void()>;

inline constexpr std::uint64_t kNoSeq = std::numeric_limits<std::uint64_t>::max();

// One scheduled event, owned by the Simulator's event table. `cancelled` is the lazy-cancel flag: cancel()
// sets it and the run loop skips the event when it reaches the front of the queue.
struct Event {
  EventKey key{0, kNoSeq};  // key.seq == kNoSeq marks a free slot
  EventCallback callback;
  bool cancelled = false;
};

// Handle returned by Simulator::schedule*(); valid for cancel() until the event has run or been skipped.
// Stale handles are detected (the slot's seq no longer matches) and cancel() then returns false.
struct EventId {
  std::uint64_t seq = kNoSeq;
  std::uint32_t slot = 0;

  friend constexpr bool operator==(const EventId&, const EventId&) = default;
};

}  // namespace vramsim
