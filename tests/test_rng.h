// Deterministic random numbers for tests (same sequence on every platform and standard library).
#pragma once

#include <cstdint>

namespace vramsim::test {

// splitmix64: a fixed generator whose output does not depend on the standard library.
struct Rng {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  std::uint64_t below(std::uint64_t n) { return next() % n; }
};

}  // namespace vramsim::test
