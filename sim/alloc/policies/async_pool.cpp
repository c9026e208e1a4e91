// async-pool: CUDA's stream-ordered allocator (cudaMallocAsync / cudaFreeAsync on the device's default
// cudaMemPool), as PyTorch's PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync drives it
// (c10/cuda/CUDAMallocAsyncAllocator.cpp).
//
// What PyTorch sets and does (from that file):
//   * cudaMemPoolAttrReleaseThreshold = UINT64_MAX: the pool keeps every byte it ever mapped; nothing goes
//     back at stream / event synchronisation ("Amount of reserved memory in bytes to hold onto before
//     trying to release memory back to the OS", CUDA runtime API, cudaMemPoolSetAttribute).
//   * ReuseFollowEventDependencies, ReuseAllowOpportunistic, ReuseAllowInternalDependencies all on.
//   * free: cudaFreeAsync on the allocation's creation stream; after record_stream, on a dummy "unifying"
//     stream made to wait for every usage stream.
//   * emptyCache: cudaDeviceSynchronize, then cudaMemPoolTrimTo(pool, 0).
//
// The model, allocate(n, s) with n rounded up to 512 bytes:
//   (1) best fit among the free blocks s may reuse: those freed on s (stream order makes them safe at
//       once) and those whose free is known complete (after a synchronisation);
//   (2) else the pool grows by one chunk of n rounded up to 2 MiB (the VMM granule) -> segment_alloc;
//   (3) if the device refuses: ReuseAllowInternalDependencies ("Allow cudaMallocAsync to insert new stream
//       dependencies in order to establish the stream ordering required to reuse a piece of memory
//       released by cudaFreeAsync"): s waits for the other streams' frees, best fit over every free block.
//       Growing first and inserting dependencies only when that fails is our reading of the CUDA
//       Programming Guide's description of this policy, not verified here;
//   (4) else OOM.
// free(b): the block returns to the pool, reusable by its own stream. After record_stream it waits for
// complete_stream_events (Note [Deferred frees]); then its free is known complete: any stream may reuse it.
// empty_cache(): synchronise (every free becomes reusable by every stream), then trim: every wholly free
// chunk goes back to the device.
//
// Simplifications, stated: the driver's suballocation layout is not documented; we suballocate with best
// fit, split at 512 bytes and coalesce free neighbours. GPU progress is not modelled, so another stream's
// free is reused only after a synchronisation or through (3). BlockPool keeps free neighbours coalesced,
// so a free range takes the most restrictive key of its parts: a completed free merged with stream s's free
// is reusable by s only, frees of two different streams by no stream before the next synchronisation
// (conservative). Trimming returns whole chunks only, not their free 2 MiB pages.
//
// Complexity (n = free blocks): allocate O(log n), free O(log n), empty_cache O(n log n).
#include <memory>

#include "sim/alloc/policies/policy_support.h"
#include "sim/alloc/size_classes.h"

namespace vramsim {

namespace {

constexpr Bytes kAlignBytes = 512;
constexpr Bytes kChunkGranuleBytes = 2 * kMiB;
constexpr PoolKind kPool = PoolKind::kLarge;  // one cudaMemPool: no small/large split
// Free-set keys of free blocks that are not tied to one stream (user stream ids are below both).
constexpr StreamId kSynced = ~StreamId{0};     // free known complete: any stream may reuse it
constexpr StreamId kMixed = ~StreamId{0} - 1;  // coalesced from frees on two streams: reusable after sync

StreamId combine(StreamId a, StreamId b) {
  if (a == b || b == kSynced) {
    return a;
  }
  return a == kSynced ? b : kMixed;
}

class AsyncPoolPolicy final : public DeferredFreePolicy {
 public:
  AsyncPoolPolicy(IDeviceMemory& device, IAllocObserver& events) : DeferredFreePolicy(device, events) {}

  std::string_view name() const override { return "async-pool"; }

  AllocResult allocate(const AllocRequest& request) override {
    SIM_ASSERT(request.size_bytes > 0 && request.stream < kMixed);
    if (request.size_bytes >= kAllocationCeiling) {
      return oom(request, request.size_bytes, request.size_bytes);
    }
    const Bytes size = round_up_bytes(request.size_bytes, kAlignBytes);
    BlockId block = find_reusable(request.stream, size, false);
    if (block == kNoBlock) {
      block = grow(size, request);
    }
    if (block == kNoBlock) {
      block = find_reusable(request.stream, size, true);  // internal dependencies on other streams' frees
    }
    if (block == kNoBlock) {
      return oom(request, size, round_up_bytes(size, kChunkGranuleBytes));
    }
    return take(block, size, request);
  }

