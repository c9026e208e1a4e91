// What the non-native policies (no_cache, async_pool, vmm_stitch, buddy, offline_optimal) share, and
// their factories for registry.cpp. Mechanism stays in BlockPool; this is event plumbing, the
// record_stream bookkeeping and the deferred-free path, written once.
#pragma once

#include <algorithm>
#include <memory>
#include <vector>

#include "sim/alloc/alloc_observer.h"
#include "sim/alloc/block_pool.h"
#include "sim/alloc/device_memory.h"
#include "sim/alloc/i_allocator_policy.h"
#include "sim/core/assert.h"

namespace vramsim {

std::unique_ptr<IAllocatorPolicy> make_no_cache_policy(IDeviceMemory& device, IAllocObserver& events);
std::unique_ptr<IAllocatorPolicy> make_async_pool_policy(IDeviceMemory& device, IAllocObserver& events);
std::unique_ptr<IAllocatorPolicy> make_vmm_stitch_policy(IDeviceMemory& device, IAllocObserver& events);
std::unique_ptr<IAllocatorPolicy> make_buddy_policy(IDeviceMemory& device, IAllocObserver& events);
std::unique_ptr<IAllocatorPolicy> make_offline_optimal_policy(IDeviceMemory& device, IAllocObserver& events);

inline Bytes round_up_bytes(Bytes value, Bytes multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// The event a block reports (these policies have no oversize notion: max_split_size is PyTorch's).
inline BlockEventInfo block_event(const Block& b, TimeNs time_ns) {
  return BlockEventInfo{b.addr, b.size_bytes, b.requested_bytes, b.pool, b.stream, false, time_ns};
}

inline SegmentEventInfo segment_event(Bytes addr, Bytes size_bytes, PoolKind pool, StreamId stream,
                                      TimeNs time_ns) {
  return SegmentEventInfo{addr, size_bytes, pool, stream, false, time_ns};
}

// Note [Deferred frees]: record_stream(block, s) means kernels on s may still read the block when the caller
// frees it. The simplest correct rule, used by every policy here: such a free is reported at once
// (free_requested) but the memory is not reusable until complete_stream_events(block) (free_completed), or
// until a device-wide synchronisation (empty_cache). Meanwhile the block has event_count 1, so BlockPool's
// invariants treat it as neither live nor free.
class StreamUses {
 public:
  void record(BlockPool& pool, BlockId block, StreamId stream) {
    Block& b = pool.block(block);
    SIM_ASSERT(b.allocated);
    if (stream != b.stream) {
      b.has_stream_uses = true;
    }
  }
  // At free(): true when the free must wait; the block is then pending.
  bool defer(BlockPool& pool, BlockId block) {
    Block& b = pool.block(block);
    if (!b.has_stream_uses) {
      return false;
    }
    b.has_stream_uses = false;
    b.event_count = 1;
    m_pending.push_back(block);
    return true;
  }
  // complete_stream_events(): true when `block` was pending (it is then ready to be freed). A block whose
  // wait already ended at a synchronisation is not pending any more: false.
  bool complete(BlockPool& pool, BlockId block) {
    auto it = std::find(m_pending.begin(), m_pending.end(), block);
    if (it == m_pending.end()) {
      return false;
    }
    m_pending.erase(it);
    pool.block(block).event_count = 0;
    return true;
  }
  // A device synchronisation: every pending block, in free order, ready to be freed.
  std::vector<BlockId> take_all(BlockPool& pool) {
    std::vector<BlockId> out;
    out.swap(m_pending);
    for (BlockId id : out) {
      pool.block(id).event_count = 0;
    }
    return out;
  }

 private:
  std::vector<BlockId> m_pending;  // FIFO; record_stream is rare, so a vector is enough
};

// What async_pool, vmm_stitch, buddy and offline_optimal share besides BlockPool: the device, the observers,
// the books and the free path of Note [Deferred frees]. free() reports free_requested at once; when no other
// stream still uses the block (now, at complete_stream_events, or at a synchronisation) the policy's own
// release_block() takes the memory back. A policy implements name(), allocate(), empty_cache() and
// release_block().
class DeferredFreePolicy : public IAllocatorPolicy {
 public:
  void free(BlockId block, TimeNs time_ns) final;
  void record_stream(BlockId block, StreamId stream) final;
  void complete_stream_events(BlockId block) final;
  const BlockPool& blocks() const final { return m_pool; }

 protected:
  DeferredFreePolicy(IDeviceMemory& device, IAllocObserver& events) : m_device(device), m_events(events) {}
  // `block` (freed by the caller) is reusable now. `after_sync`: its release waited for other streams' work,
  // which has completed (any stream may reuse it); otherwise it is released at the caller's free().
  virtual void release_block(BlockId block, TimeNs time_ns, bool after_sync) = 0;
  // A device-wide synchronisation: every free still waiting for other streams is released.
  void release_deferred_frees();
  // The first `size_bytes` of `block` (out of the free sets, size_bytes <= its size); the remainder, if any,
  // goes back into the free sets.
  BlockId trim_front(BlockId block, Bytes size_bytes);
  // `block` handed out for `request`: allocated, on the request's stream, the alloc reported.
  AllocResult hand_out(BlockId block, const AllocRequest& request);

  IDeviceMemory& m_device;
  IAllocObserver& m_events;
  BlockPool m_pool;

 private:
  StreamUses m_uses;
};

}  // namespace vramsim
