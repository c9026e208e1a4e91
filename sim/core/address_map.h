// AddressMap: a hash map from a device address (or any 64-bit key below 2^64 - 1) to a small value, in one
// flat array: open addressing with linear probing and backward-shift deletion (no tombstones), so inserting
// and erasing allocate nothing once the table has grown to the working set. The replay of a trace looks up
// the block of every freed address; with std::unordered_map each alloc cost a node allocation and each free
// its release (issue 40: no per-event allocation on the replay path).
//
// Contract: keys are any value but kEmptyKey (~0: no device address reaches it; insert asserts it); the
// table never iterates, so its layout cannot leak into any output. Load factor at most 1/2.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "sim/core/assert.h"

namespace vramsim {

template <typename Value>
class AddressMap {
 public:
  static constexpr std::uint64_t kEmptyKey = ~std::uint64_t{0};

  AddressMap() { m_slots.resize(kMinSlots); }

  std::size_t size() const { return m_size; }
  std::size_t slot_count() const { return m_slots.size(); }  // a power of two, at least 64

  // The slot where key's probe run starts in a table of `slots` slots (a power of two). Fibonacci hashing:
  // addresses are multiples of 512, so their low bits alone would collide. Public for tests that build
  // colliding runs on purpose.
  static std::size_t home_slot(std::uint64_t key, std::size_t slots) {
    return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> (64 - std::countr_zero(slots))) &
           (slots - 1);
  }

  // Inserts (key, value) unless key is present; returns whether it inserted.
  bool insert(std::uint64_t key, Value value) {
    SIM_ASSERT(key != kEmptyKey);
    if (2 * (m_size + 1) > m_slots.size()) {
      grow();
    }
    std::size_t i = home(key);
    while (m_slots[i].key != kEmptyKey) {
      if (m_slots[i].key == key) {
        return false;
      }
      i = (i + 1) & mask();
    }
    m_slots[i] = Slot{key, value};
    ++m_size;
    return true;
  }

  // The value stored for key, or nullptr. Valid until the next insert or erase.
  Value* find(std::uint64_t key) {
    std::size_t i = home(key);
    while (m_slots[i].key != kEmptyKey) {
      if (m_slots[i].key == key) {
        return &m_slots[i].value;
      }
      i = (i + 1) & mask();
    }
    return nullptr;
  }

  // std::unordered_map::operator[]: the value for key, value-initialised and inserted when absent.
  Value& operator[](std::uint64_t key) {
    if (Value* found = find(key)) {
      return *found;
    }
    insert(key, Value{});
    return *find(key);
  }

  // Removes key; returns whether it was present. Shifts the following entries of its probe run back so that
  // every key stays reachable from its home slot without tombstones (Knuth's Algorithm R).
  bool erase(std::uint64_t key) {
    std::size_t i = home(key);
    while (m_slots[i].key != key) {
      if (m_slots[i].key == kEmptyKey) {
        return false;
      }
      i = (i + 1) & mask();
    }
    std::size_t hole = i;
    for (std::size_t j = (hole + 1) & mask(); m_slots[j].key != kEmptyKey; j = (j + 1) & mask()) {
      const std::size_t h = home(m_slots[j].key);
      // j's entry may move into the hole when its home is not cyclically in (hole, j].
      const bool stays = hole <= j ? (hole < h && h <= j) : (hole < h || h <= j);
      if (!stays) {
        m_slots[hole] = m_slots[j];
        hole = j;
      }
    }
    m_slots[hole].key = kEmptyKey;
    --m_size;
    return true;
  }

 private:
  struct Slot {
    std::uint64_t key = kEmptyKey;
    Value value{};
  };
  static constexpr std::size_t kMinSlots = 64;

  std::size_t mask() const { return m_slots.size() - 1; }
  std::size_t home(std::uint64_t key) const { return home_slot(key, m_slots.size()); }

  void grow() {
    std::vector<Slot> old;
    old.swap(m_slots);
    m_slots.assign(old.size() * 2, Slot{});
    m_size = 0;
    for (const Slot& slot : old) {
      if (slot.key != kEmptyKey) {
        insert(slot.key, slot.value);
      }
    }
  }

  std::vector<Slot> m_slots;
  std::size_t m_size = 0;
};

}  // namespace vramsim
