// no-cache: every tensor is its own cudaMalloc, every free its own cudaFree (PyTorch with
// PYTORCH_NO_CUDA_MEMORY_CACHING=1). The baseline the caching policies are measured against.
//
// Note [cudaMalloc granularity]: what the driver charges for one cudaMalloc(n):
//   n >  1 MiB: n rounded up to 2 MiB. Since Pascal the GPU page is 2 MiB and "allocations larger than 1MB
//               are now always page-aligned" (PyTorch PR #17120, colesbury, 2019: the reason PyTorch's own
//               kRoundLarge is 2 MiB). So 1 MiB + 1 byte costs 2 MiB, 2 MiB + 1 byte costs 4 MiB.
//   n <= 1 MiB: n rounded up to 512 bytes. The driver packs small allocations into shared 2 MiB pages (the
//               same PR: "the remaining memory in a page could only be filled by small cudaMalloc calls"), so
//               a small allocation does not cost a page of its own; 512 bytes is the alignment cudaMalloc
//               returns in practice (CuPy PR #176 measured 512 on Maxwell/Kepler; the CUDA guide promises
//               >= 256). This is a lower bound: the partly used pages themselves are not modelled.
//
// record_stream needs no bookkeeping here: cudaFree synchronises the whole device ("Managing memory
// allocations using cudaMalloc and cudaFree causes the GPU to synchronize across all executing CUDA streams",
// CUDA Programming Guide, Stream-Ordered Memory Allocator), so by the time the memory is returned every
// stream that used it has finished. empty_cache has nothing to release.
//
// Complexity: allocate O(1), free O(1) (one segment per block).
#include <memory>

#include "sim/alloc/policies/policy_support.h"
#include "sim/alloc/size_classes.h"

namespace vramsim {

namespace {

constexpr Bytes kPageBytes = 2 * kMiB;
constexpr Bytes kSmallLimitBytes = 1 * kMiB;
constexpr Bytes kSmallAlignBytes = 512;

// The bytes the driver charges for cudaMalloc(size_bytes) (Note [cudaMalloc granularity]).
Bytes cuda_malloc_bytes(Bytes size_bytes) {
  return size_bytes > kSmallLimitBytes ? round_up_bytes(size_bytes, kPageBytes)
                                       : round_up_bytes(size_bytes, kSmallAlignBytes);
}

class NoCachePolicy final : public IAllocatorPolicy {
 public:
  NoCachePolicy(IDeviceMemory& device, IAllocObserver& events) : m_device(device), m_events(events) {}

  std::string_view name() const override { return "no-cache"; }

  AllocResult allocate(const AllocRequest& request) override {
    SIM_ASSERT(request.size_bytes > 0);
    const Bytes bytes =
        request.size_bytes >= kAllocationCeiling ? request.size_bytes : cuda_malloc_bytes(request.size_bytes);
    const PoolKind pool = bytes <= kSmallLimitBytes ? PoolKind::kSmall : PoolKind::kLarge;
    const std::optional<Bytes> base =
        bytes >= kAllocationCeiling ? std::nullopt : m_device.malloc(bytes, pool, request.stream);
    if (!base) {
      m_events.on_oom(OomInfo{bytes, bytes, m_device.free_bytes(), 0, request.stream, request.time_ns});
      return {};
    }
    const SegmentId sid = m_pool.add_segment(*base, bytes, pool, request.stream, false, 0);
    Block& b = m_pool.block(m_pool.segment(sid).first);
    b.allocated = true;
    b.requested_bytes = request.size_bytes;
    m_events.on_segment_alloc(segment_event(*base, bytes, pool, request.stream, request.time_ns));
    m_events.on_alloc(block_event(b, request.time_ns));
    return AllocResult{b.id, b.addr, b.size_bytes};
  }

  void free(BlockId block, TimeNs time_ns) override {
    Block& b = m_pool.block(block);
    SIM_ASSERT(b.allocated);
    b.allocated = false;
    b.has_stream_uses = false;  // cudaFree synchronises: no stream can still be using it
    const BlockEventInfo info = block_event(b, time_ns);
    m_events.on_free_requested(info);
    m_events.on_free_completed(info);
    m_events.on_segment_free(segment_event(b.addr, b.size_bytes, b.pool, b.stream, time_ns));
    m_device.free(b.addr, b.size_bytes);
    m_pool.remove_segment(b.segment);
  }

  void record_stream(BlockId, StreamId) override {}
  void complete_stream_events(BlockId) override {}
  void empty_cache() override {}
  const BlockPool& blocks() const override { return m_pool; }

 private:
  IDeviceMemory& m_device;
  IAllocObserver& m_events;
  BlockPool m_pool;
};

}  // namespace

std::unique_ptr<IAllocatorPolicy> make_no_cache_policy(IDeviceMemory& device, IAllocObserver& events) {
  return std::make_unique<NoCachePolicy>(device, events);
}

}  // namespace vramsim
