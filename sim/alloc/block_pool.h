// Mechanism shared by every caching policy: the segments a device has handed out, the blocks that tile them
// (address-ordered, doubly linked), and per-pool sets of free blocks. It decides nothing: policies decide
// which block to take, whether to split, when to merge and what to release; this class keeps the books so
// that each rule can be written once, by name, in the policy (see policies/pytorch_caching.h).
//
// Complexity (n = free blocks in the pool):
//   lower_bound_free / insert_free                 O(log n)
//   erase_free                                     O(1) amortised (intrusive: no lookup)
//   split_front / merge                           O(1)
//   block lookup by id                            O(1)
//
// Note [Free-set order]: free blocks are ordered by (private pool, stream, size, address). Within one pool
// this is exactly PyTorch's BlockComparator (stream, size, address): best fit is "first key >= (pool, stream,
// size, 0)", ties go to the lowest address, and the release loops walk streams in handle order. PyTorch keeps
// a separate BlockPool pair per PrivatePool (c10/cuda/CUDACachingAllocator.cpp, struct PrivatePool); here the
// private pool is the leading key, so each pool is one contiguous run of the set and the default pools
// (private pool 0) come first. Unmapped ranges of expandable segments are ordered by (private pool, stream,
// address).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <boost/intrusive/set.hpp>

#include "sim/core/types.h"

namespace vramsim {

enum class PoolKind : std::uint8_t { kSmall = 0, kLarge = 1 };
inline constexpr int kNumPools = 2;

using BlockId = std::uint32_t;
// Index of a private pool (CUDA-graph pool or torch.cuda.MemPool) in the policy's table; 0 = the default
// small/large pools.
using PrivatePoolIndex = std::uint32_t;
inline constexpr PrivatePoolIndex kDefaultPools = 0;
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
  bool mapped = true;                             // false only for unmapped ranges of expandable segments
  bool expandable = false;                        // lies in an expandable segment's reservation
  std::uint32_t event_count = 0;                  // outstanding cross-stream events (record_stream, spec ST3)
  PrivatePoolIndex private_pool = kDefaultPools;  // owning private pool (0: the default pools)
  bool has_stream_uses = false;     // record_stream targets are pending (kept in the policy: rare)
  std::uint64_t gc_count_base = 0;  // pool lookup counter at the last insertion into the free set (GC ages)
  BlockId id = kNoBlock;
  boost::intrusive::set_member_hook<boost::intrusive::link_mode<boost::intrusive::safe_link>> free_hook;

  bool is_split() const { return prev != kNoBlock || next != kNoBlock; }
};

struct Segment {
  Bytes base = 0;
  Bytes size_bytes = 0;  // cudaMalloc size, or the whole reservation of an expandable segment
  Bytes page_bytes = 0;  // expandable only: mapping granularity
  PoolKind pool = PoolKind::kLarge;
  StreamId stream = 0;
  PrivatePoolIndex private_pool = kDefaultPools;
  bool expandable = false;
  bool live = false;
  BlockId first = kNoBlock;  // lowest-address block
};

class BlockPool {
 public:
  // A search key in free-set order.
  struct FreeKey {
    PrivatePoolIndex private_pool;
    StreamId stream;
    Bytes size_bytes;
    Bytes addr;
  };
  struct FreeOrder {
    static bool less(const FreeKey& a, const FreeKey& b) {
      if (a.private_pool != b.private_pool) return a.private_pool < b.private_pool;
      if (a.stream != b.stream) return a.stream < b.stream;
      if (a.size_bytes != b.size_bytes) return a.size_bytes < b.size_bytes;
      return a.addr < b.addr;
    }
    // (stream, size, address) within one pool: PyTorch's BlockComparator.
    static bool less(StreamId s1, Bytes z1, Bytes a1, StreamId s2, Bytes z2, Bytes a2) {
      return less(FreeKey{kDefaultPools, s1, z1, a1}, FreeKey{kDefaultPools, s2, z2, a2});
    }
    static FreeKey key(const Block& b) { return FreeKey{b.private_pool, b.stream, b.size_bytes, b.addr}; }
    bool operator()(const Block& a, const Block& b) const { return less(key(a), key(b)); }
    bool operator()(const FreeKey& k, const Block& b) const { return less(k, key(b)); }
    bool operator()(const Block& b, const FreeKey& k) const { return less(key(b), k); }
  };
  // (private pool, stream) of an unmapped range; ranges of one key are in address order.
  struct UnmappedKey {
    PrivatePoolIndex private_pool;
    StreamId stream;
  };
  struct UnmappedOrder {
    bool operator()(const Block& a, const Block& b) const {
      if (a.private_pool != b.private_pool) return a.private_pool < b.private_pool;
      return a.stream != b.stream ? a.stream < b.stream : a.addr < b.addr;
    }
    bool operator()(UnmappedKey k, const Block& b) const {
      return k.private_pool != b.private_pool ? k.private_pool < b.private_pool : k.stream < b.stream;
    }
    bool operator()(const Block& b, UnmappedKey k) const {
      return k.private_pool != b.private_pool ? b.private_pool < k.private_pool : b.stream < k.stream;
    }
  };
  using Hook = boost::intrusive::member_hook<Block, decltype(Block::free_hook), &Block::free_hook>;
  using FreeSet = boost::intrusive::set<Block, Hook, boost::intrusive::compare<FreeOrder>>;
  using UnmappedSet = boost::intrusive::set<Block, Hook, boost::intrusive::compare<UnmappedOrder>>;

  BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  Block& block(BlockId id) { return m_block_chunks[id >> kChunkShift][id & (kChunkSize - 1)]; }
  const Block& block(BlockId id) const { return m_block_chunks[id >> kChunkShift][id & (kChunkSize - 1)]; }
  Segment& segment(SegmentId id) { return m_segments[id]; }
  const Segment& segment(SegmentId id) const { return m_segments[id]; }

  // A new segment [base, base + size) tiled by one block that is in no set yet (mapped unless expandable),
  // owned by `private_pool` (0: the default pools).
  // pre: the range overlaps no live segment (check_invariants() reports an overlap; replay runs it after
  // every event under expensive_checks()).
  SegmentId add_segment(Bytes base, Bytes size_bytes, PoolKind pool, StreamId stream, bool expandable,
                        Bytes page_bytes, PrivatePoolIndex private_pool = kDefaultPools);
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

  ~BlockPool();

  FreeSet& free_set(PoolKind pool) { return m_free[static_cast<int>(pool)]; }
  const FreeSet& free_set(PoolKind pool) const { return m_free[static_cast<int>(pool)]; }
  UnmappedSet& unmapped_set(PoolKind pool) { return m_unmapped[static_cast<int>(pool)]; }
  // First free block with key >= (private pool, stream, size, 0): best fit when it is in that private pool
  // and on `stream` (spec G2).
  FreeSet::iterator lower_bound_free(PoolKind pool, StreamId stream, Bytes size_bytes,
                                     PrivatePoolIndex private_pool = kDefaultPools) {
    return free_set(pool).lower_bound(FreeKey{private_pool, stream, size_bytes, 0}, FreeOrder{});
  }
  // First unmapped range of (private pool, `stream`), lowest address.
  UnmappedSet::iterator lower_bound_unmapped(PoolKind pool, StreamId stream,
                                             PrivatePoolIndex private_pool = kDefaultPools) {
    return unmapped_set(pool).lower_bound(UnmappedKey{private_pool, stream}, UnmappedOrder{});
  }
  void insert_free(BlockId id);  // into the free set (mapped) or the unmapped set (unmapped)
  void erase_free(BlockId id);
  bool in_free_set(BlockId id) const;

  // Live segments in address order (a fresh vector; for reports and snapshots, not hot paths).
  std::vector<SegmentId> live_segments_by_address() const;
  std::size_t live_block_count() const { return m_block_count - m_free_block_ids.size(); }

  // Expensive self-check: blocks tile each live segment, links agree, free blocks are in exactly one set,
  // no two adjacent free idle blocks with the same mapping (M3). Returns "" or the first violation.
  std::string check_invariants() const;

 private:
  BlockId new_block();
  void delete_block(BlockId id);

  // Blocks live in fixed-size chunks: stable addresses (the intrusive sets link Blocks directly) and an id ->
  // Block lookup that is a shift and a mask.
  static constexpr unsigned kChunkShift = 12;
  static constexpr std::size_t kChunkSize = std::size_t{1} << kChunkShift;
  std::vector<std::unique_ptr<Block[]>> m_block_chunks;
  std::size_t m_block_count = 0;
  std::vector<BlockId> m_free_block_ids;
  std::vector<Segment> m_segments;
  std::vector<SegmentId> m_free_segment_ids;
  FreeSet m_free[kNumPools];
  UnmappedSet m_unmapped[kNumPools];
};

}  // namespace vramsim
