#include "sim/alloc/block_pool.h"

#include <algorithm>

#include <fmt/format.h>

#include "sim/core/assert.h"

namespace vramsim {

BlockPool::BlockPool() = default;

BlockPool::~BlockPool() {
  // Unlink before the blocks go, so that safe-mode hooks do not assert on destruction.
  for (int p = 0; p < kNumPools; ++p) {
    m_free[p].clear();
    m_unmapped[p].clear();
  }
}

BlockId BlockPool::new_block() {
  if (!m_free_block_ids.empty()) {
    const BlockId id = m_free_block_ids.back();
    m_free_block_ids.pop_back();
    Block& b = block(id);
    SIM_ASSERT_INTERNAL(!b.free_hook.is_linked());
    b.addr = b.size_bytes = b.requested_bytes = 0;
    b.prev = b.next = kNoBlock;
    b.segment = kNoSegment;
    b.stream = 0;
    b.pool = PoolKind::kLarge;
    b.allocated = b.expandable = b.has_stream_uses = false;
    b.mapped = true;
    b.event_count = 0;
    b.private_pool = kDefaultPools;
    b.gc_count_base = 0;
    return id;
  }
  if (m_block_count == m_block_chunks.size() * kChunkSize) {
    m_block_chunks.push_back(std::make_unique<Block[]>(kChunkSize));
  }
  const auto id = static_cast<BlockId>(m_block_count++);
  SIM_ASSERT(id != kNoBlock);
  block(id).id = id;
  return id;
}

void BlockPool::delete_block(BlockId id) {
  SIM_ASSERT(!block(id).free_hook.is_linked());
  block(id).segment = kNoSegment;
  m_free_block_ids.push_back(id);
}

SegmentId BlockPool::add_segment(Bytes base, Bytes size_bytes, PoolKind pool, StreamId stream,
                                 bool expandable, Bytes page_bytes, PrivatePoolIndex private_pool) {
  SIM_ASSERT(size_bytes > 0);
  SegmentId sid;
  if (!m_free_segment_ids.empty()) {
    sid = m_free_segment_ids.back();
    m_free_segment_ids.pop_back();
  } else {
    m_segments.emplace_back();
    sid = static_cast<SegmentId>(m_segments.size() - 1);
  }
  const BlockId bid = new_block();
  Block& b = block(bid);
  b.addr = base;
  b.size_bytes = size_bytes;
  b.segment = sid;
  b.stream = stream;
  b.pool = pool;
  b.mapped = !expandable;
  b.expandable = expandable;
  b.private_pool = private_pool;
  m_segments[sid] = Segment{base, size_bytes, page_bytes, pool, stream, private_pool, expandable, true, bid};
  return sid;
}

void BlockPool::remove_segment(SegmentId id) {
  Segment& seg = m_segments[id];
  SIM_ASSERT(seg.live);
  const Block& b = block(seg.first);
  SIM_ASSERT(!b.is_split() && !b.allocated && !in_free_set(seg.first));
  delete_block(seg.first);
  seg = Segment{};
  m_free_segment_ids.push_back(id);
}

BlockId BlockPool::split_front(BlockId id, Bytes front_bytes) {
  const BlockId fid = new_block();
  Block& rest = block(id);
  SIM_ASSERT(front_bytes > 0 && front_bytes < rest.size_bytes);
  Block& front = block(fid);
  front.addr = rest.addr;
  front.size_bytes = front_bytes;
  front.segment = rest.segment;
  front.stream = rest.stream;
  front.pool = rest.pool;
  front.private_pool = rest.private_pool;
  front.mapped = rest.mapped;
  front.expandable = rest.expandable;
  front.prev = rest.prev;
  front.next = id;
  if (rest.prev != kNoBlock) {
    block(rest.prev).next = fid;
  } else {
    m_segments[rest.segment].first = fid;
  }
  rest.prev = fid;
  rest.addr += front_bytes;
  rest.size_bytes -= front_bytes;
  return fid;
}

BlockId BlockPool::split_back(BlockId id, Bytes back_bytes) {
  const BlockId bid = new_block();
  Block& front = block(id);
  SIM_ASSERT(back_bytes > 0 && back_bytes < front.size_bytes);
  Block& back = block(bid);
  back.addr = front.addr + front.size_bytes - back_bytes;
  back.size_bytes = back_bytes;
  back.segment = front.segment;
  back.stream = front.stream;
  back.pool = front.pool;
  back.private_pool = front.private_pool;
  back.mapped = front.mapped;
  back.expandable = front.expandable;
  back.prev = id;
  back.next = front.next;
  if (front.next != kNoBlock) {
    block(front.next).prev = bid;
  }
  front.next = bid;
  front.size_bytes -= back_bytes;
  return bid;
}

void BlockPool::merge(BlockId dst, BlockId src) {
  Block& d = block(dst);
  Block& s = block(src);
  if (d.prev == src) {
    d.addr = s.addr;
    d.prev = s.prev;
    if (s.prev != kNoBlock) {
      block(s.prev).next = dst;
    } else {
      m_segments[d.segment].first = dst;
    }
  } else {
    SIM_ASSERT(d.next == src);
    d.next = s.next;
    if (s.next != kNoBlock) {
      block(s.next).prev = dst;
    }
  }
  d.size_bytes += s.size_bytes;
  delete_block(src);
}

void BlockPool::insert_free(BlockId id) {
  Block& b = block(id);
  SIM_ASSERT(!b.free_hook.is_linked());
  const bool inserted = b.mapped ? free_set(b.pool).insert(b).second : unmapped_set(b.pool).insert(b).second;
  SIM_ASSERT(inserted);
}

void BlockPool::erase_free(BlockId id) {
  Block& b = block(id);
  SIM_ASSERT(b.free_hook.is_linked());
  if (b.mapped) {
    free_set(b.pool).erase(free_set(b.pool).iterator_to(b));
  } else {
    unmapped_set(b.pool).erase(unmapped_set(b.pool).iterator_to(b));
  }
}

bool BlockPool::in_free_set(BlockId id) const { return block(id).free_hook.is_linked(); }

std::vector<SegmentId> BlockPool::live_segments_by_address() const {
  std::vector<SegmentId> ids;
  for (SegmentId i = 0; i < m_segments.size(); ++i) {
    if (m_segments[i].live) {
      ids.push_back(i);
    }
  }
  std::sort(ids.begin(), ids.end(),
            [this](SegmentId a, SegmentId b) { return m_segments[a].base < m_segments[b].base; });
  return ids;
}

std::string BlockPool::check_invariants() const {
  std::size_t free_seen[kNumPools] = {0, 0};
  std::size_t unmapped_seen[kNumPools] = {0, 0};
  for (SegmentId sid = 0; sid < m_segments.size(); ++sid) {
    const Segment& seg = m_segments[sid];
    if (!seg.live) {
      continue;
    }
    Bytes expect_addr = seg.base;
    BlockId prev = kNoBlock;
    for (BlockId id = seg.first; id != kNoBlock; id = block(id).next) {
      const Block& b = block(id);
      if (b.segment != sid || b.prev != prev || b.addr != expect_addr || b.size_bytes == 0) {
        return fmt::format("segment 0x{:x}: block {} at 0x{:x} breaks the tiling (expected 0x{:x})", seg.base,
                           id, b.addr, expect_addr);
      }
      const bool idle_free = !b.allocated && b.event_count == 0;
      if (idle_free != in_free_set(id)) {
        return fmt::format("block 0x{:x}: free={} but in_free_set={}", b.addr, idle_free, in_free_set(id));
      }
      if (idle_free) {
        (b.mapped ? free_seen : unmapped_seen)[static_cast<int>(b.pool)]++;
        if (prev != kNoBlock) {
          const Block& p = block(prev);
          if (!p.allocated && p.event_count == 0 && p.mapped == b.mapped && !p.has_stream_uses) {
            return fmt::format("free blocks 0x{:x} and 0x{:x} are adjacent but not merged (M3)", p.addr,
                               b.addr);
          }
        }
      }
      expect_addr += b.size_bytes;
      prev = id;
    }
    if (expect_addr != seg.base + seg.size_bytes) {
      return fmt::format("segment 0x{:x}: blocks cover {} of {} bytes", seg.base, expect_addr - seg.base,
                         seg.size_bytes);
    }
  }
  for (int p = 0; p < kNumPools; ++p) {
    const Block* last = nullptr;
    for (const Block& b : m_free[p]) {
      if (!b.mapped || static_cast<int>(b.pool) != p || (last != nullptr && !FreeOrder{}(*last, b))) {
        return fmt::format("pool {}: free set out of order or holding a foreign block at 0x{:x}", p, b.addr);
      }
      last = &b;
    }
    last = nullptr;
    for (const Block& b : m_unmapped[p]) {
      if (b.mapped || static_cast<int>(b.pool) != p || (last != nullptr && !UnmappedOrder{}(*last, b))) {
        return fmt::format("pool {}: unmapped set out of order or holding a foreign block at 0x{:x}", p,
                           b.addr);
      }
      last = &b;
    }
    if (free_seen[p] != m_free[p].size() || unmapped_seen[p] != m_unmapped[p].size()) {
      return fmt::format("pool {}: free set holds {} blocks, {} free blocks found", p, m_free[p].size(),
                         free_seen[p]);
    }
  }
  return "";
}

}  // namespace vramsim
