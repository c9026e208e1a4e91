// Touching device memory for real: fill an allocation with a position-dependent byte pattern and count the
// bytes that do not hold it. The pattern differs per seed and per byte, so a fill that skipped a page, wrote
// through a wrong mapping or aliased another allocation shows up as mismatches.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace vramsim::gpu {

// The byte the pattern puts at `offset` for `seed` (the same function the kernels use).
__host__ __device__ inline std::uint8_t pattern_byte(std::uint64_t offset, std::uint32_t seed) {
  std::uint64_t x = offset + 0x9e3779b97f4a7c15ULL * (static_cast<std::uint64_t>(seed) + 1);
  x ^= x >> 29;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 32;
  return static_cast<std::uint8_t>(x);
}

struct VerifyResult {
  std::uint64_t mismatches = 0;
  std::uint64_t first_mismatch = UINT64_MAX;  // byte offset, UINT64_MAX when none
};

// Writes pattern_byte(i, seed) to every byte of [ptr, ptr + bytes). Asynchronous on `stream`; throws
// CudaError when the launch fails.
void fill_pattern(void* ptr, std::size_t bytes, std::uint32_t seed, cudaStream_t stream = nullptr);

// Counts the bytes of [ptr, ptr + bytes) that differ from the pattern; synchronizes `stream`. Uses one pair
// of device counters per process: do not run two verifications at once.
VerifyResult verify_pattern(const void* ptr, std::size_t bytes, std::uint32_t seed,
                            cudaStream_t stream = nullptr);

}  // namespace vramsim::gpu
