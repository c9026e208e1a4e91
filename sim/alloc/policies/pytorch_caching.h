// The native PyTorch CUDA caching allocator (DeviceCachingAllocator), one device, as a policy.
//
// Algorithm (spec §1-§6; function names are PyTorch's, so this file and the spec read side by side):
//   malloc:  process_events -> round_size -> get_pool -> get_free_block (best fit in the pool's
//            (stream, size, address) order) -> on a miss: garbage_collect_cached_blocks (fraction + threshold
//            only) -> alloc_block -> release_available_cached_blocks + alloc_block -> release_cached_blocks +
//            alloc_block(retry) -> OOM.  Then should_split decides whether the front of the block is carved
//            off.
//   free:    free_block merges with idle neighbours (try_merge_blocks) unless record_stream made the free
//   wait
//            for stream events (insert_events / process_events).
//   expandable_segments: one reservation per (pool, stream), grown by mapping 2 MiB / 20 MiB pages
//            (find_expandable_block, map_block) and shrunk only by release_cached_blocks (unmap_block).
//
// Complexity (n = free blocks in the pool, k = blocks released):
//   allocate, cache hit      O(log n)            allocate, new segment   O(log n)
//   free                     O(log n)            empty_cache             O(n + k log n)
//   garbage collection       O(n) per pass
//
// Private pools (CUDA-graph pools, torch.cuda.MemPool): sim/alloc/private_pool.h states the rules; the
// functions below carry PyTorch's names (beginAllocateToPool, ...).
//
// Not modelled (spec §10): IPC, multi-threaded interleavings, MemPools with a custom (pluggable) allocator,
// MemPool(no_split=True), graph_capture_record_stream_reuse.
#pragma once

#include <optional>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sim/alloc/alloc_observer.h"
#include "sim/alloc/block_pool.h"
#include "sim/alloc/caching_config.h"
#include "sim/alloc/device_memory.h"
#include "sim/alloc/i_allocator_policy.h"
#include "sim/alloc/private_pool.h"

namespace vramsim {

// One block of a segment that already exists when a replay starts (rebuilt from a snapshot).
struct AdoptedBlock {
  Bytes size_bytes = 0;
  Bytes requested_bytes = 0;
  bool allocated = false;
};

// One mapped run of an expandable reservation that already exists when a replay starts (spec E9: a snapshot
// segment): its first byte and the blocks tiling it.
struct AdoptedRun {
  Bytes addr = 0;
  std::vector<AdoptedBlock> blocks;
};

class PyTorchCachingPolicy final : public IAllocatorPolicy {
 public:
  PyTorchCachingPolicy(CachingConfig config, IDeviceMemory& device, IAllocObserver& events);

  std::string_view name() const override {
    return m_config.expandable_segments ? "pytorch-expandable" : "pytorch";
  }
  AllocResult allocate(const AllocRequest& request) override;
  void free(BlockId block, TimeNs time_ns) override;
  void record_stream(BlockId block, StreamId stream) override;
  void complete_stream_events(BlockId block) override;
  void empty_cache() override { release_cached_blocks(MempoolId{}); }

  // ---- private pools (names as in DeviceCachingAllocator). Misuse PyTorch refuses (ending a capture that
  // is not under way, releasing a pool nobody holds) throws InputError with PyTorch's message.
  // createOrIncrefPool: make the pool (use_count 1) or add a holder.
  void create_or_incref_pool(MempoolId id);
  // beginAllocateToPool: route requests to `id` (created or increfed) while it is under way; `stream` is a
  // graph capture's stream, nullopt = every stream (use_mem_pool's thread filter).
  void begin_allocate_to_pool(MempoolId id, std::optional<StreamId> stream);
  // endAllocateToPool: stop routing requests to `id` (its use_count is unchanged).
  void end_allocate_to_pool(MempoolId id);
  // releasePool: one holder fewer; at 0 the pool becomes freeable.
  void release_pool(MempoolId id);
  // setUseOnOOM.
  void set_use_on_oom(MempoolId id, bool use_on_oom);
  // emptyCache(mempool_id): (0, 0) is torch.cuda.empty_cache().
  void empty_cache(MempoolId id) { release_cached_blocks(id); }
  // getPoolUseCount; nullopt when there is no such pool.
  std::optional<int> pool_use_count(MempoolId id) const;
  // The id of the pool a segment or block belongs to ((0, 0) for the default pools).
  MempoolId mempool_id(PrivatePoolIndex index) const { return m_private_pools[index].id; }
  const std::vector<PrivatePool>& private_pools() const { return m_private_pools; }
  const BlockPool& blocks() const override { return m_pool; }

  // torch.cuda.set_per_process_memory_fraction: allowed = floor(fraction * device total) (spec F1).
  void set_memory_fraction(double fraction);
  // torch.cuda.memory._set_allocator_settings: re-parse on top of the current settings (spec D5).
  void set_settings(const CachingConfig& config) { m_config = config; }
  const CachingConfig& config() const { return m_config; }
  Bytes total_allocated_bytes() const { return m_total_allocated_bytes; }