  void empty_cache() override {
    m_events.on_sync_all_streams();  // cudaDeviceSynchronize
    release_deferred_frees();
    std::vector<BlockId> free_ids;
    for (const Block& b : m_pool.free_set(kPool)) {
      free_ids.push_back(b.id);
    }
    for (BlockId id : free_ids) {
      Block& b = m_pool.block(id);
      m_pool.erase_free(id);
      if (!b.is_split()) {
        release_chunk(id);  // cudaMemPoolTrimTo(pool, 0)
      } else {
        b.stream = kSynced;
        m_pool.insert_free(id);
      }
    }
  }

  // A free on the block's own stream is reusable by that stream at once; after a synchronisation by any.
  void release_block(BlockId block, TimeNs time_ns, bool after_sync) override {
    return_to_pool(block, after_sync ? kSynced : m_pool.block(block).stream, time_ns);
  }

 private:
  // Best fit among the free blocks `stream` may reuse: its own frees and completed ones, or (with
  // `any_stream`) every free block, in (size, address) order.
  BlockId find_reusable(StreamId stream, Bytes size, bool any_stream) {
    const Block* best = nullptr;
    auto consider = [&](StreamId key) {
      auto it = m_pool.lower_bound_free(kPool, key, size);
      if (it != m_pool.free_set(kPool).end() && it->stream == key &&
          (best == nullptr ||
           BlockPool::FreeOrder::less(0, it->size_bytes, it->addr, 0, best->size_bytes, best->addr))) {
        best = &*it;
      }
    };
    consider(stream);
    consider(kSynced);
    if (any_stream && best == nullptr) {
      for (const Block& b : m_pool.free_set(kPool)) {
        if (b.size_bytes >= size &&
            (best == nullptr ||
             BlockPool::FreeOrder::less(0, b.size_bytes, b.addr, 0, best->size_bytes, best->addr))) {
          best = &b;
        }
      }
    }
    if (best == nullptr) {
      return kNoBlock;
    }
    const BlockId id = best->id;
    m_pool.erase_free(id);
    return id;
  }

  // The pool maps a new chunk; its single block is in no set.
  BlockId grow(Bytes size, const AllocRequest& request) {
    const Bytes chunk = round_up_bytes(size, kChunkGranuleBytes);
    const std::optional<Bytes> base = m_device.malloc(chunk, kPool, request.stream);
    if (!base) {
      return kNoBlock;
    }
    const SegmentId sid = m_pool.add_segment(*base, chunk, kPool, request.stream, false, 0);
    m_events.on_segment_alloc(segment_event(*base, chunk, kPool, request.stream, request.time_ns));
    return m_pool.segment(sid).first;
  }

  AllocResult take(BlockId block, Bytes size, const AllocRequest& request) {
    return hand_out(trim_front(block, size), request);  // the rest keeps its reuse key
  }

  // The block's memory is reusable by `key`'s holders; free neighbours are coalesced (their keys combined).
  void return_to_pool(BlockId block, StreamId key, TimeNs time_ns) {
    const BlockEventInfo freed = block_event(m_pool.block(block), time_ns);
    for (BlockId n : {m_pool.block(block).prev, m_pool.block(block).next}) {
      if (n != kNoBlock && m_pool.in_free_set(n)) {
        key = combine(key, m_pool.block(n).stream);
        m_pool.erase_free(n);
        m_pool.merge(block, n);
      }
    }
    m_pool.block(block).stream = key;
    m_pool.insert_free(block);
    m_events.on_free_completed(freed);
  }

  void release_chunk(BlockId block) {
    const Block& b = m_pool.block(block);
    const Segment& seg = m_pool.segment(b.segment);
    const Bytes addr = seg.base;
    const Bytes bytes = seg.size_bytes;
    m_events.on_segment_free(segment_event(addr, bytes, kPool, seg.stream, 0));
    m_pool.remove_segment(b.segment);
    m_device.free(addr, bytes);
  }

  AllocResult oom(const AllocRequest& request, Bytes rounded, Bytes allocation) {
    m_events.on_oom(OomInfo{rounded, allocation, m_device.free_bytes(), 0, request.stream, request.time_ns});
    return {};
  }
};

}  // namespace

std::unique_ptr<IAllocatorPolicy> make_async_pool_policy(IDeviceMemory& device, IAllocObserver& events) {
  return std::make_unique<AsyncPoolPolicy>(device, events);
}

}  // namespace vramsim
