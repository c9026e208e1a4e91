#include "sim/inference/vllm_paged_cache.h"

#include <cmath>

#include "sim/core/assert.h"
#include "sim/graph/eager_tape.h"
#include "sim/inference/hf_kv_cache.h"
#include "sim/models/transformer_parts.h"

namespace vramsim {
namespace {

class VllmPagedCache final : public KvCache {
 public:
  VllmPagedCache(EagerTape& tape, int layers, std::int64_t kv_heads, std::int64_t head_dim,
                 std::int64_t block_size, std::int64_t num_blocks, DType dtype) {
    if (num_blocks == 0) {
      return;  // profile_run: kv_caches are empty tensors
    }
    // CacheEngine._allocate_kv_cache: torch.zeros(attn_backend.get_kv_cache_shape(...)) per layer
    for (int l = 0; l < layers; ++l) {
      tape.set_layer(l);
      const VarId kv = tape.constant(layer_name(l, "vllm_kv_cache"), "zeros",
                                     {2, num_blocks, block_size, kv_heads, head_dim}, dtype);
      tape.set_category(kv, TensorCategory::kKvCache);
      m_keys.push_back(kv);
      m_values.push_back(kNoVar);  // keys and values share the layer's one tensor
    }
    tape.set_layer(-1);
  }
  std::int64_t key_length(std::int64_t s) const override { return m_past + s; }
  // The attention backends read keys and values where they lie (flash-attn varlen, paged attention).
  bool returns_contiguous() const override { return true; }
  bool needs_mask() const override { return false; }

  std::pair<VarId, VarId> update(EmitContext& ctx, int layer, VarId k, VarId v) override {
    EagerTape& t = ctx.ops.tape();
    // reshape_and_cache writes the new keys and values into their slots in place. The prefill attends to the
    // fresh states themselves; a decode step reads every cached position through the block table.
    if (m_past == 0 || m_keys.empty()) {
      return {k, v};
    }
    const Shape& shape = t.shape(k);
    const Shape cached{shape[0], shape[1], m_past + shape[2], shape[3]};
    t.drop({k, v});
    const VarId cache = m_keys[static_cast<std::size_t>(layer)];
    return {t.view(cache, cached, layer_name(layer, "vllm_kv_cache.keys")),
            t.view(cache, cached, layer_name(layer, "vllm_kv_cache.values"))};
  }

  void release(EagerTape& tape) override {
    for (VarId kv : m_keys) {
      tape.drop(kv);
    }
    m_keys.clear();
    m_values.clear();
  }
};

}  // namespace

Bytes vllm_cache_block_bytes(int layers, std::int64_t kv_heads, std::int64_t head_dim,
                             std::int64_t block_size, DType dtype) {
  return 2 * static_cast<Bytes>(layers) * static_cast<Bytes>(block_size * kv_heads * head_dim) *
         dtype_size_bytes(dtype);
}

std::int64_t vllm_num_gpu_blocks(Bytes total_bytes, double gpu_memory_utilization, Bytes non_kv_cache_bytes,
                                 Bytes block_bytes) {
  SIM_ASSERT(block_bytes > 0);
  // int((total_gpu_memory * gpu_memory_utilization - peak_memory) // cache_block_size), in Python floats
  const double available =
      static_cast<double>(total_bytes) * gpu_memory_utilization - static_cast<double>(non_kv_cache_bytes);
  const double blocks = std::floor(available / static_cast<double>(block_bytes));
  return blocks > 0 ? static_cast<std::int64_t>(blocks) : 0;
}

std::int64_t vllm_blocks_for_tokens(std::int64_t tokens, std::int64_t block_size) {
  SIM_ASSERT(block_size > 0);
  return (tokens + block_size - 1) / block_size;
}

std::unique_ptr<KvCache> make_vllm_paged_cache(EagerTape& tape, int layers, std::int64_t kv_heads,
                                               std::int64_t head_dim, std::int64_t block_size,
                                               std::int64_t num_blocks, DType dtype) {
  return std::make_unique<VllmPagedCache>(tape, layers, kv_heads, head_dim, block_size, num_blocks, dtype);
}

}  // namespace vramsim
