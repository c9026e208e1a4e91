#include "sim/alloc/block_pool.h"

#include <algorithm>

#include <fmt/format.h>

#include "sim/core/assert.h"

namespace vramsim {

BlockPool::BlockPool()
    : m_free{FreeSet(&m_node_memory), FreeSet(&m_node_memory)},
      m_unmapped{UnmappedSet(&m_node_memory), UnmappedSet(&m_node_memory)} {}

BlockId BlockPool::new_block() {
  if (!m_free_block_ids.empty()) {
    const BlockId id = m_free_block_ids.back();
    m_free_block_ids.pop_back();
    m_blocks[id] = Block{};
    return id;
  }
  m_blocks.emplace_back();
  return static_cast<BlockId>(m_blocks.size() - 1);
}

void BlockPool::delete_block(BlockId id) {
  m_blocks[id].segment = kNoSegment;
  m_free_block_ids.push_back(id);
}

SegmentId BlockPool::add_segment(Bytes base, Bytes size_bytes, PoolKind pool, StreamId stream,
                                 bool expandable, Bytes page_bytes) {
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
  Block& b = m_blocks[bid];
  b.addr = base;
  b.size_bytes = size_bytes;
  b.segment = sid;
  b.stream = stream;
  b.pool = pool;
  b.mapped = !expandable;
  b.expandable = expandable;
  m_segments[sid] = Segment{base, size_bytes, page_bytes, pool, stream, expandable, true, bid};
  return sid;
}

void BlockPool::remove_segment(SegmentId id) {
  Segment& seg = m_segments[id];
  SIM_ASSERT(seg.live);
  const Block& b = m_blocks[seg.first];
  SIM_ASSERT(!b.is_split() && !b.allocated && !in_free_set(seg.first));
  delete_block(seg.first);
  seg = Segment{};
  m_free_segment_ids.push_back(id);
}

BlockId BlockPool::split_front(BlockId id, Bytes front_bytes) {
  const BlockId fid = new_block();  // may reallocate m_blocks: take references afterwards
  Block& rest = m_blocks[id];
  SIM_ASSERT(front_bytes > 0 && front_bytes < rest.size_bytes);
  Block& front = m_blocks[fid];
  front.addr = rest.addr;
  front.size_bytes = front_bytes;
  front.segment = rest.segment;
  front.stream = rest.stream;
  front.pool = rest.pool;
  front.mapped = rest.mapped;
  front.expandable = rest.expandable;
  front.prev = rest.prev;
  front.next = id;
  if (rest.prev != kNoBlock) {
    m_blocks[rest.prev].next = fid;
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
  Block& front = m_blocks[id];
  SIM_ASSERT(back_bytes > 0 && back_bytes < front.size_bytes);
  Block& back = m_blocks[bid];
  back.addr = front.addr + front.size_bytes - back_bytes;
  back.size_bytes = back_bytes;
  back.segment = front.segment;
  back.stream = front.stream;
  back.pool = front.pool;
  back.mapped = front.mapped;
  back.expandable = front.expandable;
  back.prev = id;
  back.next = front.next;
  if (front.next != kNoBlock) {
    m_blocks[front.next].prev = bid;
  }
  front.next = bid;
  front.size_bytes -= back_bytes;
  return bid;
}

void BlockPool::merge(BlockId dst, BlockId src) {
  Block& d = m_blocks[dst];
  Block& s = m_blocks[src];
  if (d.prev == src) {
    d.addr = s.addr;
    d.prev = s.prev;
    if (s.prev != kNoBlock) {
      m_blocks[s.prev].next = dst;
    } else {
      m_segments[d.segment].first = dst;
    }
  } else {
    SIM_ASSERT(d.next == src);
    d.next = s.next;
    if (s.next != kNoBlock) {
      m_blocks[s.next].prev = dst;
    }
  }
  d.size_bytes += s.size_bytes;
  delete_block(src);
}

void BlockPool::insert_free(BlockId id) {
  const Block& b = m_blocks[id];
  if (b.mapped) {
    const bool inserted = free_set(b.pool).insert(FreeKey{b.stream, b.size_bytes, b.addr, id}).second;
    SIM_ASSERT(inserted);
  } else {
    const bool inserted = unmapped_set(b.pool).insert(UnmappedKey{b.stream, b.addr, id}).second;
    SIM_ASSERT(inserted);
  }
}

void BlockPool::erase_free(BlockId id) {
  const Block& b = m_blocks[id];
  std::size_t erased;
  if (b.mapped) {
    erased = free_set(b.pool).erase(FreeKey{b.stream, b.size_bytes, b.addr, id});
  } else {
    erased = unmapped_set(b.pool).erase(UnmappedKey{b.stream, b.addr, id});
  }
  SIM_ASSERT(erased == 1);
}

bool BlockPool::in_free_set(BlockId id) const {
  const Block& b = m_blocks[id];
  const int p = static_cast<int>(b.pool);
  if (b.mapped) {
    auto it = m_free[p].find(FreeKey{b.stream, b.size_bytes, b.addr, id});
    return it != m_free[p].end() && it->id == id;
  }
  auto it = m_unmapped[p].find(UnmappedKey{b.stream, b.addr, id});
  return it != m_unmapped[p].end() && it->id == id;
}

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
    for (BlockId id = seg.first; id != kNoBlock; id = m_blocks[id].next) {
      const Block& b = m_blocks[id];
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
          const Block& p = m_blocks[prev];
          if (!p.allocated && p.event_count == 0 && p.mapped == b.mapped && p.stream_uses.empty()) {
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
    if (free_seen[p] != m_free[p].size() || unmapped_seen[p] != m_unmapped[p].size()) {
      return fmt::format("pool {}: free set holds {} blocks, {} free blocks found", p, m_free[p].size(),
                         free_seen[p]);
    }
  }
  return "";
}

}  // namespace vramsim
