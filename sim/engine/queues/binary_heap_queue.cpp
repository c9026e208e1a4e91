// binary-heap: an implicit binary min-heap of QueueEntry values in one std::vector (after ns-3's
// heap-scheduler.cc, 0-based). The default backend: entries are 24 bytes, stored contiguously, and a push or
// pop moves O(log n) of them with no allocation once the vector has grown.
//
//   push     O(log n)   append, sift up
//   peek     O(1)       the root
//   pop      O(log n)   move the last entry to the root, sift down
//   remove   O(n)       linear search, then replace by the last entry and sift it whichever way it must go
//
// remove() is linear because nothing maps an entry to its heap position; the Simulator cancels lazily and
// never calls it, so the cost only matters to callers that remove eagerly (use the map backend there).
#include <memory>
#include <utility>
#include <vector>

#include "sim/core/assert.h"
#include "sim/engine/i_event_queue.h"
#include "sim/engine/queue_registry.h"

namespace vramsim {
namespace {

class BinaryHeapQueue final : public IEventQueue {
 public:
  void push(const QueueEntry& entry) override {
    m_heap.push_back(entry);
    sift_up(m_heap.size() - 1);
  }

  bool empty() const override { return m_heap.empty(); }

  const QueueEntry& peek() const override {
    SIM_ASSERT(!m_heap.empty());
    return m_heap.front();
  }

  QueueEntry pop() override {
    SIM_ASSERT(!m_heap.empty());
    QueueEntry top = m_heap.front();
    erase_at(0);
    return top;
  }

  void remove(const QueueEntry& entry) override {
    for (std::size_t i = 0; i < m_heap.size(); ++i) {
      if (m_heap[i] == entry) {
        erase_at(i);
        return;
      }
    }
    SIM_ASSERT(false && "remove: entry is not in the queue");
  }

 private:
  static std::size_t parent(std::size_t i) { return (i - 1) / 2; }

  bool less(std::size_t a, std::size_t b) const { return m_heap[a].key < m_heap[b].key; }

  // Replaces position i by the last entry and restores the heap property around it. The moved entry may
  // be smaller than i's parent (when i is not on the last entry's root path), so it can go either way.
  void erase_at(std::size_t i) {
    m_heap[i] = m_heap.back();
    m_heap.pop_back();
    if (i < m_heap.size()) {
      sift_down(sift_up(i));
    }
  }

  std::size_t sift_up(std::size_t i) {
    while (i > 0 && less(i, parent(i))) {
      std::swap(m_heap[i], m_heap[parent(i)]);
      i = parent(i);
    }
    return i;
  }

  void sift_down(std::size_t i) {
    const std::size_t n = m_heap.size();
    for (;;) {
      const std::size_t left = 2 * i + 1;
      const std::size_t right = left + 1;
      std::size_t smallest = i;
      if (left < n && less(left, smallest)) {
        smallest = left;
      }
      if (right < n && less(right, smallest)) {
        smallest = right;
      }
      if (smallest == i) {
        return;
      }
      std::swap(m_heap[i], m_heap[smallest]);
      i = smallest;
    }
  }

  std::vector<QueueEntry> m_heap;
};

}  // namespace

std::unique_ptr<IEventQueue> make_binary_heap_queue() { return std::make_unique<BinaryHeapQueue>(); }

}  // namespace vramsim
