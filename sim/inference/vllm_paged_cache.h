// vLLM's paged KV cache (PagedAttention), as the v0 engine sizes and holds it: the worker loads the weights,
// runs one profiling forward of max_num_batched_tokens dummy tokens, and gives the KV cache what is left of
// gpu_memory_utilization x total memory (Worker.determine_num_available_blocks):
//
//   num_gpu_blocks = floor((total x gpu_memory_utilization - peak torch allocated - non-torch) / block bytes)
//   block bytes    = 2 (keys, values) x layers x block_size x kv_heads x head_dim x dtype bytes
//                    (CacheEngine.get_cache_block_size)
//
// The cache is then allocated once, one (2, num_gpu_blocks, block_size, kv_heads, head_dim) tensor per layer
// (CacheEngine._allocate_kv_cache, v0 layout), written in place by reshape_and_cache and never grown. A
// sequence of n cached tokens holds ceil(n / block_size) blocks; how many sequences fit at once is the
// block count divided by that. The sizing arithmetic is here, pure; the profile run is predict's (it needs
// the allocator model).
//
// Sources: vllm/worker/worker.py, vllm/worker/cache_engine.py, vllm/config.py (CacheConfig block_size 16,
// gpu_memory_utilization 0.9; SchedulerConfig max_num_seqs 256, max_num_batched_tokens max(max_model_len,
// 2048) without chunked prefill), vllm/worker/model_runner.py profile_run.
#pragma once

#include <cstdint>
#include <memory>

#include "sim/core/types.h"
#include "sim/graph/dtype.h"

namespace vramsim {

class EagerTape;
class KvCache;

// vLLM's default without chunked prefill: max(max_model_len, 2048) (_DEFAULT_MAX_NUM_BATCHED_TOKENS).
inline constexpr std::int64_t kVllmMinBatchedTokens = 2048;
inline constexpr std::int64_t kVllmDefaultMaxNumSeqs = 256;

// Bytes of one block of every layer's keys and values (CacheEngine.get_cache_block_size).
Bytes vllm_cache_block_bytes(int layers, std::int64_t kv_heads, std::int64_t head_dim,
                             std::int64_t block_size, DType dtype);

// floor((total x utilization - non_kv_cache_bytes) / block_bytes), at least 0; non_kv_cache_bytes is the
// profile run's peak torch allocation (weights included) plus non-torch memory.
std::int64_t vllm_num_gpu_blocks(Bytes total_bytes, double gpu_memory_utilization, Bytes non_kv_cache_bytes,
                                 Bytes block_bytes);

// Blocks a sequence of `tokens` cached positions holds: ceil(tokens / block_size).
std::int64_t vllm_blocks_for_tokens(std::int64_t tokens, std::int64_t block_size);

// The cache on the tape: one (2, num_blocks, block_size, kv_heads, head_dim) tensor per layer, created now
// (none with num_blocks 0: the profile run's empty caches). Attention reads the fresh keys and values in the
// prefill and the cache in place when decoding; nothing is copied or concatenated.
std::unique_ptr<KvCache> make_vllm_paged_cache(EagerTape& tape, int layers, std::int64_t kv_heads,
                                               std::int64_t head_dim, std::int64_t block_size,
                                               std::int64_t num_blocks, DType dtype);

}  // namespace vramsim
