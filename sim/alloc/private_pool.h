// Private memory pools of PyTorch's caching allocator: the pool a CUDA graph captures into
// (torch.cuda.graph, make_graphed_callables, torch.compile's cudagraph trees) and torch.cuda.MemPool.
//
// Source: c10/cuda/CUDACachingAllocator.cpp (PyTorch main, 2025-26): struct PrivatePool, MempoolId_t,
// DeviceCachingAllocator::create_or_incref_pool / beginAllocateToPool / endAllocateToPool / releasePool /
// release_cached_blocks / try_mempool_fallback, and c10/cuda/MemPool.cpp (MemPool's constructor and
// destructor). The rules the policy follows (sim/alloc/policies/pytorch_caching.h):
//   * a pool is made by its first createOrIncrefPool (MemPool's constructor, or beginAllocateToPool of a
//     graph capture) with use_count 1; each later createOrIncrefPool / beginAllocateToPool adds 1 and each
//     releasePool takes 1 away (graph reset, MemPool's destructor, use_mem_pool's exit);
//   * while captures_underway holds a pool whose filter accepts the request's stream, the request goes to
//     that pool's small/large pair (the last begun wins: nesting is LIFO). The filter of a graph capture is
//     its capturing stream; that of use_mem_pool is the calling thread (every stream, in a one-thread trace);
//   * blocks freed into a private pool stay there, reusable only by requests routed to that pool;
//   * at use_count 0 the pool is "freeable": release_cached_blocks (empty_cache, the OOM retry) may then
//     cudaFree its whole free segments, and drops the pool once it owns no segment;
//   * while any capture or use_mem_pool is under way, the OOM path skips release_cached_blocks and
//     empty_cache() leaves the default pools alone;
//   * a pool with use_on_oom serves, from its free blocks only, a default-pool request that cudaMalloc
//     refused (try_mempool_fallback).
#pragma once

#include <cstdint>
#include <string>

#include <fmt/format.h>

namespace vramsim {

// PyTorch's MempoolId_t: (0, n) for torch.cuda.MemPool and graph_pool_handle(), (n, 0) for a pool a CUDAGraph
// made for itself, (0, 0) for the default pools.
struct MempoolId {
  std::int64_t first = 0;
  std::int64_t second = 0;

  bool is_default() const { return first == 0 && second == 0; }
  bool operator==(const MempoolId&) const = default;
  std::string text() const { return fmt::format("({}, {})", first, second); }
};

struct PrivatePool {
  MempoolId id;
  int use_count = 0;              // graphs / MemPool objects / use_mem_pool contexts holding the pool
  std::size_t segment_count = 0;  // live segments (cudaMalloc'd or expandable reservations) it owns
  bool freeable = false;          // use_count reached 0: graph_pools_freeable
  bool live = false;              // false once dropped (or for index 0, the default pools)
};

}  // namespace vramsim
