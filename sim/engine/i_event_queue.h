// The future-event list behind the Simulator: five methods, as in ns-3's scheduler.h. Backends live one per
// file under queues/ and are listed in queue_registry.cpp; tests/engine/test_queue_contract.cpp runs the same
// randomized contract against every one of them.
//
// Contract (every backend):
//   * peek()/pop() return the entry with the smallest EventKey (operator< on (time_ns, seq)); keys are unique
//     (the Simulator never pushes two entries with the same seq), so the order is total and the result of a
//     sequence of calls does not depend on the backend.
//   * remove(e) removes exactly the entry equal to `e`; pre: `e` is in the queue.
//   * peek()/pop() pre: !empty(). Violations are SIM_ASSERT failures, not errors.
//
// Ownership: entries are plain values (EventKey + slot index). The queue owns its copies and nothing else;
// the events they point to (callbacks, cancel flags) are owned by the Simulator's event table and outlive
// their queue entries. A backend never dereferences `slot`.
//
// Complexity of the shipped backends (n = entries in the queue):
//
//   backend       push        pop / peek        remove      per-entry memory
//   binary-heap   O(log n)    O(log n) / O(1)   O(n)        24 B in a vector (no per-entry allocation)
//   map           O(log n)    O(log n) / O(1)   O(log n)    ~64 B, one red-black node per entry
#pragma once

#include "sim/engine/event.h"

namespace vramsim {

class IEventQueue {
 public:
  virtual ~IEventQueue() = default;
  virtual void push(const QueueEntry& entry) = 0;
  virtual bool empty() const = 0;
  // pre: !empty(). The reference is valid until the next non-const call.
  virtual const QueueEntry& peek() const = 0;
  // pre: !empty().
  virtual QueueEntry pop() = 0;
  // pre: `entry` is in the queue.
  virtual void remove(const QueueEntry& entry) = 0;
};

}  // namespace vramsim
