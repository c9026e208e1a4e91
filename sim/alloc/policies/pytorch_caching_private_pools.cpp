// Private pools of the native policy: CUDA-graph pools and torch.cuda.MemPool (rules in
// sim/alloc/private_pool.h). Same class as pytorch_caching.cpp; a file of its own because it is a concept of
// its own. Function names and messages are PyTorch's (c10/cuda/CUDACachingAllocator.cpp,
// DeviceCachingAllocator).
#include <algorithm>

#include <fmt/format.h>

#include "sim/alloc/policies/pytorch_caching.h"
#include "sim/core/assert.h"
#include "sim/core/error.h"

namespace vramsim {

PrivatePoolIndex PyTorchCachingPolicy::find_pool(MempoolId id) const {
  for (PrivatePoolIndex i = 1; i < m_private_pools.size(); ++i) {
    if (m_private_pools[i].live && m_private_pools[i].id == id) {
      return i;
    }
  }
  return kDefaultPools;
}

void PyTorchCachingPolicy::create_or_incref_pool(MempoolId id) {
  if (id.is_default()) {
    throw InputError("createOrIncrefPool: mempool id (0, 0) names the default pools, not a private pool");
  }
  if (const PrivatePoolIndex i = find_pool(id); i != kDefaultPools) {
    // An existing pool is shared: it must still be held (TORCH_INTERNAL_ASSERT(use_count > 0)).
    PrivatePool& pool = m_private_pools[i];
    if (pool.use_count == 0) {
      throw InputError(
          fmt::format("mempool {} was released by every holder; it cannot be used again", id.text()));
    }
    ++pool.use_count;
    return;
  }
  m_private_pools.push_back(PrivatePool{id, 1, 0, false, true});
}

void PyTorchCachingPolicy::begin_allocate_to_pool(MempoolId id, std::optional<StreamId> stream) {
  create_or_incref_pool(id);
  const PrivatePoolIndex index = find_pool(id);
  for (const auto& capture : m_captures_underway) {
    if (capture.first == index) {
      throw InputError(fmt::format("beginAllocateToPool: already recording to mempool_id {}", id.text()));
    }
  }
  m_captures_underway.emplace_back(index, stream);
}

void PyTorchCachingPolicy::end_allocate_to_pool(MempoolId id) {
  const PrivatePoolIndex index = find_pool(id);
  for (auto it = m_captures_underway.begin(); it != m_captures_underway.end(); ++it) {
    if (index != kDefaultPools && it->first == index) {
      m_captures_underway.erase(it);
      return;
    }
  }
  throw InputError(fmt::format("endAllocatePool: not currently recording to mempool_id {}", id.text()));
}

void PyTorchCachingPolicy::release_pool(MempoolId id) {
  const PrivatePoolIndex index = find_pool(id);
  if (index == kDefaultPools || m_private_pools[index].use_count == 0) {
    throw InputError(fmt::format("releasePool: mempool {} is not held by anyone", id.text()));
  }
  PrivatePool& pool = m_private_pools[index];
  if (--pool.use_count == 0) {
    pool.freeable = true;  // graph_pools_freeable: release_cached_blocks may now cudaFree its segments
  }
}

void PyTorchCachingPolicy::set_use_on_oom(MempoolId id, bool use_on_oom) {
  if (use_on_oom && !torch_has(m_config.torch_version, TorchRule::kMemPoolUseOnOom)) {
    const TorchRuleInfo& info = torch_rule_info(TorchRule::kMemPoolUseOnOom);
    throw InputError(
        fmt::format("setUseOnOOM: PyTorch {} has no MemPool(use_on_oom=True) (it arrived in {}: {})",
                    m_config.torch_version.text(), info.since.text(), info.source));
  }
  const PrivatePoolIndex index = find_pool(id);
  if (index == kDefaultPools) {
    throw InputError(fmt::format("setUseOnOOM: no mempool {}", id.text()));
  }
  std::erase(m_use_on_oom, index);
  if (use_on_oom) {
    m_use_on_oom.push_back(index);
  }
}

std::optional<int> PyTorchCachingPolicy::pool_use_count(MempoolId id) const {
  const PrivatePoolIndex index = find_pool(id);
  if (index == kDefaultPools) {
    return std::nullopt;
  }
  return m_private_pools[index].use_count;
}

PrivatePoolIndex PyTorchCachingPolicy::adopted_pool(MempoolId owner) {
  if (owner.is_default()) {
    return kDefaultPools;
  }
  if (find_pool(owner) == kDefaultPools) {
    m_private_pools.push_back(PrivatePool{owner, 1, 0, false, true});
  }
  return find_pool(owner);
}

// get_pool's private half: the last begun capture whose filter accepts the stream (LIFO).
PrivatePoolIndex PyTorchCachingPolicy::get_private_pool(StreamId stream) const {
  for (auto it = m_captures_underway.rbegin(); it != m_captures_underway.rend(); ++it) {
    if (!it->second || *it->second == stream) {
      return it->first;
    }
  }
  return kDefaultPools;
}

SegmentId PyTorchCachingPolicy::add_pool_segment(Bytes base, Bytes size_bytes, PoolKind pool, StreamId stream,
                                                 bool expandable, Bytes page_bytes,
                                                 PrivatePoolIndex private_pool) {
  if (private_pool != kDefaultPools) {
    ++m_private_pools[private_pool].segment_count;  // PrivatePool::cudaMalloc_count
  }
  return m_pool.add_segment(base, size_bytes, pool, stream, expandable, page_bytes, private_pool);
}

void PyTorchCachingPolicy::remove_pool_segment(SegmentId sid) {
  const PrivatePoolIndex private_pool = m_pool.segment(sid).private_pool;
  if (private_pool != kDefaultPools) {
    SIM_ASSERT(m_private_pools[private_pool].segment_count > 0);
    --m_private_pools[private_pool].segment_count;
  }
  m_pool.remove_segment(sid);
}

// try_mempool_fallback: a default-pool request that cudaMalloc refused takes a free block of a use_on_oom
// pool (its cached blocks only: no cudaMalloc for it), first pool that has one wins.
bool PyTorchCachingPolicy::try_mempool_fallback(AllocParams& p) {
  if (p.private_pool != kDefaultPools) {
    return false;  // "if already trying to use a mempool, then just oom"
  }
  for (PrivatePoolIndex index : m_use_on_oom) {
    AllocParams q = p;
    q.private_pool = index;
    if (get_free_block(q)) {
      p = q;
      return true;
    }
  }
  return false;
}

// release_cached_blocks(context, mempool_id): with (0, 0) and no capture under way, the default pools after
// every pending stream event; then every freeable private pool (only `id`'s when `id` is a private pool):
// its whole free segments are cudaFreed, and it is dropped once it owns none.
bool PyTorchCachingPolicy::release_cached_blocks(MempoolId id) {
  if (id.is_default() && m_captures_underway.empty()) {
    synchronize_and_free_events();
    m_events.on_sync_all_streams();
    release_blocks(PoolKind::kLarge, kDefaultPools);
    release_blocks(PoolKind::kSmall, kDefaultPools);
  }
  for (PrivatePoolIndex i = 1; i < m_private_pools.size(); ++i) {
    PrivatePool& pool = m_private_pools[i];
    if (!pool.live || !pool.freeable) {
      continue;
    }
    if (!id.is_default()) {
      if (!(pool.id == id)) {
        continue;
      }
      synchronize_and_free_events(i);
    }
    release_blocks(PoolKind::kSmall, i);
    release_blocks(PoolKind::kLarge, i);
    if (pool.segment_count == 0) {
      pool.live = false;  // graph_pools.erase: the id may be made again
      std::erase(m_use_on_oom, i);
    }
  }
  return true;
}

}  // namespace vramsim
