#include "kernels/touch_kernels.h"

#include <algorithm>

#include "kernels/cuda_check.h"

namespace vramsim::gpu {
namespace {

constexpr int kThreadsPerBlock = 256;

// [0] mismatches, [1] first mismatching offset. Module memory rather than a cudaMalloc per call, so verifying
// does not disturb the memory-usage measurements of the probe. One verify_pattern at a time per device.
__device__ unsigned long long g_verify_counters[2];

// Grid-stride loops over 8-byte words (cudaMalloc returns 256-byte aligned pointers), then the tail bytes.
__global__ void fill_kernel(std::uint8_t* ptr, std::uint64_t bytes, std::uint32_t seed) {
  const std::uint64_t words = bytes / 8;
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  auto* out = reinterpret_cast<std::uint64_t*>(ptr);
  for (std::uint64_t w = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; w < words;
       w += stride) {
    std::uint64_t v = 0;
    for (int k = 0; k < 8; ++k) {
      v |= static_cast<std::uint64_t>(pattern_byte(w * 8 + k, seed)) << (8 * k);
    }
    out[w] = v;
  }
  for (std::uint64_t i = words * 8 + static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < bytes; i += stride) {
    ptr[i] = pattern_byte(i, seed);
  }
}

__global__ void verify_kernel(const std::uint8_t* ptr, std::uint64_t bytes, std::uint32_t seed,
                              unsigned long long* mismatches, unsigned long long* first_mismatch) {
  const std::uint64_t words = bytes / 8;
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  const auto* in = reinterpret_cast<const std::uint64_t*>(ptr);
  unsigned long long bad = 0;
  unsigned long long first = ~0ULL;
  for (std::uint64_t w = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; w < words;
       w += stride) {
    const std::uint64_t v = in[w];
    for (int k = 0; k < 8; ++k) {
      if (static_cast<std::uint8_t>(v >> (8 * k)) != pattern_byte(w * 8 + k, seed)) {
        ++bad;
        first = first < w * 8 + k ? first : w * 8 + k;
      }
    }
  }
  for (std::uint64_t i = words * 8 + static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < bytes; i += stride) {
    if (ptr[i] != pattern_byte(i, seed)) {
      ++bad;
      first = first < i ? first : i;
    }
  }
  if (bad != 0) {  // rare: atomics only where something is wrong
    atomicAdd(mismatches, bad);
    atomicMin(first_mismatch, first);
  }
}

unsigned grid_for(std::size_t bytes) {
  int device = 0;
  int sms = 0;
  SIM_CUDA_CHECK(cudaGetDevice(&device));
  SIM_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const std::size_t words = bytes / 8 + 1;
  const std::size_t wanted = (words + kThreadsPerBlock - 1) / kThreadsPerBlock;
  return static_cast<unsigned>(std::min<std::size_t>(wanted, static_cast<std::size_t>(std::max(sms, 1)) * 8));
}

}  // namespace

void fill_pattern(void* ptr, std::size_t bytes, std::uint32_t seed, cudaStream_t stream) {
  if (bytes == 0) {
    return;
  }
  fill_kernel<<<grid_for(bytes), kThreadsPerBlock, 0, stream>>>(static_cast<std::uint8_t*>(ptr), bytes, seed);
  SIM_CUDA_CHECK_KERNEL();
}

VerifyResult verify_pattern(const void* ptr, std::size_t bytes, std::uint32_t seed, cudaStream_t stream) {
  VerifyResult result;
  if (bytes == 0) {
    return result;
  }
  unsigned long long* counters = nullptr;
  SIM_CUDA_CHECK(cudaGetSymbolAddress(reinterpret_cast<void**>(&counters), g_verify_counters));
  const unsigned long long init[2] = {0, ~0ULL};
  unsigned long long host[2] = {0, 0};
  SIM_CUDA_CHECK(cudaMemcpyAsync(counters, init, sizeof(init), cudaMemcpyHostToDevice, stream));
  verify_kernel<<<grid_for(bytes), kThreadsPerBlock, 0, stream>>>(static_cast<const std::uint8_t*>(ptr),
                                                                  bytes, seed, counters, counters + 1);
  SIM_CUDA_CHECK_KERNEL();
  SIM_CUDA_CHECK(cudaMemcpyAsync(host, counters, sizeof(host), cudaMemcpyDeviceToHost, stream));
  SIM_CUDA_CHECK(cudaStreamSynchronize(stream));
  result.mismatches = host[0];
  result.first_mismatch = host[1];
  return result;
}

}  // namespace vramsim::gpu
