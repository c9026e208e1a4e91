#include "sim/inference/hf_kv_cache.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "sim/core/error.h"
#include "sim/models/transformer_parts.h"
#include "sim/inference/vllm_paged_cache.h"

namespace vramsim {
namespace {

class DynamicCache final : public KvCache {
 public:
  explicit DynamicCache(int layers) {
    m_keys.assign(static_cast<std::size_t>(layers), kNoVar);
    m_values.assign(static_cast<std::size_t>(layers), kNoVar);
  }
  std::int64_t key_length(std::int64_t s) const override { return m_past + s; }
  bool returns_contiguous() const override { return m_past > 0; }  // cat outputs; the first states as made
  bool needs_mask() const override { return false; }

  std::pair<VarId, VarId> update(EmitContext& ctx, int layer, VarId k, VarId v) override {
    EagerTape& t = ctx.ops.tape();
    VarId& key = m_keys[static_cast<std::size_t>(layer)];
    VarId& value = m_values[static_cast<std::size_t>(layer)];
    if (key == kNoVar) {  // self.key_cache.append(key_states)
      key = k;
      value = v;
      t.set_category(key, TensorCategory::kKvCache);
      t.set_category(value, TensorCategory::kKvCache);  // v_proj's output, of which value_states is a view
    } else {  // self.key_cache[layer_idx] = torch.cat([self.key_cache[layer_idx], key_states], dim=-2)
      const std::string n = layer_name(layer, "kv_cache");
      const VarId nk = ctx.ops.cat_dim(n + ".cat_key", key, k, 2);
      const VarId nv = ctx.ops.cat_dim(n + ".cat_value", value, v, 2);
      t.drop({key, value, k, v});
      key = nk;
      value = nv;
      t.set_category(key, TensorCategory::kKvCache);
      t.set_category(value, TensorCategory::kKvCache);
    }
    t.hold(key);
    t.hold(value);
    return {key, value};
  }

  void release(EagerTape& tape) override {
    for (std::size_t l = 0; l < m_keys.size(); ++l) {
      if (m_keys[l] != kNoVar) {
        tape.drop({m_keys[l], m_values[l]});
        m_keys[l] = m_values[l] = kNoVar;
      }
    }
  }
};

class StaticCache final : public KvCache {
 public:
  StaticCache(EagerTape& tape, int layers, std::int64_t batch, std::int64_t kv_heads, std::int64_t head_dim,
              std::int64_t max_cache_len, DType dtype)
      : m_max(max_cache_len) {
    // StaticCache.__init__ (lazy in newer versions, at the first update: the same sizes before the prefill's
    // first attention): torch.zeros for keys and values of every layer
    for (int l = 0; l < layers; ++l) {
      tape.set_layer(l);
      const Shape shape{batch, kv_heads, max_cache_len, head_dim};
      m_keys.push_back(tape.constant(layer_name(l, "static_cache.key"), "zeros", shape, dtype));
      m_values.push_back(tape.constant(layer_name(l, "static_cache.value"), "zeros", shape, dtype));
      tape.set_category(m_keys.back(), TensorCategory::kKvCache);
      tape.set_category(m_values.back(), TensorCategory::kKvCache);
    }
    tape.set_layer(-1);
  }
  std::int64_t key_length(std::int64_t) const override { return m_max; }
  bool returns_contiguous() const override { return true; }
  bool needs_mask() const override { return true; }

  std::pair<VarId, VarId> update(EmitContext& ctx, int layer, VarId k, VarId v) override {
    EagerTape& t = ctx.ops.tape();
    // k_out.index_copy_(2, cache_position, key_states): in place; the states go with the caller's variables
    t.drop({k, v});
    const VarId key = m_keys[static_cast<std::size_t>(layer)];
    const VarId value = m_values[static_cast<std::size_t>(layer)];
    t.hold(key);
    t.hold(value);
    return {key, value};
  }

  void release(EagerTape& tape) override {
    for (std::size_t l = 0; l < m_keys.size(); ++l) {
      tape.drop({m_keys[l], m_values[l]});
    }
    m_keys.clear();
    m_values.clear();
  }

 private:
  std::int64_t m_max;
};

}  // namespace

Bytes KvCache::bytes(const EagerTape& tape) const {
  Bytes total = 0;
  for (std::size_t l = 0; l < m_keys.size(); ++l) {
    for (VarId x : {m_keys[l], m_values[l]}) {
      if (x != kNoVar) {
        total += static_cast<Bytes>(numel(tape.shape(x))) * dtype_size_bytes(tape.dtype(x));
      }
    }
  }
  return total;
}

std::vector<std::string_view> kv_cache_names() { return {"dynamic", "static", "paged"}; }

std::unique_ptr<KvCache> make_kv_cache(std::string_view kind, EagerTape& tape, int layers, std::int64_t batch,
                                       std::int64_t kv_heads, std::int64_t head_dim,
                                       std::int64_t max_cache_len, DType dtype, std::int64_t block_size,
                                       std::int64_t num_blocks) {
  if (kind == "dynamic") {
    return std::make_unique<DynamicCache>(layers);
  }
  if (kind == "static") {
    return std::make_unique<StaticCache>(tape, layers, batch, kv_heads, head_dim, max_cache_len, dtype);
  }
  if (kind == "paged") {
    return make_vllm_paged_cache(tape, layers, kv_heads, head_dim, block_size, num_blocks, dtype);
  }
  throw InputError(
      fmt::format("--kv-cache: unknown cache '{}' (known: {})", kind, fmt::join(kv_cache_names(), ", ")));
}

}  // namespace vramsim
