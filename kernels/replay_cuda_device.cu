// CudaDevice: the IReplayDevice of backends cuda-malloc and model on a real GPU.
//
//   malloc / free              cudaMalloc / cudaFree (cudaErrorMemoryAllocation is an answer, not an error:
//                              malloc returns nullopt so that a policy runs its retry ladder, as PyTorch
//                              does)
//   reserve / release          cuMemAddressReserve / cuMemAddressFree, sizes rounded up to the granularity
//   map                        per granularity page: cuMemCreate + cuMemMap + cuMemSetAccess (read-write for
//                              this device); all or nothing: CUDA_ERROR_OUT_OF_MEMORY undoes the pages of
//                              this call and returns false
//   unmap                      cudaDeviceSynchronize (queued touches may still use the pages), then per page
//                              cuMemUnmap + cuMemRelease
//
// Note [One handle per page]: cuMemUnmap must unmap exactly what one cuMemMap mapped, and a policy may unmap
// part of what it mapped in one call (expandable segments shrink page by page). So every page gets its own
// physical handle, as PyTorch's ExpandableSegment does (it uses 2 MiB / 20 MiB pages; we use the device's
// minimum granularity, 2 MiB on current GPUs, which the policies' page sizes are multiples of).
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstring>
#include <iterator>
#include <map>
#include <optional>
#include <stdexcept>
#include <unordered_map>

#include "kernels/driver_api.h"
#include "kernels/replay_cuda.h"
#include "kernels/replay_cuda_common.h"

namespace vramsim::hw {
namespace {

using gpu::cu_result_text;
using gpu::driver_function;

// The VMM entry points, resolved once per device.
struct VmmApi {
  decltype(&cuMemAddressReserve) address_reserve = nullptr;
  decltype(&cuMemAddressFree) address_free = nullptr;
  decltype(&cuMemCreate) create = nullptr;
  decltype(&cuMemRelease) release = nullptr;
  decltype(&cuMemMap) map = nullptr;
  decltype(&cuMemUnmap) unmap = nullptr;
  decltype(&cuMemSetAccess) set_access = nullptr;
  decltype(&cuMemGetAllocationGranularity) granularity = nullptr;
  std::string error;  // why the API is unavailable, "" when every entry point resolved

