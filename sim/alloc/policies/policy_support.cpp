#include "sim/alloc/policies/policy_support.h"

namespace vramsim {

void DeferredFreePolicy::free(BlockId block, TimeNs time_ns) {
  Block& b = m_pool.block(block);
  SIM_ASSERT(b.allocated);
  b.allocated = false;
  m_events.on_free_requested(block_event(b, time_ns));
  if (!m_uses.defer(m_pool, block)) {
    release_block(block, time_ns, /*after_sync=*/false);
  }
}

void DeferredFreePolicy::record_stream(BlockId block, StreamId stream) {
  m_uses.record(m_pool, block, stream);
}

void DeferredFreePolicy::complete_stream_events(BlockId block) {
  if (m_uses.complete(m_pool, block)) {
    release_block(block, 0, /*after_sync=*/true);
  }
}

void DeferredFreePolicy::release_deferred_frees() {
  for (BlockId id : m_uses.take_all(m_pool)) {
    release_block(id, 0, /*after_sync=*/true);
  }
}

BlockId DeferredFreePolicy::trim_front(BlockId block, Bytes size_bytes) {
  if (m_pool.block(block).size_bytes == size_bytes) {
    return block;
  }
  const BlockId front = m_pool.split_front(block, size_bytes);
  m_pool.insert_free(block);
  return front;
}

AllocResult DeferredFreePolicy::hand_out(BlockId block, const AllocRequest& request) {
  Block& b = m_pool.block(block);
  b.allocated = true;
  b.stream = request.stream;
  b.requested_bytes = request.size_bytes;
  m_events.on_alloc(block_event(b, request.time_ns));
  return AllocResult{block, b.addr, b.size_bytes};
}

}  // namespace vramsim
