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

}  // namespace vramsim
