// Backend async-pool: what PyTorch's backend:cudaMallocAsync does with memory. Every allocation is a
// cudaMallocFromPoolAsync on the allocation's stream from one pool whose release threshold is UINT64_MAX
// (PyTorch sets it so, so the pool keeps what it has grown to); every free a cudaFreeAsync on the same
// stream; empty_cache synchronizes and trims the pool to 0, as PyTorch's emptyCache does.
//
// reserved_bytes() is the pool's cudaMemPoolAttrReservedMemCurrent, read after every call: a change is a
// "segment event" (the pool grew or shrank) and makes the runner measure the device. A private pool, not the
// device's default one, so nothing else in the process shares it.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <unordered_map>

#include "kernels/replay_cuda_common.h"

namespace vramsim::hw {
namespace {

struct OpenDevice {
  explicit OpenDevice(int device) { open_device(device); }
};

class AsyncPoolBackend final : public IReplayBackend {
 public:
  AsyncPoolBackend(int device, const std::vector<StreamId>& streams) : m_open(device), m_streams(streams) {
    cudaMemPoolProps props;
    std::memset(&props, 0, sizeof(props));
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    SIM_CUDA_CHECK(cudaMemPoolCreate(&m_pool, &props));
    std::uint64_t threshold = UINT64_MAX;
    SIM_CUDA_CHECK(cudaMemPoolSetAttribute(m_pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    warm_up_kernels();
    m_baseline_bytes = device_used_bytes();
  }
  ~AsyncPoolBackend() override {
    cudaDeviceSynchronize();
    for (const auto& [addr, live] : m_live) {
      cudaFreeAsync(reinterpret_cast<void*>(addr), m_streams.get(live.stream));
    }
    cudaDeviceSynchronize();
    cudaMemPoolDestroy(m_pool);
  }

  std::string_view name() const override { return "async-pool"; }
  std::string_view reserved_meaning() const override {
    return "the pool's reserved memory (cudaMemPoolAttrReservedMemCurrent)";
  }
  bool is_fake() const override { return false; }

  Bytes alloc(Bytes size_bytes, StreamId stream, std::uint32_t seed) override {
    void* ptr = nullptr;
    const cudaError_t status = cudaMallocFromPoolAsync(&ptr, size_bytes, m_pool, m_streams.get(stream));
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      throw std::runtime_error("out of device memory: cudaMallocFromPoolAsync(" + std::to_string(size_bytes) +
                               ") failed with " + std::to_string(m_reserved_bytes) + " bytes in the pool");
    }
    if (status != cudaSuccess) {
      gpu::throw_cuda_error(status, "cudaMallocFromPoolAsync(&ptr, size_bytes, m_pool, stream)", __FILE__,
                            __LINE__);
    }
    const auto addr = reinterpret_cast<Bytes>(ptr);
    m_live.emplace(addr, Live{size_bytes, stream, seed});
    gpu::fill_pattern(ptr, size_bytes, seed, m_streams.get(stream));
    update_reserved();
    return addr;
  }

  std::uint64_t verify(Bytes addr) override {
    const Live& live = m_live.at(addr);
    return gpu::verify_pattern(reinterpret_cast<const void*>(addr), live.size_bytes, live.seed,
                               m_streams.get(live.stream))
        .mismatches;
  }

  void free(Bytes addr) override {
    const auto it = m_live.find(addr);
    if (it == m_live.end()) {
      throw std::logic_error("free of an address this backend did not allocate");
    }
    SIM_CUDA_CHECK(cudaFreeAsync(reinterpret_cast<void*>(addr), m_streams.get(it->second.stream)));
    m_live.erase(it);
    update_reserved();
  }

  void empty_cache() override {
    SIM_CUDA_CHECK(cudaDeviceSynchronize());
    SIM_CUDA_CHECK(cudaMemPoolTrimTo(m_pool, 0));
    update_reserved();
  }

  Bytes reserved_bytes() const override { return m_reserved_bytes; }
  std::uint64_t segment_events() const override { return m_segment_events; }
  std::int64_t mem_in_use_bytes() override { return device_used_bytes() - m_baseline_bytes; }
  void sync() override { SIM_CUDA_CHECK(cudaDeviceSynchronize()); }
  void start_clock() override { m_clock.start(); }
  double stop_clock_ms() override { return m_clock.stop_ms(); }

 private:
  struct Live {
    Bytes size_bytes;
    StreamId stream;
    std::uint32_t seed;
  };

  void update_reserved() {
    std::uint64_t reserved = 0;
    SIM_CUDA_CHECK(cudaMemPoolGetAttribute(m_pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
    if (reserved != m_reserved_bytes) {
      ++m_segment_events;
      m_reserved_bytes = reserved;
    }
  }

  OpenDevice m_open;  // first: the members below need the device current
  StreamTable m_streams;
  EventClock m_clock;
  cudaMemPool_t m_pool = nullptr;
  std::int64_t m_baseline_bytes = 0;
  Bytes m_reserved_bytes = 0;
  std::uint64_t m_segment_events = 0;
  std::unordered_map<Bytes, Live> m_live;
};

}  // namespace

std::unique_ptr<IReplayBackend> make_cuda_async_pool(int device, const std::vector<StreamId>& streams) {
  return std::make_unique<AsyncPoolBackend>(device, streams);
}

}  // namespace vramsim::hw
