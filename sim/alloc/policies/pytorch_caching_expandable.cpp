// Expandable segments of the native policy (spec §5, PyTorch's Note [Expandable Segments]): one virtual
// reservation per (pool, stream), grown by mapping pages at the lowest address that makes room and shrunk
// only by release_cached_blocks. Same class as pytorch_caching.cpp; a file of its own because it is a
// concept of its own.
#include "sim/alloc/policies/pytorch_caching.h"
#include "sim/alloc/size_classes.h"
#include "sim/core/assert.h"

namespace vramsim {

// ---- expandable segments
// ------------------------------------------------------------------------------------

BlockId PyTorchCachingPolicy::find_expandable_block(const AllocParams& p) {
  auto allocatable = [this](BlockId id) {
    if (id == kNoBlock) {
      return false;
    }
    const Block& b = m_pool.block(id);
    return !b.allocated && b.event_count == 0 && !b.has_stream_uses;
  };
  auto has_available_address_space = [&](BlockId id) {
    Bytes bytes = 0;
    while (bytes < p.size_bytes && allocatable(id)) {
      bytes += m_pool.block(id).size_bytes;
      id = m_pool.block(id).next;
    }
    return bytes >= p.size_bytes;
  };
  auto& unmapped = m_pool.unmapped_set(p.pool);
  for (auto it = m_pool.lower_bound_unmapped(p.pool, p.stream, p.private_pool);
       it != unmapped.end() && it->stream == p.stream && it->private_pool == p.private_pool; ++it) {
    BlockId candidate = it->id;
    if (allocatable(m_pool.block(candidate).prev)) {
      candidate = m_pool.block(candidate).prev;  // a free mapped block right before the hole counts too
    }
    if (has_available_address_space(candidate)) {
      return candidate;
    }
  }
  // A new reservation of ~1.125x device memory, in whole pages (spec E1).
  const Bytes page = p.pool == PoolKind::kSmall ? kSmallBuffer : kLargeBuffer;
  const Bytes total = m_device.total_bytes();
  const Bytes want = total + total / 8;
  const Bytes reservation = (want + page - 1) / page * page;
  const Bytes base = m_device.reserve(reservation, p.pool, p.stream);
  const SegmentId sid = add_pool_segment(base, reservation, p.pool, p.stream, true, page, p.private_pool);
  const BlockId block = m_pool.segment(sid).first;
  insert_into_blocks(block);  // unmapped set
  return block;
}

bool PyTorchCachingPolicy::map_block(BlockId to_map, Bytes size_bytes, TimeNs time_ns) {
  Block& b = m_pool.block(to_map);
  SIM_ASSERT(!b.mapped && size_bytes <= b.size_bytes);
  const Segment& seg = m_pool.segment(b.segment);
  const Bytes page = seg.page_bytes;
  const Bytes map_bytes = (size_bytes + page - 1) / page * page;  // b.addr is page aligned (E3)
  SIM_ASSERT((b.addr - seg.base) % page == 0 && map_bytes <= b.size_bytes);
  const Bytes map_addr = b.addr;
  if (!m_device.map(map_addr, map_bytes)) {
    return false;
  }
  m_pool.erase_free(to_map);
  if (map_bytes < m_pool.block(to_map).size_bytes) {
    const BlockId rest = m_pool.split_back(to_map, m_pool.block(to_map).size_bytes - map_bytes);
    m_pool.insert_free(rest);  // still unmapped
  }
  m_pool.block(to_map).mapped = true;
  try_merge_blocks(to_map, m_pool.block(to_map).prev);
  try_merge_blocks(to_map, m_pool.block(to_map).next);
  insert_into_blocks(to_map);
  const Block& mapped = m_pool.block(to_map);
  m_total_allocated_bytes += map_bytes;
  m_events.on_segment_map(SegmentEventInfo{map_addr, map_bytes, mapped.pool, mapped.stream, false, time_ns});
  return true;
}

BlockId PyTorchCachingPolicy::try_allocate_expandable_block(const AllocParams& p) {
  BlockId candidate = find_expandable_block(p);
  // candidate is: unmapped -> ..., or free -> unmapped -> ...
  if (!m_pool.block(candidate).mapped &&
      !map_block(candidate, std::min(m_pool.block(candidate).size_bytes, p.size_bytes), p.time_ns)) {
    return kNoBlock;
  }
  while (m_pool.block(candidate).size_bytes < p.size_bytes) {
    const Bytes remaining = p.size_bytes - m_pool.block(candidate).size_bytes;
    const BlockId next = m_pool.block(candidate).next;
    SIM_ASSERT(next != kNoBlock);
    if (!map_block(next, std::min(remaining, m_pool.block(next).size_bytes), p.time_ns)) {
      return kNoBlock;
    }
    candidate = next;  // map_block merged the free block before it into `next`
  }
  m_pool.erase_free(candidate);
  return candidate;
}

void PyTorchCachingPolicy::unmap_block(BlockId block) {
  const Block& b0 = m_pool.block(block);
  const Segment& seg = m_pool.segment(b0.segment);
  const Bytes page = seg.page_bytes;
  const Bytes offset = b0.addr - seg.base;
  const Bytes begin_page = (offset + page - 1) / page;
  const Bytes end_page = (offset + b0.size_bytes) / page;
  if (begin_page >= end_page) {
    return;  // no whole page inside this free block (E8)
  }
  const Bytes unmap_addr = seg.base + begin_page * page;
  const Bytes unmap_bytes = (end_page - begin_page) * page;
  m_pool.erase_free(block);
  const Bytes before_bytes = unmap_addr - b0.addr;
  const Bytes after_bytes = b0.size_bytes - before_bytes - unmap_bytes;
  if (after_bytes > 0) {
    insert_into_blocks(m_pool.split_back(block, after_bytes));  // free mapped piece after the hole
  }
  if (before_bytes > 0) {
    const BlockId before = m_pool.split_front(block, before_bytes);
    insert_into_blocks(before);  // free mapped piece before the hole
  }
  Block& b = m_pool.block(block);
  b.mapped = false;
  const PoolKind pool = b.pool;
  const StreamId stream = b.stream;
  const SegmentId sid = b.segment;
  try_merge_blocks(block, m_pool.block(block).prev);
  try_merge_blocks(block, m_pool.block(block).next);
  m_device.unmap(unmap_addr, unmap_bytes);
  m_total_allocated_bytes -= unmap_bytes;
  m_events.on_segment_unmap(SegmentEventInfo{unmap_addr, unmap_bytes, pool, stream, false, 0});
  if (!m_pool.block(block).is_split()) {
    // The whole reservation is unmapped again: release the address space (no trace entry).
    const Segment& s = m_pool.segment(sid);
    m_device.release_reservation(s.base, s.size_bytes);
    remove_pool_segment(sid);
  } else {
    m_pool.insert_free(block);
  }
}

std::vector<BlockId> PyTorchCachingPolicy::adopt_expandable_segment(Bytes base, Bytes size_bytes,
                                                                    PoolKind pool, StreamId stream,
                                                                    const std::vector<AdoptedRun>& runs,
                                                                    MempoolId owner) {
  const Bytes page = pool == PoolKind::kSmall ? kSmallBuffer : kLargeBuffer;
  const SegmentId sid = add_pool_segment(base, size_bytes, pool, stream, true, page, adopted_pool(owner));
  BlockId rest = m_pool.segment(sid).first;  // unmapped, in no set; shrinks from the front
  std::vector<BlockId> ids;
  // Carves the next `bytes` off the front of `rest`; the last piece is `rest` itself.
  auto carve = [&](Bytes bytes) {
    SIM_ASSERT(rest != kNoBlock && bytes <= m_pool.block(rest).size_bytes);
    if (bytes == m_pool.block(rest).size_bytes) {
      const BlockId last = rest;
      rest = kNoBlock;
      return last;
    }
    return m_pool.split_front(rest, bytes);
  };
  Bytes cursor = base;
  for (const AdoptedRun& run : runs) {
    SIM_ASSERT(run.addr >= cursor && (run.addr - base) % page == 0);
    if (run.addr > cursor) {
      insert_into_blocks(carve(run.addr - cursor));  // an unmapped hole
    }
    for (const AdoptedBlock& ab : run.blocks) {
      const BlockId id = carve(ab.size_bytes);
      Block& b = m_pool.block(id);
      b.mapped = true;
      b.requested_bytes = ab.requested_bytes;
      b.allocated = ab.allocated;
      m_total_allocated_bytes += ab.size_bytes;
      if (!b.allocated) {
        insert_into_blocks(id);
      }
      ids.push_back(id);
      cursor += ab.size_bytes;
    }
  }
  if (rest != kNoBlock) {
    insert_into_blocks(rest);  // the unmapped remainder of the reservation
  }
  return ids;
}

}  // namespace vramsim