  VmmApi() {
    address_reserve = driver_function<decltype(address_reserve)>("cuMemAddressReserve", error);
    address_free = driver_function<decltype(address_free)>("cuMemAddressFree", error);
    create = driver_function<decltype(create)>("cuMemCreate", error);
    release = driver_function<decltype(release)>("cuMemRelease", error);
    map = driver_function<decltype(map)>("cuMemMap", error);
    unmap = driver_function<decltype(unmap)>("cuMemUnmap", error);
    set_access = driver_function<decltype(set_access)>("cuMemSetAccess", error);
    granularity = driver_function<decltype(granularity)>("cuMemGetAllocationGranularity", error);
  }
};

[[noreturn]] void throw_cu_error(CUresult r, const char* expr, const char* file, int line) {
  throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + expr +
                           " failed: " + cu_result_text(r));
}

#define SIM_CU_CHECK(expr)                                             \
  do {                                                                 \
    const CUresult sim_cu_check_status_ = (expr);                      \
    if (sim_cu_check_status_ != CUDA_SUCCESS) {                        \
      throw_cu_error(sim_cu_check_status_, #expr, __FILE__, __LINE__); \
    }                                                                  \
  } while (0)

struct OpenDevice {
  explicit OpenDevice(int device) { open_device(device); }
};

class CudaDevice final : public IReplayDevice {
 public:
  CudaDevice(int device, const std::vector<StreamId>& streams) : m_open(device), m_streams(streams) {
    std::memset(&m_prop, 0, sizeof(m_prop));
    m_prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    m_prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    m_prop.location.id = device;
    warm_up_kernels();
    m_baseline_bytes = device_used_bytes();
  }

  ~CudaDevice() override {
    // Best effort, no throwing: the process is about to end, or a replay failed half-way.
    cudaDeviceSynchronize();
    for (const auto& [addr, handle] : m_pages) {
      m_vmm.unmap(static_cast<CUdeviceptr>(addr), m_page_bytes);
      m_vmm.release(handle);
    }
    for (const auto& [addr, size] : m_reservations) {
      m_vmm.address_free(static_cast<CUdeviceptr>(addr), size);
    }
    for (const auto& [addr, size] : m_allocations) {
      cudaFree(reinterpret_cast<void*>(addr));
    }
  }

  std::string_view name() const override { return "cuda"; }
  bool is_fake() const override { return false; }

  std::optional<Bytes> malloc(Bytes size_bytes, PoolKind, StreamId) override {
    void* ptr = nullptr;
    const cudaError_t status = cudaMalloc(&ptr, size_bytes);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear it: the caller decides what an out-of-memory means
      return std::nullopt;
    }
    if (status != cudaSuccess) {
      gpu::throw_cuda_error(status, "cudaMalloc(&ptr, size_bytes)", __FILE__, __LINE__);
    }
    const auto addr = reinterpret_cast<Bytes>(ptr);
    m_allocations.emplace(addr, size_bytes);
    return addr;
  }

  void free(Bytes addr, Bytes) override {
    SIM_CUDA_CHECK(cudaFree(reinterpret_cast<void*>(addr)));
    m_allocations.erase(addr);
  }

  Bytes reserve(Bytes size_bytes, PoolKind, StreamId) override {
    require_vmm();
    const Bytes rounded = round_up(size_bytes);
    CUdeviceptr ptr = 0;
    SIM_CU_CHECK(m_vmm.address_reserve(&ptr, rounded, 0, 0, 0));
    m_reservations.emplace(static_cast<Bytes>(ptr), rounded);
    return static_cast<Bytes>(ptr);
  }

  void release_reservation(Bytes addr, Bytes) override {
    require_vmm();
    const auto it = m_reservations.find(addr);
    if (it == m_reservations.end()) {
      throw std::logic_error("cuMemAddressFree of an address that was not reserved");
    }
    SIM_CU_CHECK(m_vmm.address_free(static_cast<CUdeviceptr>(addr), it->second));
    m_reservations.erase(it);
  }

  bool map(Bytes addr, Bytes size_bytes) override {
    require_vmm();
    require_pages(addr, size_bytes, "map");
    for (Bytes offset = 0; offset < size_bytes; offset += m_page_bytes) {
      CUmemGenericAllocationHandle handle = 0;
      const CUresult r = m_vmm.create(&handle, m_page_bytes, &m_prop, 0);
      if (r == CUDA_ERROR_OUT_OF_MEMORY) {
        unmap_pages(addr, offset);  // all or nothing, as the policy expects (spec E4)
        return false;
      }
      SIM_CU_CHECK(r);
      const auto page = static_cast<CUdeviceptr>(addr + offset);
      const CUresult mapped = m_vmm.map(page, m_page_bytes, 0, handle, 0);
      if (mapped != CUDA_SUCCESS) {
        m_vmm.release(handle);
        SIM_CU_CHECK(mapped);
      }
      m_pages.emplace(addr + offset, handle);
      CUmemAccessDesc access;
      std::memset(&access, 0, sizeof(access));
      access.location = m_prop.location;
      access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      SIM_CU_CHECK(m_vmm.set_access(page, m_page_bytes, &access, 1));
    }
    return true;
  }

  void unmap(Bytes addr, Bytes size_bytes) override {
    require_vmm();
    require_pages(addr, size_bytes, "unmap");
    SIM_CUDA_CHECK(cudaDeviceSynchronize());
    unmap_pages(addr, size_bytes);
  }

  Bytes total_bytes() const override {
    std::size_t free_bytes = 0;
    std::size_t total = 0;
    SIM_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    return total;
  }
  Bytes free_bytes() const override {
    std::size_t free_bytes = 0;
    std::size_t total = 0;
    SIM_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    return free_bytes;
  }

  void touch(Bytes addr, Bytes size_bytes, StreamId stream, std::uint32_t seed) override {
    require_backed(addr, size_bytes);
    gpu::fill_pattern(reinterpret_cast<void*>(addr), size_bytes, seed, m_streams.get(stream));
  }
  std::uint64_t verify(Bytes addr, Bytes size_bytes, StreamId stream, std::uint32_t seed) override {
    return gpu::verify_pattern(reinterpret_cast<const void*>(addr), size_bytes, seed, m_streams.get(stream))
        .mismatches;
  }
  std::int64_t mem_in_use_bytes() override { return device_used_bytes() - m_baseline_bytes; }
  void sync() override { SIM_CUDA_CHECK(cudaDeviceSynchronize()); }
  void start_clock() override { m_clock.start(); }
  double stop_clock_ms() override { return m_clock.stop_ms(); }

 private:
  void require_vmm() {
    if (!m_vmm.error.empty()) {
      throw std::runtime_error("virtual memory management is unavailable: " + m_vmm.error);
    }
    if (m_page_bytes == 0) {
      std::size_t g = 0;
      SIM_CU_CHECK(m_vmm.granularity(&g, &m_prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
      m_page_bytes = g;
    }
  }

  void require_pages(Bytes addr, Bytes size_bytes, const char* what) const {
    if (size_bytes == 0 || addr % m_page_bytes != 0 || size_bytes % m_page_bytes != 0) {
      throw std::runtime_error(std::string(what) + " of " + std::to_string(size_bytes) + " bytes at " +
                               std::to_string(addr) + ": not a whole number of " +
                               std::to_string(m_page_bytes) + "-byte pages (the device's VMM granularity)");
    }
  }

  void unmap_pages(Bytes addr, Bytes size_bytes) {
    for (Bytes offset = 0; offset < size_bytes; offset += m_page_bytes) {
      const auto it = m_pages.find(addr + offset);
      if (it == m_pages.end()) {
        throw std::logic_error("cuMemUnmap of a page that is not mapped");
      }
      SIM_CU_CHECK(m_vmm.unmap(static_cast<CUdeviceptr>(addr + offset), m_page_bytes));
      SIM_CU_CHECK(m_vmm.release(it->second));
      m_pages.erase(it);
    }
  }

  // A kernel writing memory that is not backed would fault and leave the context unusable; say which range
  // instead (a policy can hand out a block in reserved but unmapped address space, e.g. a stitched range).
  void require_backed(Bytes addr, Bytes size_bytes) const {
    auto it = m_allocations.upper_bound(addr);
    if (it != m_allocations.begin() && addr + size_bytes <= std::prev(it)->first + std::prev(it)->second) {
      return;
    }
    bool mapped = m_page_bytes != 0;
    for (Bytes page = mapped ? addr / m_page_bytes * m_page_bytes : 0; mapped && page < addr + size_bytes;
         page += m_page_bytes) {
      mapped = m_pages.count(page) != 0;
    }
    if (!mapped) {
      throw std::runtime_error("the policy handed out [" + std::to_string(addr) + ", +" +
                               std::to_string(size_bytes) +
                               "), which lies in no cudaMalloc'd allocation and no mapped pages");
    }
  }

  Bytes round_up(Bytes size_bytes) const {
    return (size_bytes + m_page_bytes - 1) / m_page_bytes * m_page_bytes;
  }

  OpenDevice m_open;  // first: the members below need the device current
  StreamTable m_streams;
  EventClock m_clock;
  VmmApi m_vmm;
  CUmemAllocationProp m_prop;
  Bytes m_page_bytes = 0;  // VMM granularity, known once the first VMM call asks
  std::int64_t m_baseline_bytes = 0;
  std::map<Bytes, Bytes> m_allocations;                             // cudaMalloc'd: address -> size
  std::unordered_map<Bytes, Bytes> m_reservations;                  // address -> rounded size
  std::unordered_map<Bytes, CUmemGenericAllocationHandle> m_pages;  // mapped page address -> its handle
};

}  // namespace

CudaHooks cuda_hooks() {
  return CudaHooks{[](int device, const std::vector<StreamId>& streams) -> std::unique_ptr<IReplayDevice> {
                     return std::make_unique<CudaDevice>(device, streams);
                   },
                   &make_cuda_async_pool};
}

}  // namespace vramsim::hw
