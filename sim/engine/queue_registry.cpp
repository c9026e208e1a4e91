#include "sim/engine/queue_registry.h"

#include <string>

#include <fmt/format.h>

#include "sim/core/error.h"

namespace vramsim {

const std::vector<EventQueueEntry>& event_queue_registry() {
  static const std::vector<EventQueueEntry> kQueues = {
      {"binary-heap", "implicit binary min-heap on a vector (default)", &make_binary_heap_queue},
      {"map", "std::map ordered by (time, seq): O(log n) remove", &make_map_queue},
  };
  return kQueues;
}

const EventQueueEntry& find_event_queue(std::string_view name) {
  std::string known;
  for (const EventQueueEntry& q : event_queue_registry()) {
    if (q.name == name) {
      return q;
    }
    known += known.empty() ? "" : ", ";
    known += q.name;
  }
  throw InputError(fmt::format("--event-queue: unknown event queue '{}' (known: {})", name, known));
}

}  // namespace vramsim
