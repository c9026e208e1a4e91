// vLLM V1's KV-cache manager for models whose layers do not all cache the same way: sliding-window layers
// beside full-attention ones (gemma2, gemma3, gpt_oss), a window on every layer (Mistral-7B-v0.1,
// starcoder2), chunked local attention beside full attention (llama4: ChunkedLocalAttentionSpec on the RoPE
// layers), and multi-head latent attention's one latent a token (deepseek_v3). The arithmetic of
// vllm/v1/core/kv_cache_utils.py and vllm/v1/kv_cache_interface.py (vLLM 0.10 to 0.19 and main at 001cabc):
//
//   page_size_bytes           AttentionSpec: 2 x block_size x kv_heads x head_size x dtype bytes (keys and
//                             values); MLAAttentionSpec: block_size x 1 x (kv_lora_rank + qk_rope_head_dim) x
//                             dtype bytes (one latent and one rotary key a token, num_kv_heads 1, the same on
//                             every tensor-parallel rank: the latent is not split by heads)
//   max_memory_usage_bytes    FullAttentionSpec: cdiv(max_model_len, block_size) pages; SlidingWindowSpec:
//                             cdiv(min(sliding_window - 1 + max_num_batched_tokens, max_model_len),
//                             block_size)
//                             + 1 pages (the window need not start at a block's start);
//                             ChunkedLocalAttentionSpec: cdiv(min(attention_chunk_size +
//                             max_num_batched_tokens, max_model_len), block_size) pages (one chunk window
//                             plus the newly scheduled tokens; max_admission_blocks_per_request)
//   get_kv_cache_groups       one spec on every layer: one group of all layers (_get_kv_cache_groups_uniform_
//                             spec); several (same page size): _get_kv_cache_groups_uniform_page_size groups
//                             each spec's layers into groups of group_size layers, group_size the fewest
//                             layers of a spec (the most when it is under 1.5 x the fewest), the last group
//                             of a spec padded, layers[i::num_groups] to the i-th group
//   get_kv_cache_config_      group_size tensors, each shared by one layer of every group:
//     from_groups             num_blocks = available // page_size // group_size (get_num_blocks)
//   _report_kv_cache_config   "GPU KV cache size": num_blocks // len(groups) x block_size tokens
//   get_max_concurrency_for_  num_blocks / sum over groups of cdiv(max_memory_usage_bytes, page_size)
//     kv_cache_config
//   _max_memory_usage_bytes_  what one max_model_len request needs: group_size x page_size x the same sum
//     from_groups             (_check_enough_kv_cache_memory); _estimate_max_model_len_from_groups: the
//                             longest length for which it fits (binary search)
//
// With pipeline parallelism the groups are made from the whole model and each stage keeps its own layers of
// every group (_project_kv_cache_groups_to_worker). All sizes in bytes of one GPU.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/core/types.h"

namespace vramsim {

// One decoder layer's KV-cache spec, as far as the groups and the pages a request needs depend on it.
struct VllmLayerKvSpec {
  std::int64_t sliding_window = 0;        // SlidingWindowSpec's window (0: none)
  std::int64_t attention_chunk_size = 0;  // ChunkedLocalAttentionSpec's chunk (0: none)
  bool operator==(const VllmLayerKvSpec&) const = default;
};

struct VllmKvCacheGroup {
  std::int64_t sliding_window = 0;        // 0: full attention (FullAttentionSpec, MLAAttentionSpec)
  std::vector<std::int64_t> layers;       // decoder layer indices, in order (fewer than group_size: padding)
  std::int64_t attention_chunk_size = 0;  // ChunkedLocalAttentionSpec (llama4's RoPE layers); 0: none
  VllmLayerKvSpec spec() const { return {sliding_window, attention_chunk_size}; }
  bool full_attention() const { return sliding_window == 0 && attention_chunk_size == 0; }
};

struct VllmKvCacheGroups {
  std::vector<VllmKvCacheGroup> groups;
  std::int64_t group_size = 0;      // layers a group holds: the pool's tensors, num_blocks pages each
  std::int64_t padding_layers = 0;  // group slots no layer fills ("Add N padding layers")
};

// get_kv_cache_groups over the model's decoder layers, `specs[l]` layer l's spec (all zero: full attention);
// every layer's page the same size (true of the model types read here).
VllmKvCacheGroups vllm_kv_cache_groups(const std::vector<VllmLayerKvSpec>& specs);
// The same with sliding windows only: `windows[l]` the sliding window of layer l (0: full attention).
VllmKvCacheGroups vllm_kv_cache_groups(const std::vector<std::int64_t>& windows);

// _project_kv_cache_groups_to_worker: each group keeps its layers in [start, end) (a group may be left
// empty).
VllmKvCacheGroups vllm_project_kv_cache_groups(const VllmKvCacheGroups& g, std::int64_t start,
                                               std::int64_t end);

// MLAAttentionSpec.page_size_bytes: block_size x (kv_lora_rank + qk_rope_head_dim) x dtype bytes.
Bytes vllm_v1_mla_page_size_bytes(std::int64_t block_size, std::int64_t latent_dim, Bytes kv_dtype_bytes);

// The engine settings the KV-cache manager reads.
struct VllmKvCacheLimits {
  std::int64_t block_size = 16;
  std::int64_t max_model_len = 0;
  std::int64_t max_num_batched_tokens = 0;
  Bytes page_size_bytes = 0;
};

// One group's max_memory_usage_bytes in pages: cdiv(spec.max_memory_usage_bytes(max_model_len), page_size).
std::int64_t vllm_group_pages_per_request(const VllmKvCacheGroup& group, const VllmKvCacheLimits& k,
                                          std::int64_t max_model_len);

// get_num_blocks with the stage's groups: available // page_size // group_size (0 when nothing is available).
std::int64_t vllm_kv_cache_num_blocks(const VllmKvCacheGroups& g, std::int64_t available_bytes,
                                      Bytes page_size);

// "GPU KV cache size": num_blocks // number of groups x block_size.
std::int64_t vllm_kv_cache_tokens(const VllmKvCacheGroups& g, std::int64_t num_blocks,
                                  std::int64_t block_size);

// get_max_concurrency_for_kv_cache_config.
double vllm_kv_cache_max_concurrency(const VllmKvCacheGroups& g, std::int64_t num_blocks,
                                     const VllmKvCacheLimits& k);

// _max_memory_usage_bytes_from_groups at `max_model_len`: the bytes one request of that length needs.
Bytes vllm_kv_cache_request_bytes(const VllmKvCacheGroups& g, const VllmKvCacheLimits& k,
                                  std::int64_t max_model_len);

// _estimate_max_model_len_from_groups: the longest length in 1..k.max_model_len whose request fits in
// `available_bytes` (0: not even one token).
std::int64_t vllm_kv_cache_estimate_max_model_len(const VllmKvCacheGroups& g, const VllmKvCacheLimits& k,
                                                  std::int64_t available_bytes);

}  // namespace vramsim
