// map: a std::map from EventKey to slot (after ns-3's map-scheduler.cc). Keys are unique (seq), so the map
// is a total order and begin() is always the next event. The second backend proves the interface and is the
// one to pick when a caller removes events eagerly.
//
//   push     O(log n)   one node allocation
//   peek     O(1)       begin() (the entry is cached so peek() can return a reference)
//   pop      O(log n)   erase(begin()), amortised O(1)
//   remove   O(log n)   find by key
#include <map>
#include <memory>

#include "sim/core/assert.h"
#include "sim/engine/i_event_queue.h"
#include "sim/engine/queue_registry.h"

namespace vramsim {
namespace {

class MapQueue final : public IEventQueue {
 public:
  void push(const QueueEntry& entry) override {
    const bool inserted = m_map.emplace(entry.key, entry.slot).second;
    SIM_ASSERT(inserted && "push: duplicate EventKey");
  }

  bool empty() const override { return m_map.empty(); }

  const QueueEntry& peek() const override {
    SIM_ASSERT(!m_map.empty());
    const auto& [key, slot] = *m_map.begin();
    m_peeked = QueueEntry{key, slot};
    return m_peeked;
  }

  QueueEntry pop() override {
    SIM_ASSERT(!m_map.empty());
    const auto it = m_map.begin();
    const QueueEntry top{it->first, it->second};
    m_map.erase(it);
    return top;
  }

  void remove(const QueueEntry& entry) override {
    const auto it = m_map.find(entry.key);
    SIM_ASSERT(it != m_map.end() && it->second == entry.slot && "remove: entry is not in the queue");
    m_map.erase(it);
  }

 private:
  std::map<EventKey, std::uint32_t> m_map;
  mutable QueueEntry m_peeked;
};

}  // namespace

std::unique_ptr<IEventQueue> make_map_queue() { return std::make_unique<MapQueue>(); }

}  // namespace vramsim
