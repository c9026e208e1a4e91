// An allocator for large, short-lived arrays (a decoded trace's node tables): blocks of 1 MiB and more are
// mapped directly, aligned to 2 MiB and advised as transparent huge pages, so that filling them takes one
// page fault per 2 MiB instead of one per 4 KiB. On the 2-vCPU VM of bench/RESULTS.md a page fault costs
// several microseconds, and decoding a 100 MB snapshot touches ~150 MB of fresh memory: the faults were half
// of its time. Smaller blocks, and systems without madvise, use operator new.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace vramsim {

template <class T>
class HugePageAllocator {
 public:
  using value_type = T;
  static constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;
  // From 1 MiB up: rounding such a block up to a huge page costs at most as much address space again (and
  // no memory until touched).
  static constexpr std::size_t kMapThresholdBytes = std::size_t{1} << 20;

  HugePageAllocator() = default;
  template <class U>
  HugePageAllocator(const HugePageAllocator<U>& /*unused*/) noexcept {}

  T* allocate(std::size_t n) {
    // The mapping is the size rounded up to a huge page, plus one huge page for the alignment.
    if (n > (static_cast<std::size_t>(-1) - 2 * kHugePageBytes) / sizeof(T)) {
      throw std::bad_array_new_length();
    }
    const std::size_t bytes = n * sizeof(T);
#if defined(__linux__)
    if (bytes >= kMapThresholdBytes) {
      // Huge pages cover aligned 2 MiB ranges only: map one huge page more, then trim to an aligned range.
      const std::size_t length = mapped_length(bytes);
      void* p =
          mmap(nullptr, length + kHugePageBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) {
        throw std::bad_alloc();
      }
      const auto start = reinterpret_cast<std::uintptr_t>(p);
      const std::uintptr_t aligned = (start + kHugePageBytes - 1) & ~std::uintptr_t{kHugePageBytes - 1};
      if (aligned > start) {
        munmap(p, aligned - start);
      }
      if (const std::size_t tail = start + length + kHugePageBytes - (aligned + length); tail > 0) {
        munmap(reinterpret_cast<void*>(aligned + length), tail);
      }
      madvise(reinterpret_cast<void*>(aligned), length, MADV_HUGEPAGE);  // advice: without THP, plain pages
      return reinterpret_cast<T*>(aligned);
    }
#endif
    return static_cast<T*>(::operator new(bytes));
  }

  void deallocate(T* p, [[maybe_unused]] std::size_t n) noexcept {  // n: unused where nothing is mapped
#if defined(__linux__)
    if (n * sizeof(T) >= kMapThresholdBytes) {
      munmap(p, mapped_length(n * sizeof(T)));
      return;
    }
#endif
    ::operator delete(p);
  }

  template <class U>
  bool operator==(const HugePageAllocator<U>& /*unused*/) const noexcept {
    return true;
  }

 private:
  static std::size_t mapped_length(std::size_t bytes) {
    return (bytes + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
  }
};

}  // namespace vramsim