  // Installs a segment that existed before the replay started, tiled by `blocks` (free runs as given; the
  // caller passes them maximal, spec M3). Emits no events: observers seed themselves from blocks().
  // Returns the ids of the blocks, in order.
  std::vector<BlockId> adopt_segment(Bytes base, PoolKind pool, StreamId stream,
                                     const std::vector<AdoptedBlock>& blocks, MempoolId owner = {});
  // Installs an expandable reservation [base, base + size_bytes) that existed before the replay started (spec
  // E1): `runs` are its mapped runs, in address order, page aligned, inside the reservation and not touching
  // each other; every byte outside them is unmapped. Emits no events. Returns the ids of the runs' blocks, in
  // order.
  std::vector<BlockId> adopt_expandable_segment(Bytes base, Bytes size_bytes, PoolKind pool, StreamId stream,
                                                const std::vector<AdoptedRun>& runs, MempoolId owner = {});

 private:
  struct AllocParams {
    Bytes orig_bytes = 0;
    Bytes size_bytes = 0;   // round_size(orig)
    Bytes alloc_bytes = 0;  // get_allocation_size(size)
    PoolKind pool = PoolKind::kLarge;
    PrivatePoolIndex private_pool = kDefaultPools;
    StreamId stream = 0;
    TimeNs time_ns = 0;
    BlockId block = kNoBlock;
  };

  bool get_free_block(AllocParams& p);
  bool alloc_block(AllocParams& p, bool is_retry);
  bool should_split(BlockId block, Bytes size_bytes) const;
  AllocResult alloc_found_block(AllocParams& p, bool split_remainder);
  void free_block(BlockId block, TimeNs time_ns);
  Bytes try_merge_blocks(BlockId dst, BlockId src);
  bool release_available_cached_blocks(const AllocParams& p);
  bool release_cached_blocks(MempoolId id);
  void release_blocks(PoolKind pool, PrivatePoolIndex private_pool);
  bool try_mempool_fallback(AllocParams& p);
  PrivatePoolIndex get_private_pool(StreamId stream) const;
  PrivatePoolIndex find_pool(MempoolId id) const;  // kDefaultPools when there is none
  // The pool of a segment adopted from a snapshot: made live (held once) when the replay starts.
  PrivatePoolIndex adopted_pool(MempoolId owner);
  SegmentId add_pool_segment(Bytes base, Bytes size_bytes, PoolKind pool, StreamId stream, bool expandable,
                             Bytes page_bytes, PrivatePoolIndex private_pool);
  void remove_pool_segment(SegmentId sid);
  void release_block(BlockId block);
  void garbage_collect_cached_blocks();
  // Releases before 2.5 assert where release_available_cached_blocks or GC meets an expandable block:
  // throws InputError naming the release and the fix (TorchRule::kReleaseSkipsExpandable); no-op from 2.5.
  void refuse_expandable_release_before_2_5(std::string_view where) const;
  BlockId try_allocate_expandable_block(const AllocParams& p);
  BlockId find_expandable_block(const AllocParams& p);
  bool map_block(BlockId to_map, Bytes size_bytes, TimeNs time_ns);
  void unmap_block(BlockId block);
  void insert_events(BlockId block);
  void synchronize_and_free_events(std::optional<PrivatePoolIndex> only_pool = std::nullopt);

  bool gc_enabled() const { return m_set_fraction && m_config.garbage_collection_threshold > 0.0; }
  std::uint64_t gc_age(const Block& b) const {
    return m_lookup_count[static_cast<int>(b.pool)] - b.gc_count_base;
  }
  void insert_into_blocks(BlockId block);
  BlockEventInfo block_info(const Block& b, TimeNs time_ns) const;

  CachingConfig m_config;
  IDeviceMemory& m_device;
  IAllocObserver& m_events;
  BlockPool m_pool;
  Bytes m_total_allocated_bytes = 0;  // live cudaMalloc segments + mapped pages (spec B2)
  bool m_set_fraction = false;
  Bytes m_allowed_bytes = 0;
  std::uint64_t m_lookup_count[kNumPools] = {0, 0};                  // get_free_blocks_call_count (GC ages)
  std::vector<BlockId> m_pending_frees;                              // blocks waiting for stream events, FIFO
  std::unordered_map<BlockId, std::vector<StreamId>> m_stream_uses;  // record_stream targets (ST2)
  std::vector<PrivatePool> m_private_pools{PrivatePool{}};           // [0]: the default pools (never live)
  // captures_underway: (pool, stream filter; nullopt = every stream), in begin order.
  std::vector<std::pair<PrivatePoolIndex, std::optional<StreamId>>> m_captures_underway;
  std::vector<PrivatePoolIndex> m_use_on_oom;  // use_on_oom_pools, in the order they were set
};

}  // namespace vramsim
