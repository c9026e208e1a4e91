#include "sim/alloc/policies/pytorch_caching.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#include <fmt/format.h>

#include "sim/alloc/size_classes.h"
#include "sim/core/assert.h"
#include "sim/core/error.h"

namespace vramsim {

PyTorchCachingPolicy::PyTorchCachingPolicy(CachingConfig config, IDeviceMemory& device,
                                           IAllocObserver& events)
    : m_config(std::move(config)), m_device(device), m_events(events) {
  if (m_config.per_process_memory_fraction) {
    set_memory_fraction(*m_config.per_process_memory_fraction);
  }
}

void PyTorchCachingPolicy::set_memory_fraction(double fraction) {
  m_set_fraction = true;
  m_allowed_bytes = static_cast<Bytes>(std::floor(fraction * static_cast<double>(m_device.total_bytes())));
}

BlockEventInfo PyTorchCachingPolicy::block_info(const Block& b, TimeNs time_ns) const {
  return BlockEventInfo{b.addr, b.size_bytes, b.requested_bytes,
                        b.pool, b.stream,     b.size_bytes >= m_config.max_split_size_bytes,
                        time_ns};
}

void PyTorchCachingPolicy::insert_into_blocks(BlockId block) {
  Block& b = m_pool.block(block);
  b.gc_count_base = m_lookup_count[static_cast<int>(b.pool)];
  m_pool.insert_free(block);
}

// ---- malloc -----------------------------------------------------------------------------------------------

AllocResult PyTorchCachingPolicy::allocate(const AllocRequest& request) {
  SIM_ASSERT(request.size_bytes > 0);
  AllocParams p;
  p.orig_bytes = request.size_bytes;
  p.stream = request.stream;
  p.time_ns = request.time_ns;
  if (request.size_bytes >= kAllocationCeiling) {
    // "Tried to allocate more than 1EB memory": raised before anything else is looked at.
    m_events.on_oom(OomInfo{request.size_bytes, request.size_bytes, m_device.free_bytes(),
                            m_set_fraction ? m_allowed_bytes : 0, request.stream, request.time_ns});
    return {};
  }
  p.size_bytes = round_size(request.size_bytes, m_config);
  p.pool = get_pool(p.size_bytes);
  p.private_pool = get_private_pool(p.stream);
  p.alloc_bytes = get_allocation_size(p.size_bytes);

  bool block_found = get_free_block(p);
  if (!block_found) {
    if (gc_enabled()) {
      garbage_collect_cached_blocks();
    }
    // DeviceCachingAllocator::malloc: the last retry (release_cached_blocks) is skipped while a capture or
    // use_mem_pool is under way; the use_on_oom pools are tried before any cached memory is freed (2.11+,
    // pytorch#169699), after all of it before.
    const bool fallback_first = torch_has(m_config.torch_version, TorchRule::kMemPoolFallbackFirst);
    block_found =
        alloc_block(p, false) || (fallback_first && try_mempool_fallback(p)) ||
        (release_available_cached_blocks(p) && alloc_block(p, false)) ||
        (m_captures_underway.empty() && release_cached_blocks(MempoolId{}) && alloc_block(p, true)) ||
        (!fallback_first && try_mempool_fallback(p));
  }
  if (!block_found) {
    m_events.on_oom(OomInfo{p.size_bytes, p.alloc_bytes, m_device.free_bytes(),
                            m_set_fraction ? m_allowed_bytes : 0, p.stream, p.time_ns});
    return {};
  }
  return alloc_found_block(p, should_split(p.block, p.size_bytes));
}

bool PyTorchCachingPolicy::get_free_block(AllocParams& p) {
  if (gc_enabled()) {
    ++m_lookup_count[static_cast<int>(p.pool)];
  }
  auto& free_set = m_pool.free_set(p.pool);
  auto it = m_pool.lower_bound_free(p.pool, p.stream, p.size_bytes, p.private_pool);
  // Same pool and stream, as PyTorch's per-pool BlockPool search (Note [Free-set order]).
  auto same = [&p](const Block& b) { return b.private_pool == p.private_pool && b.stream == p.stream; };
  if (it == free_set.end() || !same(*it)) {
    return false;
  }
  if (it->expandable) {
    if (m_config.expandable_segments) {
      // Note [Expandable best fit]: a block bordering the unmapped rest of its reservation can grow, so for
      // best fit its size is what it can expand to; step past such tails to interior blocks.
      auto expandable_size = [this](BlockId id) {
        const Block& b = m_pool.block(id);
        return b.size_bytes +
               (b.next != kNoBlock && !m_pool.block(b.next).mapped ? m_pool.block(b.next).size_bytes : 0);
      };
      auto next = std::next(it);
      while (it->expandable && next != free_set.end() && same(*next) &&
             expandable_size(next->id) < expandable_size(it->id)) {
        it = next++;
      }
    } else {
      // Expandable segments were turned off after some were created: honour it, skip them.
      do {
        ++it;
      } while (it != free_set.end() && it->expandable && same(*it));
      if (it == free_set.end() || !same(*it)) {
        return false;
      }
    }
  }
  const Bytes max_split = m_config.max_split_size_bytes;
  if (p.size_bytes < max_split && it->size_bytes >= max_split) {
    return false;  // G4: never carve a normal request out of an oversize block
  }
  if (p.size_bytes >= max_split && it->size_bytes >= p.size_bytes + m_config.max_non_split_rounding_bytes) {
    return false;  // G5: an oversize request takes an oversize block only if the waste is bounded
  }
  p.block = it->id;
  free_set.erase(it);
  return true;
}

bool PyTorchCachingPolicy::alloc_block(AllocParams& p, bool is_retry) {
  if (is_retry) {
    m_events.on_alloc_retry();
  }
  if (m_set_fraction && m_total_allocated_bytes + p.alloc_bytes > m_allowed_bytes) {
    return false;  // B2: over the fraction limit, CUDA is not even asked
  }
  if (m_config.expandable_segments) {
    p.block = try_allocate_expandable_block(p);
    return p.block != kNoBlock;
  }
  const std::optional<Bytes> ptr = m_device.malloc(p.alloc_bytes, p.pool, p.stream);
  if (!ptr) {
    return false;
  }
  m_total_allocated_bytes += p.alloc_bytes;
  const SegmentId sid = add_pool_segment(*ptr, p.alloc_bytes, p.pool, p.stream, false, 0, p.private_pool);
  p.block = m_pool.segment(sid).first;
  m_events.on_segment_alloc(SegmentEventInfo{*ptr, p.alloc_bytes, p.pool, p.stream,
                                             p.alloc_bytes >= m_config.max_split_size_bytes, p.time_ns});
  return true;
}

bool PyTorchCachingPolicy::should_split(BlockId block, Bytes size_bytes) const {
  const Block& b = m_pool.block(block);
  const Bytes remaining = b.size_bytes - size_bytes;
  if (b.pool == PoolKind::kSmall || m_config.expandable_segments) {
    return remaining >= kMinBlockSize;  // S2
  }
  return size_bytes < m_config.max_split_size_bytes && remaining > kSmallSize;  // S3
}

AllocResult PyTorchCachingPolicy::alloc_found_block(AllocParams& p, bool split_remainder) {
  BlockId block = p.block;
  const bool already_split = m_pool.block(block).is_split();
  const bool expandable = m_pool.block(block).expandable;
  if (split_remainder) {
    const BlockId remaining = block;
    block = m_pool.split_front(remaining, p.size_bytes);
    insert_into_blocks(remaining);
    if (!expandable) {
      if (already_split) {
        m_events.on_inactive_split(p.pool, 0, -static_cast<std::int64_t>(p.size_bytes));
      } else {
        m_events.on_inactive_split(p.pool, 1, static_cast<std::int64_t>(m_pool.block(remaining).size_bytes));
      }
    }
  } else if (already_split && !expandable) {
    m_events.on_inactive_split(p.pool, -1, -static_cast<std::int64_t>(m_pool.block(block).size_bytes));
  }
  Block& b = m_pool.block(block);
  b.allocated = true;
  b.requested_bytes = p.orig_bytes;
  m_events.on_alloc(block_info(b, p.time_ns));
  return AllocResult{block, b.addr, b.size_bytes};
}

// ---- free -------------------------------------------------------------------------------------------------

void PyTorchCachingPolicy::free(BlockId block, TimeNs time_ns) {
  Block& b = m_pool.block(block);
  SIM_ASSERT(b.allocated);
  b.allocated = false;
  m_events.on_free_requested(block_info(b, time_ns));
  if (b.has_stream_uses) {
    insert_events(block);
  } else {
    free_block(block, time_ns);
  }
}

void PyTorchCachingPolicy::record_stream(BlockId block, StreamId stream) {
  Block& b = m_pool.block(block);
  if (stream == b.stream) {
    return;  // ST2: the block's own stream needs no event
  }
  std::vector<StreamId>& uses = m_stream_uses[block];
  if (std::find(uses.begin(), uses.end(), stream) == uses.end()) {
    uses.push_back(stream);
  }
  b.has_stream_uses = true;
}

void PyTorchCachingPolicy::insert_events(BlockId block) {
  Block& b = m_pool.block(block);
  auto uses = m_stream_uses.find(block);
  b.event_count += static_cast<std::uint32_t>(uses->second.size());
  m_stream_uses.erase(uses);
  b.has_stream_uses = false;
  m_pending_frees.push_back(block);
}

void PyTorchCachingPolicy::complete_stream_events(BlockId block) {
  auto it = std::find(m_pending_frees.begin(), m_pending_frees.end(), block);
  if (it == m_pending_frees.end()) {
    return;  // an OOM's synchronize_and_free_events already freed it (the event was consumed there)
  }
  m_pending_frees.erase(it);
  m_pool.block(block).event_count = 0;
  free_block(block, 0);
}

void PyTorchCachingPolicy::synchronize_and_free_events(std::optional<PrivatePoolIndex> only_pool) {
  std::vector<BlockId> pending;
  if (only_pool) {
    // synchronize_and_free_events(context, pool): only that pool's blocks.
    auto of_pool = [&](BlockId b) { return m_pool.block(b).private_pool == *only_pool; };
    std::copy_if(m_pending_frees.begin(), m_pending_frees.end(), std::back_inserter(pending), of_pool);
    std::erase_if(m_pending_frees, of_pool);
  } else {
    pending.swap(m_pending_frees);
  }
  for (BlockId block : pending) {
    m_pool.block(block).event_count = 0;
    free_block(block, 0);
  }
}

Bytes PyTorchCachingPolicy::try_merge_blocks(BlockId dst, BlockId src) {
  if (src == kNoBlock) {
    return 0;
  }
  const Block& s = m_pool.block(src);
  if (s.allocated || s.event_count > 0 || s.has_stream_uses || s.mapped != m_pool.block(dst).mapped) {
    return 0;
  }
  const Bytes subsumed = s.size_bytes;
  m_pool.erase_free(src);
  m_pool.merge(dst, src);
  return subsumed;
}

void PyTorchCachingPolicy::free_block(BlockId block, TimeNs time_ns) {
  const Block& before = m_pool.block(block);
  const BlockEventInfo freed = block_info(before, time_ns);
  std::int64_t split_count = 0;
  std::int64_t split_bytes = 0;
  for (BlockId candidate : {before.prev, before.next}) {
    const Bytes subsumed = try_merge_blocks(block, candidate);
    if (subsumed > 0) {
      split_count -= 1;
      split_bytes -= static_cast<std::int64_t>(subsumed);
    }
  }
  insert_into_blocks(block);
  const Block& b = m_pool.block(block);
  if (b.is_split()) {
    split_count += 1;
    split_bytes += static_cast<std::int64_t>(b.size_bytes);
  }
  if (!b.expandable && (split_count != 0 || split_bytes != 0)) {
    m_events.on_inactive_split(b.pool, split_count, split_bytes);
  }
  m_events.on_free_completed(freed);
}

// ---- releasing memory ------------------------------------------------------------------------------------

void PyTorchCachingPolicy::release_block(BlockId block) {
  const Block& b = m_pool.block(block);
  SIM_ASSERT(!b.expandable && !b.is_split());
  const SegmentEventInfo seg{
      b.addr, b.size_bytes, b.pool, b.stream, b.size_bytes >= m_config.max_split_size_bytes, 0};
  m_events.on_segment_free(seg);
  m_pool.erase_free(block);
  remove_pool_segment(b.segment);
  m_device.free(seg.addr, seg.size_bytes);
  m_total_allocated_bytes -= seg.size_bytes;
}

bool PyTorchCachingPolicy::release_available_cached_blocks(const AllocParams& p) {
  const Bytes max_split = m_config.max_split_size_bytes;
  if (max_split == kUnlimitedSplitSize) {
    return false;  // RA1
  }
  auto& free_set = m_pool.free_set(p.pool);
  const Bytes key_size = std::max(p.size_bytes, max_split);
  auto it = m_pool.lower_bound_free(p.pool, p.stream, key_size, p.private_pool);
  auto same = [&p](const Block& b) { return b.private_pool == p.private_pool && b.stream == p.stream; };
  if (it != free_set.end() && same(*it) && !it->expandable) {
    release_block(it->id);  // RA3: the smallest single block that covers the request
    return true;
  }
  if (it != free_set.end() && same(*it)) {
    refuse_expandable_release_before_2_5("release_available_cached_blocks");
  }
  // RA4: free oversize blocks from the largest down until enough was released.
  if (it == free_set.begin()) {
    return false;
  }
  --it;
  Bytes released = 0;
  while (released < key_size && it->size_bytes >= max_split && same(*it)) {
    const auto cur = it;
    const bool is_first = cur == free_set.begin();
    if (!is_first) {
      --it;
    }
    if (!cur->expandable) {
      released += cur->size_bytes;
      release_block(cur->id);
    } else {
      refuse_expandable_release_before_2_5("release_available_cached_blocks");
    }
    if (is_first) {
      break;
    }
  }
  return released >= key_size;
}

void PyTorchCachingPolicy::release_blocks(PoolKind pool, PrivatePoolIndex private_pool) {
  std::vector<BlockId> to_unmap;
  auto& free_set = m_pool.free_set(pool);
  // The pool's run of the free set (Note [Free-set order]).
  for (auto it = m_pool.lower_bound_free(pool, 0, 0, private_pool);
       it != free_set.end() && it->private_pool == private_pool;) {
    const BlockId id = it->id;
    ++it;  // release_block erases `id` from the set
    const Block& b = m_pool.block(id);
    if (b.expandable) {
      to_unmap.push_back(id);
    } else if (!b.is_split()) {
      release_block(id);
    }
  }
  for (BlockId id : to_unmap) {
    unmap_block(id);
  }
}

void PyTorchCachingPolicy::garbage_collect_cached_blocks() {
  const auto gc_threshold_bytes =
      static_cast<Bytes>(m_config.garbage_collection_threshold * static_cast<double>(m_allowed_bytes));
  if (m_total_allocated_bytes <= gc_threshold_bytes) {
    return;
  }
  const Bytes target = m_total_allocated_bytes - gc_threshold_bytes;
  auto& free_set = m_pool.free_set(PoolKind::kLarge);
  // Whole free segments; expandable ones only before 2.5, where releasing one asserts (RA5).
  const bool skip_expandable = torch_has(m_config.torch_version, TorchRule::kReleaseSkipsExpandable);
  auto gc_candidate = [skip_expandable](const Block& b) {
    return !b.is_split() && !(b.expandable && skip_expandable);
  };
  std::uint64_t total_age = 0;
  std::int64_t freeable = 0;
  for (const auto& key : free_set) {
    const Block& b = m_pool.block(key.id);
    if (b.private_pool != kDefaultPools) {
      break;  // large_blocks only: private pools follow the default ones in the set
    }
    if (gc_candidate(b)) {
      total_age += gc_age(b);
      ++freeable;
    }
  }
  Bytes reclaimed = 0;
  bool block_freed = true;
  while (reclaimed < target && block_freed && freeable > 0) {
    const double age_threshold = static_cast<double>(total_age) / static_cast<double>(freeable);
    block_freed = false;
    for (auto it = free_set.begin(); it != free_set.end();) {
      const BlockId id = it->id;
      ++it;
      const Block& b = m_pool.block(id);
      if (b.private_pool != kDefaultPools) {
        break;
      }
      if (gc_candidate(b) && static_cast<double>(gc_age(b)) >= age_threshold) {
        if (b.expandable) {
          refuse_expandable_release_before_2_5("garbage_collect_cached_blocks");
        }
        block_freed = true;
        reclaimed += b.size_bytes;
        total_age -= gc_age(b);
        --freeable;
        release_block(id);
      }
    }
  }
}

void PyTorchCachingPolicy::refuse_expandable_release_before_2_5(std::string_view where) const {
  // Before pytorch#134338 (2.5) release_available_cached_blocks and garbage_collect_cached_blocks did not
  // skip expandable blocks; release_block's TORCH_INTERNAL_ASSERT(!block->expandable_segment_) then stops
  // the program (spec RA5). No later state exists to model.
  if (!torch_has(m_config.torch_version, TorchRule::kReleaseSkipsExpandable)) {
    throw InputError(fmt::format(
        "PyTorch {}: {} reaches an expandable-segment block and fails an internal assert (fixed in {}: {}); "
        "this run cannot go on under that release",
        m_config.torch_version.text(), where,
        torch_rule_info(TorchRule::kReleaseSkipsExpandable).since.text(),
        torch_rule_info(TorchRule::kReleaseSkipsExpandable).source));
  }
}

// ---- adopting a recorded state ---------------------------------------------------------------------------

std::vector<BlockId> PyTorchCachingPolicy::adopt_segment(Bytes base, PoolKind pool, StreamId stream,
                                                         const std::vector<AdoptedBlock>& blocks,
                                                         MempoolId owner) {
  Bytes total = 0;
  for (const AdoptedBlock& ab : blocks) {
    total += ab.size_bytes;
  }
  const SegmentId sid = add_pool_segment(base, total, pool, stream, false, 0, adopted_pool(owner));
  m_total_allocated_bytes += total;
  std::vector<BlockId> ids;
  BlockId rest = m_pool.segment(sid).first;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const BlockId id = i + 1 < blocks.size() ? m_pool.split_front(rest, blocks[i].size_bytes) : rest;
    Block& b = m_pool.block(id);
    b.requested_bytes = blocks[i].requested_bytes;
    b.allocated = blocks[i].allocated;
    if (!b.allocated) {
      insert_into_blocks(id);
    }
    ids.push_back(id);
  }
  return ids;
}

}  // namespace vramsim
