#include "sim/inference/vllm_kv_cache_groups.h"

#include <algorithm>

#include "sim/core/assert.h"
#include "sim/core/checked_size.h"

namespace vramsim {
namespace {

std::int64_t cdiv(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

Bytes mul(Bytes a, Bytes b) { return size_mul(a, b, "vLLM KV cache"); }

std::int64_t pages_per_request(const VllmKvCacheGroups& g, const VllmKvCacheLimits& k, std::int64_t len) {
  std::int64_t pages = 0;
  for (const VllmKvCacheGroup& group : g.groups) {
    pages += vllm_group_pages_per_request(group, k, len);
  }
  return pages;
}

}  // namespace

VllmKvCacheGroups vllm_kv_cache_groups(const std::vector<std::int64_t>& windows) {
  std::vector<VllmLayerKvSpec> specs;
  specs.reserve(windows.size());
  for (const std::int64_t w : windows) {
    specs.push_back({w, 0});
  }
  return vllm_kv_cache_groups(specs);
}

VllmKvCacheGroups vllm_kv_cache_groups(const std::vector<VllmLayerKvSpec>& specs) {
  SIM_ASSERT(!specs.empty());
  // same_type_layers: the layers of each spec, specs in the order of their first layer.
  std::vector<VllmKvCacheGroup> by_spec;
  for (std::size_t l = 0; l < specs.size(); ++l) {
    auto it = std::find_if(by_spec.begin(), by_spec.end(),
                           [&](const VllmKvCacheGroup& s) { return s.spec() == specs[l]; });
    if (it == by_spec.end()) {
      by_spec.push_back({specs[l].sliding_window, {}, specs[l].attention_chunk_size});
      it = by_spec.end() - 1;
    }
    it->layers.push_back(static_cast<std::int64_t>(l));
  }
  VllmKvCacheGroups out;
  if (by_spec.size() == 1) {  // _get_kv_cache_groups_uniform_spec
    out.group_size = static_cast<std::int64_t>(specs.size());
    out.groups = std::move(by_spec);
    return out;
  }
  std::int64_t fewest = static_cast<std::int64_t>(specs.size());
  std::int64_t most = 0;
  for (const VllmKvCacheGroup& s : by_spec) {
    fewest = std::min(fewest, static_cast<std::int64_t>(s.layers.size()));
    most = std::max(most, static_cast<std::int64_t>(s.layers.size()));
  }
  // max_num_layers < min_num_layers * 1.5, in integers: 2 x most < 3 x fewest.
  out.group_size = 2 * most < 3 * fewest ? most : fewest;
  for (const VllmKvCacheGroup& s : by_spec) {
    const auto n = static_cast<std::int64_t>(s.layers.size());
    const std::int64_t num_groups = cdiv(n, out.group_size);
    out.padding_layers += num_groups * out.group_size - n;
    for (std::int64_t i = 0; i < num_groups; ++i) {  // layers[i::num_groups]
      VllmKvCacheGroup group{s.sliding_window, {}, s.attention_chunk_size};
      for (std::int64_t j = i; j < n; j += num_groups) {
        group.layers.push_back(s.layers[static_cast<std::size_t>(j)]);
      }
      out.groups.push_back(std::move(group));
    }
  }
  return out;
}

VllmKvCacheGroups vllm_project_kv_cache_groups(const VllmKvCacheGroups& g, std::int64_t start,
                                               std::int64_t end) {
  VllmKvCacheGroups out;
  out.group_size = 0;
  for (const VllmKvCacheGroup& group : g.groups) {
    VllmKvCacheGroup kept{group.sliding_window, {}, group.attention_chunk_size};
    std::copy_if(group.layers.begin(), group.layers.end(), std::back_inserter(kept.layers),
                 [&](std::int64_t l) { return l >= start && l < end; });
    // get_kv_cache_config_from_groups: group_size = max(len(group.layer_names)) over this worker's groups.
    out.group_size = std::max(out.group_size, static_cast<std::int64_t>(kept.layers.size()));
    out.groups.push_back(std::move(kept));
  }
  for (const VllmKvCacheGroup& group : out.groups) {
    out.padding_layers += out.group_size - static_cast<std::int64_t>(group.layers.size());
  }
  return out;
}

Bytes vllm_v1_mla_page_size_bytes(std::int64_t block_size, std::int64_t latent_dim, Bytes kv_dtype_bytes) {
  return mul(mul(static_cast<Bytes>(block_size), static_cast<Bytes>(latent_dim)), kv_dtype_bytes);
}

std::int64_t vllm_group_pages_per_request(const VllmKvCacheGroup& group, const VllmKvCacheLimits& k,
                                          std::int64_t max_model_len) {
  SIM_ASSERT(k.block_size > 0 && max_model_len > 0);
  if (group.attention_chunk_size > 0) {
    // ChunkedLocalAttentionSpec.max_admission_blocks_per_request: during chunked prefill at most one chunk
    // window of computed tokens plus the newly scheduled ones, at most max_model_len
    return cdiv(std::min(group.attention_chunk_size + k.max_num_batched_tokens, max_model_len), k.block_size);
  }
  if (group.sliding_window <= 0) {
    return cdiv(max_model_len, k.block_size);  // FullAttentionSpec.max_memory_usage_bytes
  }
  // SlidingWindowSpec.max_memory_usage_bytes: the last sliding_window - 1 computed tokens plus the newly
  // scheduled ones, at most max_model_len, + 1 block for a window that does not start at a block's start.
  const std::int64_t tokens = std::min(group.sliding_window - 1 + k.max_num_batched_tokens, max_model_len);
  return cdiv(tokens, k.block_size) + 1;
}

std::int64_t vllm_kv_cache_num_blocks(const VllmKvCacheGroups& g, std::int64_t available_bytes,
                                      Bytes page_size) {
  SIM_ASSERT(page_size > 0);
  if (available_bytes <= 0 || g.group_size <= 0) {
    return 0;
  }
  return static_cast<std::int64_t>(static_cast<Bytes>(available_bytes) / page_size /
                                   static_cast<Bytes>(g.group_size));
}

std::int64_t vllm_kv_cache_tokens(const VllmKvCacheGroups& g, std::int64_t num_blocks,
                                  std::int64_t block_size) {
  SIM_ASSERT(!g.groups.empty());
  return num_blocks / static_cast<std::int64_t>(g.groups.size()) * block_size;
}

double vllm_kv_cache_max_concurrency(const VllmKvCacheGroups& g, std::int64_t num_blocks,
                                     const VllmKvCacheLimits& k) {
  return static_cast<double>(num_blocks) / static_cast<double>(pages_per_request(g, k, k.max_model_len));
}

Bytes vllm_kv_cache_request_bytes(const VllmKvCacheGroups& g, const VllmKvCacheLimits& k,
                                  std::int64_t max_model_len) {
  return mul(mul(static_cast<Bytes>(g.group_size), k.page_size_bytes),
             static_cast<Bytes>(pages_per_request(g, k, max_model_len)));
}

std::int64_t vllm_kv_cache_estimate_max_model_len(const VllmKvCacheGroups& g, const VllmKvCacheLimits& k,
                                                  std::int64_t available_bytes) {
  const auto fits = [&](std::int64_t len) {
    return available_bytes > 0 &&
           vllm_kv_cache_request_bytes(g, k, len) <= static_cast<Bytes>(available_bytes);
  };
  if (!fits(1)) {
    return 0;
  }
  std::int64_t left = 1;
  std::int64_t right = k.max_model_len;
  std::int64_t result = 1;
  while (left <= right) {
    const std::int64_t mid = left + (right - left) / 2;
    if (fits(mid)) {
      result = mid;
      left = mid + 1;
    } else {
      right = mid - 1;
    }
  }
  return result;
}

}  // namespace vramsim
