// The event-queue backends vramsim knows, by name: one line each in queue_registry.cpp (style lesson 11).
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "sim/engine/i_event_queue.h"

namespace vramsim {

struct EventQueueEntry {
  std::string_view name;
  std::string_view summary;
  std::unique_ptr<IEventQueue> (*make)();
};

// In the order they are listed; the first one is the default backend of a Simulator.
const std::vector<EventQueueEntry>& event_queue_registry();
// Throws InputError naming the known backends when `name` is not one of them.
const EventQueueEntry& find_event_queue(std::string_view name);

// Factories, one per file under queues/.
std::unique_ptr<IEventQueue> make_binary_heap_queue();
std::unique_ptr<IEventQueue> make_map_queue();

}  // namespace vramsim
