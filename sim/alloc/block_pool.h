// Mechanism shared by every caching policy: the segments a device has handed out, the blocks that tile them
// (address-ordered, doubly linked), and per-pool sets of free blocks. It decides nothing: policies decide
// which block to take, whether to split, when to merge and what to release; this class keeps the books so
// that each rule can be written once, by name, in the policy (see policies/pytorch_caching.h).
//
// Complexity (n = free blocks in the pool):
//   lower_bound_free / insert_free / erase_free   O(log n)
//   split_front / merge                           O(1)
//   block lookup by id                            O(1)
//
// Note [Free-set order]: free blocks are ordered by (stream, size, address), exactly PyTorch's
// BlockComparator. Best fit is then "first key >= (stream, size, 0)", ties go to the lowest address, and the
// release loops walk streams in handle order. Unmapped ranges of expandable segments are ordered by (stream,
// address).
#pragma once

#include <cstdint>
#include <memory_resource>
#include <set>
#include <string>
#include <vector>

#include "sim/core/types.h"

namespace vramsim {

enum class PoolKind : std::uint8_t { kSmall = 0, kLarge = 1 };
inline constexpr int kNumPools = 2;

using BlockId = std::uint32_t;
using SegmentId = std::uint32_t;
inline constexpr BlockId kNoBlock = UINT32_MAX;
inline constexpr SegmentId kNoSegment = UINT32_MAX;

struct Block {
  Bytes addr = 0;
  Bytes size_bytes = 0;
  Bytes requested_bytes = 0;  // orig of the last hand-out of this block object (stale once free, spec §8.4)
  BlockId prev = kNoBlock;    // neighbours inside the same segment (reservation, for expandable)
  BlockId next = kNoBlock;
  SegmentId segment = kNoSegment;
  StreamId stream = 0;
  PoolKind pool = PoolKind::kLarge;
  bool allocated = false;
  bool mapped = true;                 // false only for unmapped ranges of expandable segments
  bool expandable = false;            // lies in an expandable segment's reservation
  std::uint32_t event_count = 0;      // outstanding cross-stream events (record_stream, spec ST3)
  std::uint64_t gc_count_base = 0;    // pool lookup counter at the last insertion into the free set (GC ages)
  std::vector<StreamId> stream_uses;  // record_stream targets not yet turned into events

  bool is_split() const { return prev != kNoBlock || next != kNoBlock; }
};

struct Segment {
  Bytes base = 0;
  Bytes size_bytes = 0;  // cudaMalloc size, or the whole reservation of an expandable segment
  Bytes page_bytes = 0;  // expandable only: mapping granularity
  PoolKind pool = PoolKind::kLarge;
  StreamId stream = 0;
  bool expandable = false;
  bool live = false;
  BlockId first = kNoBlock;  // lowest-address block
};

class BlockPool {
 public:
  struct FreeKey {
    StreamId stream;
    Bytes size_bytes;
    Bytes addr;
    BlockId id;
    bool operator<(const FreeKey& o) const {
      if (stream != o.stream) return stream < o.stream;
      if (size_bytes != o.size_bytes) return size_bytes < o.size_bytes;
      return addr < o.addr;
    }
  };
  struct UnmappedKey {
    StreamId stream;
    Bytes addr;
    BlockId id;
    bool operator<(const UnmappedKey& o) const {
      if (stream != o.stream) return stream < o.stream;
      return addr < o.addr;
    }
  };
  using FreeSet = std::pmr::set<FreeKey>;
  using UnmappedSet = std::pmr::set<UnmappedKey>;

  BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  Block& block(BlockId id) { return m_blocks[id]; }
  const Block& block(BlockId id) const { return m_blocks[id]; }
  Segment& segment(SegmentId id) { return m_segments[id]; }
  const Segment& segment(SegmentId id) const { return m_segments[id]; }

  // A new segment [base, base + size) tiled by one block that is in no set yet (mapped unless expandable).
  // pre: the range overlaps no live segment (checked under SIM_DEBUG_FULL).
  SegmentId add_segment(Bytes base, Bytes size_bytes, PoolKind pool, StreamId stream, bool expandable,
                        Bytes page_bytes);
  // pre: the segment is a single block, in no set. Frees the block and the segment id.
  void remove_segment(SegmentId id);

  // Front split: a new block [addr, addr + front_bytes) is carved out of `id`, which keeps its identity and
  // shrinks to the remainder (spec S4). Neither block's set membership changes. Returns the new front block.
  // pre: 0 < front_bytes < size of `id`, and `id` is in no set.
  BlockId split_front(BlockId id, Bytes front_bytes);
  // Back split for unmapping: a new block holding the last `back_bytes` of `id`.
  BlockId split_back(BlockId id, Bytes back_bytes);
  // `src` (prev or next neighbour of `dst`) is absorbed into `dst` and deleted. Neither may be in a set.
  void merge(BlockId dst, BlockId src);

  FreeSet& free_set(PoolKind pool) { return m_free[static_cast<int>(pool)]; }
  const FreeSet& free_set(PoolKind pool) const { return m_free[static_cast<int>(pool)]; }
  UnmappedSet& unmapped_set(PoolKind pool) { return m_unmapped[static_cast<int>(pool)]; }
  void insert_free(BlockId id);  // into the free set (mapped) or the unmapped set (unmapped)
  void erase_free(BlockId id);
  bool in_free_set(BlockId id) const;

  // Live segments in address order (a fresh vector; for reports and snapshots, not hot paths).
  std::vector<SegmentId> live_segments_by_address() const;
  std::size_t live_block_count() const { return m_blocks.size() - m_free_block_ids.size(); }

  // Expensive self-check: blocks tile each live segment, links agree, free blocks are in exactly one set,
  // no two adjacent free idle blocks with the same mapping (M3). Returns "" or the first violation.
  std::string check_invariants() const;

 private:
  BlockId new_block();
  void delete_block(BlockId id);

  std::vector<Block> m_blocks;
  std::vector<BlockId> m_free_block_ids;
  std::vector<Segment> m_segments;
  std::vector<SegmentId> m_free_segment_ids;
  std::pmr::unsynchronized_pool_resource m_node_memory;
  FreeSet m_free[kNumPools];
  UnmappedSet m_unmapped[kNumPools];
};

}  // namespace vramsim
