// What a hardware replay runs on: IReplayBackend (one allocation strategy on one device) and IReplayDevice
// (the device a simulator policy drives, for backend `model`). Real implementations are CUDA code
// (kernels/replay_cuda_*.cu, built only with CUDA); fake ones are host code (fake_device.h) for tests and
// dry runs. Nothing here includes a CUDA header, so the runner and its tests build without CUDA.
//
// Contract for every IReplayBackend:
//   * alloc(size_bytes, stream, seed) returns the device address of at least size_bytes bytes that no other
//     live allocation overlaps, and has queued a kernel on `stream` that writes every one of those bytes with
//     the pattern of `seed` (kernels/touch_kernels.h);
//   * verify(addr) counts the bytes of a live allocation that no longer hold its pattern (0 on a fake device,
//     which has no bytes): anything else means two allocations shared memory;
//   * free(addr) releases an address alloc returned (pre: live); empty_cache() returns cached memory to the
//     device where the strategy caches (a no-op elsewhere);
//   * reserved_bytes() is the strategy's own account of the device memory it holds (see each backend), and
//     segment_events() counts the device-level calls it made so far (cudaMalloc, cudaFree, map, unmap, pool
//     growth or trim): the runner measures the device after each operation that changed it;
//     mem_in_use_bytes() is what the device says is in use (cudaMemGetInfo total - free) minus the baseline
//     taken when the backend was made; call sync() first for a value that includes all queued work;
//   * failures throw (vramsim::gpu::CudaError for CUDA calls, naming the call and the error); the runner adds
//     the event index.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "sim/alloc/device_memory.h"
#include "sim/core/types.h"

namespace vramsim::hw {

class IReplayBackend {
 public:
  virtual ~IReplayBackend() = default;
  virtual std::string_view name() const = 0;
  // One line saying what reserved_bytes() counts, for reports ("sum of live cudaMalloc sizes", ...).
  virtual std::string_view reserved_meaning() const = 0;
  virtual bool is_fake() const = 0;  // true: host accounting only, no GPU was used
  virtual Bytes alloc(Bytes size_bytes, StreamId stream, std::uint32_t seed) = 0;
  virtual std::uint64_t verify(Bytes addr) = 0;
  virtual void free(Bytes addr) = 0;
  virtual void empty_cache() = 0;
  virtual Bytes reserved_bytes() const = 0;
  virtual std::uint64_t segment_events() const = 0;
  virtual std::int64_t mem_in_use_bytes() = 0;  // signed: the device may report less than the baseline
  virtual void sync() = 0;
  // Elapsed time between start_clock() and stop_clock(), milliseconds (CUDA events on a GPU, the host's
  // steady clock on a fake device). pre: start_clock() was called.
  virtual void start_clock() = 0;
  virtual double stop_clock_ms() = 0;
};

// The device under a simulator policy (backend `model`): IDeviceMemory's malloc / free / reserve / map /
// unmap done for real (cudaMalloc, cuMemCreate + cuMemMap, ...), plus what the runner needs from a device.
class IReplayDevice : public IDeviceMemory {
 public:
  virtual std::string_view name() const = 0;
  virtual bool is_fake() const = 0;
  // Writes the pattern of `seed` over [addr, addr + size_bytes) on `stream`; the range must lie in memory
  // malloc'ed or mapped here (a fake device checks that; a real one would fault). verify() counts the bytes
  // that do not hold it (synchronous; a fake device returns 0).
  virtual void touch(Bytes addr, Bytes size_bytes, StreamId stream, std::uint32_t seed) = 0;
  virtual std::uint64_t verify(Bytes addr, Bytes size_bytes, StreamId stream, std::uint32_t seed) = 0;
  virtual std::int64_t mem_in_use_bytes() = 0;  // as IReplayBackend::mem_in_use_bytes
  virtual void sync() = 0;
  virtual void start_clock() = 0;
  virtual double stop_clock_ms() = 0;
};

// The CUDA side says there is no device to run on (no driver, no GPU, a device index out of range, or a
// build without CUDA). The CLI prints it as one line and exits 2, as vramsim-gpu-probe does.
class NoCudaDevice : public std::runtime_error {
 public:
  explicit NoCudaDevice(const std::string& message) : std::runtime_error(message) {}
};

// What the CUDA build provides (kernels/replay_cuda_*.cu); a build without CUDA provides hooks that throw
// NoCudaDevice. `streams` are the recorded stream handles the plan uses: a real device creates one CUDA
// stream per handle up front (0 = the legacy default stream), so that stream creation is not measured.
// Both throw NoCudaDevice when there is no GPU to run on.
struct CudaHooks {
  std::function<std::unique_ptr<IReplayDevice>(int device, const std::vector<StreamId>& streams)> make_device;
  std::function<std::unique_ptr<IReplayBackend>(int device, const std::vector<StreamId>& streams)>
      make_async_pool;
};

}  // namespace vramsim::hw
