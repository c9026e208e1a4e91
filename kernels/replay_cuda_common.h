// What the CUDA replay device and the async-pool backend share: finding the device, one CUDA stream per
// recorded stream handle, the baseline of cudaMemGetInfo, and a CUDA-event clock. Included by .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/cuda_check.h"
#include "kernels/replay/replay_backend.h"
#include "kernels/touch_kernels.h"

namespace vramsim::hw {

// Selects `device` and creates its context; throws NoCudaDevice (one line, as vramsim-gpu-probe words it)
// when there is none.
inline void open_device(int device) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    throw NoCudaDevice("cudaGetDeviceCount failed: " + gpu::cuda_error_text(status));
  }
  if (count == 0) {
    throw NoCudaDevice("cudaGetDeviceCount found 0 devices");
  }
  if (device >= count) {
    throw NoCudaDevice("--device " + std::to_string(device) + ": only " + std::to_string(count) +
                       " device(s)");
  }
  SIM_CUDA_CHECK(cudaSetDevice(device));
  SIM_CUDA_CHECK(cudaFree(nullptr));  // the context now, so its memory is part of the baseline
}

// One CUDA stream per recorded handle, made up front (stream creation may take device memory). Handle 0 is
// the legacy default stream; the others are blocking streams, so an event on the default stream orders
// after all of them (the clock below relies on it).
class StreamTable {
 public:
  explicit StreamTable(const std::vector<StreamId>& handles) {
    for (const StreamId h : handles) {
      if (h == 0 || m_streams.count(h) != 0) {
        continue;
      }
      cudaStream_t s = nullptr;
      SIM_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamDefault));
      m_streams.emplace(h, s);
    }
  }
  ~StreamTable() {
    for (const auto& [handle, s] : m_streams) {
      cudaStreamDestroy(s);
    }
  }
  StreamTable(const StreamTable&) = delete;
  StreamTable& operator=(const StreamTable&) = delete;
  cudaStream_t get(StreamId handle) const {
    const auto it = m_streams.find(handle);
    return it == m_streams.end() ? nullptr : it->second;
  }

 private:
  std::unordered_map<StreamId, cudaStream_t> m_streams;
};

inline std::int64_t device_used_bytes() {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  SIM_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return static_cast<std::int64_t>(total_bytes) - static_cast<std::int64_t>(free_bytes);
}

// Loads the touch kernels' module (lazy loading would otherwise take memory during the first touch).
inline void warm_up_kernels() {
  void* p = nullptr;
  SIM_CUDA_CHECK(cudaMalloc(&p, 4096));
  gpu::fill_pattern(p, 4096, 0);
  gpu::verify_pattern(p, 4096, 0);
  SIM_CUDA_CHECK(cudaFree(p));
  SIM_CUDA_CHECK(cudaDeviceSynchronize());
}

// Elapsed time between two events on the legacy default stream (which orders after the blocking streams).
class EventClock {
 public:
  EventClock() {
    SIM_CUDA_CHECK(cudaEventCreate(&m_start));
    SIM_CUDA_CHECK(cudaEventCreate(&m_stop));
  }
  ~EventClock() {
    cudaEventDestroy(m_start);
    cudaEventDestroy(m_stop);
  }
  EventClock(const EventClock&) = delete;
  EventClock& operator=(const EventClock&) = delete;
  void start() { SIM_CUDA_CHECK(cudaEventRecord(m_start, nullptr)); }
  double stop_ms() {
    SIM_CUDA_CHECK(cudaEventRecord(m_stop, nullptr));
    SIM_CUDA_CHECK(cudaEventSynchronize(m_stop));
    float ms = 0.0f;
    SIM_CUDA_CHECK(cudaEventElapsedTime(&ms, m_start, m_stop));
    return static_cast<double>(ms);
  }

 private:
  cudaEvent_t m_start = nullptr;
  cudaEvent_t m_stop = nullptr;
};

// The async-pool backend (replay_cuda_async_pool.cu), for cuda_hooks().
std::unique_ptr<IReplayBackend> make_cuda_async_pool(int device, const std::vector<StreamId>& streams);

}  // namespace vramsim::hw
