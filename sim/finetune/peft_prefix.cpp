// Prefix tuning (peft_prefix.h).
#include "sim/finetune/peft_prefix.h"

#include "sim/graph/eager_tape.h"
#include "sim/models/model_config.h"
#include "sim/models/transformer_parts.h"
#include "sim/torch/torch_ops.h"

namespace vramsim {
namespace {

// DynamicCache(past_key_values) with the prefix's per-layer views as its first states; update() keeps
// torch.cat([prefix, new], dim=-2) (DynamicLayer.update).
class PrefixCache final : public KvCache {
 public:
  PrefixCache(std::vector<VarId> keys, std::vector<VarId> values, std::int64_t n) {
    m_keys = std::move(keys);
    m_values = std::move(values);
    m_past = n;
  }
  std::int64_t key_length(std::int64_t s) const override { return m_past + s; }
  bool returns_contiguous() const override { return true; }  // cat outputs
  // key length != query length: transformers materialises the mask (sdpa_mask does not skip it)
  bool needs_mask() const override { return true; }
  bool keeps_last_logits() const override { return false; }  // a training forward: every position's logits

  std::pair<VarId, VarId> update(EmitContext& ctx, int layer, VarId k, VarId v) override {
    EagerTape& t = ctx.ops.tape();
    VarId& key = m_keys.at(static_cast<std::size_t>(layer));
    VarId& value = m_values.at(static_cast<std::size_t>(layer));
    const std::string n = layer_name(layer, "past_key_values");
    const VarId nk = ctx.ops.cat_dim(n + ".cat_key", key, k, 2);
    const VarId nv = ctx.ops.cat_dim(n + ".cat_value", value, v, 2);
    t.drop({key, value, k, v});
    key = nk;
    value = nv;
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
};

}  // namespace

std::vector<AdapterTensor> prefix_encoder_tensors(const ModelConfig& model, const LoraOptions& o) {
  const std::int64_t n = o.num_virtual_tokens;
  const std::int64_t token_dim = model.n_kv_heads * model.head_dim;  // PEFT #1901
  const std::int64_t width = model.n_layers * 2 * token_dim;
  if (!o.prefix_projection) {
    return {{"prompt_encoder.default.embedding.weight", {n, width}}};
  }
  const std::int64_t h = o.encoder_hidden_size > 0 ? o.encoder_hidden_size : token_dim;
  return {{"prompt_encoder.default.embedding.weight", {n, token_dim}},
          {"prompt_encoder.default.transform.0.weight", {h, token_dim}},
          {"prompt_encoder.default.transform.0.bias", {h}},
          {"prompt_encoder.default.transform.2.weight", {width, h}},
          {"prompt_encoder.default.transform.2.bias", {width}}};
}

std::unique_ptr<KvCache> make_prefix_cache(TorchOps& ops, const std::vector<VarId>& encoder,
                                           const ModelConfig& model, const LoraOptions& o, std::int64_t batch,
                                           DType model_dtype) {
  EagerTape& t = ops.tape();
  const std::int64_t n = o.num_virtual_tokens;
  const std::int64_t heads = model.n_kv_heads, hd = model.head_dim;
  const std::int64_t layers = model.n_layers;
  // prompt_tokens[:, :n].unsqueeze(0).expand(batch_size, -1).to(device)
  const VarId tokens = t.constant("prompt_tokens.to(device)", "_to_copy", {batch, n}, DType::kInt64);
  VarId kv = ops.embedding("prompt_encoder.embedding", encoder.at(0), tokens);
  t.drop(tokens);
  if (encoder.size() == 5) {  // prefix_projection: transform = Linear, Tanh, Linear
    const VarId h = ops.linear("prompt_encoder.transform.0", kv, encoder.at(1), encoder.at(2));
    t.drop(kv);
    const VarId a = ops.tanh("prompt_encoder.transform.1", h);
    t.drop(h);
    kv = ops.linear("prompt_encoder.transform.2", a, encoder.at(3), encoder.at(4));
    t.drop(a);
  }
  // past_key_values.to(self.base_model_torch_dtype)
  const VarId cast = ops.to("past_key_values.to(base_model_torch_dtype)", kv, model_dtype);
  t.drop(kv);
  // .view(...).permute([2, 0, 3, 1, 4]).split(2): per layer the key and value views (batch, heads, n, hd)
  std::vector<VarId> keys, values;
  for (std::int64_t l = 0; l < layers; ++l) {
    const std::string name = layer_name(static_cast<int>(l), "past_key_values");
    keys.push_back(t.view(cast, {batch, heads, n, hd}, name + ".key"));
    values.push_back(t.view(cast, {batch, heads, n, hd}, name + ".value"));
  }
  t.drop(cast);
  return std::make_unique<PrefixCache>(std::move(keys), std::move(values), n);
}

}  // namespace vramsim
