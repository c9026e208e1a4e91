// ChunkedVector: an append-only sequence indexed like a vector whose elements never move: they live in
// fixed-size chunks, and growing adds a chunk instead of moving every element into a larger array. For
// large elements appended one by one (the autograd tape's nodes: a few hundred bytes each, thousands per
// step), std::vector's growth moved and destroyed each element about once more (issue 40, twelfth pass:
// 4,095 node moves for 3,226 nodes in the quick start's prediction).
//
// Contract: push_back / emplace_back append at index size(); references and pointers to elements stay
// valid until the container is destroyed (stronger than std::vector's); operator[] is O(1) (a shift and a
// mask); elements are destroyed in index order. Not copyable (the tape is not copied).
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <utility>
#include <vector>

#include "sim/core/assert.h"

namespace vramsim {

template <typename T, std::size_t kChunkLog2 = 8>
class ChunkedVector {
 public:
  static constexpr std::size_t kChunkSize = std::size_t{1} << kChunkLog2;

  ChunkedVector() = default;
  ChunkedVector(const ChunkedVector&) = delete;
  ChunkedVector& operator=(const ChunkedVector&) = delete;
  ChunkedVector(ChunkedVector&& other) noexcept
      : m_chunks(std::move(other.m_chunks)), m_size(std::exchange(other.m_size, 0)) {}
  ChunkedVector& operator=(ChunkedVector&& other) noexcept {
    if (this != &other) {
      clear();
      m_chunks = std::move(other.m_chunks);
      m_size = std::exchange(other.m_size, 0);
    }
    return *this;
  }
  ~ChunkedVector() { clear(); }

  std::size_t size() const { return m_size; }
  bool empty() const { return m_size == 0; }

  T& operator[](std::size_t i) { return m_chunks[i >> kChunkLog2][i & (kChunkSize - 1)]; }
  const T& operator[](std::size_t i) const { return m_chunks[i >> kChunkLog2][i & (kChunkSize - 1)]; }
  T& back() {
    SIM_ASSERT(m_size > 0);
    return (*this)[m_size - 1];
  }

  template <typename... Args>
  T& emplace_back(Args&&... args) {
    if ((m_size >> kChunkLog2) == m_chunks.size()) {
      m_chunks.push_back(std::allocator<T>().allocate(kChunkSize));
    }
    T* slot = &m_chunks[m_size >> kChunkLog2][m_size & (kChunkSize - 1)];
    ::new (static_cast<void*>(slot)) T(std::forward<Args>(args)...);
    ++m_size;
    return *slot;
  }
  T& push_back(T&& value) { return emplace_back(std::move(value)); }

  // Destroys every element (in index order) and releases the chunks.
  void clear() {
    for (std::size_t i = 0; i < m_size; ++i) {
      (*this)[i].~T();
    }
    for (T* chunk : m_chunks) {
      std::allocator<T>().deallocate(chunk, kChunkSize);
    }
    m_chunks.clear();
    m_size = 0;
  }

 private:
  std::vector<T*> m_chunks;  // each holds kChunkSize slots, the first m_size of all of them constructed
  std::size_t m_size = 0;
};

}  // namespace vramsim
