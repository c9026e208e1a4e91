#include "sim/graph/model_config.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "sim/core/checked.h"
#include "sim/core/error.h"
#include "sim/core/input_file.h"
#include "sim/graph/layer_code.h"

namespace vramsim {
namespace {

using Shape = std::vector<std::int64_t>;

ModelConfig gpt2_preset(std::string name, std::int64_t d_model, std::int64_t n_layers, std::int64_t n_heads) {
  ModelConfig m;
  m.name = std::move(name);
  m.family = ModelFamily::kGpt2;
  m.vocab_size = 50257;
  m.d_model = d_model;
  m.n_layers = n_layers;
  m.n_heads = n_heads;
  m.n_kv_heads = n_heads;
  m.head_dim = d_model / n_heads;
  m.d_ff = 4 * d_model;
  m.max_positions = 1024;
  m.tied_embeddings = true;
  m.bias = true;
  m.norm = NormKind::kLayerNorm;
  m.mlp = MlpKind::kGelu;
  m.softmax_in_fp32 = false;  // GPT2Attention: softmax in the scores' dtype
  m.model_type = "gpt2";
  return m;
}

ModelConfig llama_preset(std::string name, std::int64_t vocab, std::int64_t d_model, std::int64_t n_layers,
                         std::int64_t n_heads, std::int64_t n_kv_heads, std::int64_t d_ff,
                         std::int64_t max_positions) {
  ModelConfig m;
  m.name = std::move(name);
  m.family = ModelFamily::kLlama;
  m.vocab_size = vocab;
  m.d_model = d_model;
  m.n_layers = n_layers;
  m.n_heads = n_heads;
  m.n_kv_heads = n_kv_heads;
  m.head_dim = d_model / n_heads;
  m.d_ff = d_ff;
  m.max_positions = max_positions;
  m.model_type = "llama";
  return m;
}

ModelConfig mistral_preset() {
  ModelConfig m = llama_preset("mistral-7b", 32000, 4096, 32, 32, 8, 14336, 32768);
  m.model_type = "mistral";
  m.mistral_mask = true;
  return m;
}

ModelConfig cs336_preset(std::string name, std::int64_t d_model, std::int64_t d_ff, std::int64_t n_layers,
                         std::int64_t n_heads, std::int64_t context) {
  ModelConfig m = llama_preset(std::move(name), 10000, d_model, n_layers, n_heads, n_heads, d_ff, context);
  m.code = std::string(kCs336BasicsCode);
  return m;
}

// The preset table: one row per model. Shapes are those of the published checkpoints' config.json.
std::vector<ModelConfig> presets() {
  return {
      gpt2_preset("gpt2", 768, 12, 12),
      gpt2_preset("gpt2-medium", 1024, 24, 16),
      gpt2_preset("gpt2-large", 1280, 36, 20),
      gpt2_preset("gpt2-xl", 1600, 48, 25),
      llama_preset("llama-2-7b", 32000, 4096, 32, 32, 32, 11008, 4096),
      llama_preset("llama-2-13b", 32000, 5120, 40, 40, 40, 13824, 4096),
      llama_preset("llama-2-70b", 32000, 8192, 80, 64, 8, 28672, 4096),
      llama_preset("llama-3-8b", 128256, 4096, 32, 32, 8, 14336, 8192),
      mistral_preset(),
      // TinyLlama/TinyLlama-1.1B (config.json): the Llama-style 1B the dynamic-shape sweep uses.
      llama_preset("tinyllama-1.1b", 32000, 2048, 22, 32, 4, 5632, 2048),
      // The CS336 staff model (cs336-basics) at the assignment's "small" and "2.7B" sizes (its model-size
      // table; the runs in shared/traces/real: MAGMA27 at d768, context 256; kkaitlyn111 at d2560, 128-512).
      cs336_preset("cs336-small", 768, 3072, 12, 12, 256),
      cs336_preset("cs336-2.7b", 2560, 10240, 32, 32, 512),
  };
}

void add(std::vector<ParameterShape>& out, std::string name, Shape shape, int layer = -1) {
  out.push_back(ParameterShape{std::move(name), std::move(shape), layer});
}

void gpt2_shapes(const ModelConfig& m, std::vector<ParameterShape>& out) {
  const std::int64_t d = m.d_model;
  add(out, "transformer.wte.weight", {m.vocab_size, d});
  add(out, "transformer.wpe.weight", {m.max_positions, d});
  for (int l = 0; l < m.n_layers; ++l) {
    const std::string p = fmt::format("transformer.h.{}.", l);
    add(out, p + "ln_1.weight", {d}, l);
    add(out, p + "ln_1.bias", {d}, l);
    // GPT-2's Conv1D stores (in, out); gpt_bigcode's nn.Linear (out, in)
    const auto weight = [&](std::int64_t in, std::int64_t out_features) {
      return m.linear_weights ? Shape{out_features, in} : Shape{in, out_features};
    };
    add(out, p + "attn.c_attn.weight", weight(d, m.q_dim() + 2 * m.kv_dim()), l);
    add(out, p + "attn.c_attn.bias", {m.q_dim() + 2 * m.kv_dim()}, l);
    add(out, p + "attn.c_proj.weight", weight(m.q_dim(), d), l);
    add(out, p + "attn.c_proj.bias", {d}, l);
    add(out, p + "ln_2.weight", {d}, l);
    add(out, p + "ln_2.bias", {d}, l);
    add(out, p + "mlp.c_fc.weight", weight(d, m.d_ff), l);
    add(out, p + "mlp.c_fc.bias", {m.d_ff}, l);
    add(out, p + "mlp.c_proj.weight", weight(m.d_ff, d), l);
    add(out, p + "mlp.c_proj.bias", {d}, l);
  }
  add(out, "transformer.ln_f.weight", {d});
  add(out, "transformer.ln_f.bias", {d});
  if (!m.tied_embeddings) {
    add(out, "lm_head.weight", {m.vocab_size, d});
  }
}

// A gated MLP's three projections (LlamaMLP, MixtralBlockSparseTop2MLP's w1 / w2 / w3, Phi3MLP's fused
// gate_up_proj), in registration order.
void gated_mlp_shapes(std::vector<ParameterShape>& out, const std::string& p, std::int64_t d, std::int64_t ff,
                      int layer, bool bias, bool fused, bool mixtral_names) {
  if (mixtral_names) {
    add(out, p + "w1.weight", {ff, d}, layer);
    add(out, p + "w2.weight", {d, ff}, layer);
    add(out, p + "w3.weight", {ff, d}, layer);
    return;
  }
  if (fused) {
    add(out, p + "gate_up_proj.weight", {2 * ff, d}, layer);
    add(out, p + "down_proj.weight", {d, ff}, layer);
    return;
  }
  add(out, p + "gate_proj.weight", {ff, d}, layer);
  add(out, p + "up_proj.weight", {ff, d}, layer);
  add(out, p + "down_proj.weight", {d, ff}, layer);
  if (bias) {
    add(out, p + "gate_proj.bias", {ff}, layer);
    add(out, p + "up_proj.bias", {ff}, layer);
    add(out, p + "down_proj.bias", {d}, layer);
  }
}

void attention_shapes(const ModelConfig& m, std::vector<ParameterShape>& out, const std::string& p, int l) {
  const std::int64_t d = m.d_model;
  if (m.fused_qkv) {  // Phi3Attention registers o_proj before qkv_proj
    add(out, p + "self_attn.o_proj.weight", {d, m.q_dim()}, l);
    add(out, p + "self_attn.qkv_proj.weight", {m.q_dim() + 2 * m.kv_dim(), d}, l);
    return;
  }
  const bool qkv_bias = m.qkv_bias || m.bias;
  add(out, p + "self_attn.q_proj.weight", {m.q_dim(), d}, l);
  if (qkv_bias) {
    add(out, p + "self_attn.q_proj.bias", {m.q_dim()}, l);
  }
  add(out, p + "self_attn.k_proj.weight", {m.kv_dim(), d}, l);
  if (qkv_bias) {
    add(out, p + "self_attn.k_proj.bias", {m.kv_dim()}, l);
  }
  add(out, p + "self_attn.v_proj.weight", {m.kv_dim(), d}, l);
  if (qkv_bias) {
    add(out, p + "self_attn.v_proj.bias", {m.kv_dim()}, l);
  }
  add(out, p + "self_attn.o_proj.weight", {d, m.q_dim()}, l);
  if (m.bias) {
    add(out, p + "self_attn.o_proj.bias", {d}, l);
  }
}

// The feed-forward part of layer l: a gated MLP, or a sparse MoE block (Mixtral's block_sparse_moe: gate,
// experts; Qwen2-MoE's mlp: gate, experts, shared_expert, shared_expert_gate).
void feed_forward_shapes(const ModelConfig& m, std::vector<ParameterShape>& out, const std::string& p,
                         int l) {
  const std::int64_t d = m.d_model;
  if (!m.moe.sparse(l)) {
    gated_mlp_shapes(out, p + "mlp.", d, m.d_ff, l, m.bias, m.fused_gate_up, false);
    return;
  }
  const bool mixtral = m.model_type == "mixtral";
  const std::string block = p + (mixtral ? "block_sparse_moe." : "mlp.");
  add(out, block + "gate.weight", {m.moe.n_experts, d}, l);
  for (std::int64_t e = 0; e < m.moe.n_experts; ++e) {
    gated_mlp_shapes(out, fmt::format("{}experts.{}.", block, e), d, m.moe.expert_d_ff, l, false, false,
                     mixtral);
  }
  if (m.moe.shared_expert_d_ff > 0) {
    gated_mlp_shapes(out, block + "shared_expert.", d, m.moe.shared_expert_d_ff, l, false, false, false);
    add(out, block + "shared_expert_gate.weight", {1, d}, l);
  }
}

// LlamaDecoderLayer and its descendants register self_attn, mlp, then the norms.
void llama_shapes(const ModelConfig& m, std::vector<ParameterShape>& out) {
  const std::int64_t d = m.d_model;
  add(out, "model.embed_tokens.weight", {m.vocab_size, d});
  for (int l = 0; l < m.n_layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    attention_shapes(m, out, p, l);
    feed_forward_shapes(m, out, p, l);
    add(out, p + "input_layernorm.weight", {d}, l);
    add(out, p + "post_attention_layernorm.weight", {d}, l);
    if (m.sandwich_norms) {
      add(out, p + "pre_feedforward_layernorm.weight", {d}, l);
      add(out, p + "post_feedforward_layernorm.weight", {d}, l);
    }
  }
  add(out, "model.norm.weight", {d});
  if (!m.tied_embeddings) {
    add(out, "lm_head.weight", {m.vocab_size, d});
  }
}

}  // namespace

bool MoeConfig::sparse(std::int64_t layer) const {
  return n_experts > 0 && (layer + 1) % sparse_step == 0 &&
         std::find(dense_layers.begin(), dense_layers.end(), layer) == dense_layers.end();
}

std::int64_t ParameterShape::numel() const {
  std::int64_t n = 1;
  for (const std::int64_t d : shape) {
    const std::optional<std::int64_t> product = checked_mul(n, d);
    if (!product) {
      throw InputError(
          fmt::format("parameter '{}' of shape [{}] has more elements than fit in 64 bits: check "
                      "the model's dimensions",
                      name, fmt::join(shape, ", ")));
    }
    n = *product;
  }
  return n;
}

void transformers_parameter_shapes(const ModelConfig& m, std::vector<ParameterShape>& out) {
  if (m.family == ModelFamily::kGpt2) {
    gpt2_shapes(m, out);
  } else {
    llama_shapes(m, out);
  }
}

std::vector<ParameterShape> ModelConfig::parameter_shapes() const {
  std::vector<ParameterShape> out;
  layer_code(code).parameter_shapes(*this, out);
  return out;
}

std::int64_t ModelConfig::parameter_count() const {
  std::int64_t n = 0;
  for (const ParameterShape& p : parameter_shapes()) {
    n += p.numel();
  }
  return n;
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const ModelConfig& m : presets()) {
    names.push_back(m.name);
  }
  return names;
}

ModelConfig model_preset(std::string_view name) {
  for (ModelConfig& m : presets()) {
    if (m.name == name) {
      return m;
    }
  }
  throw InputError(fmt::format("--model: unknown model '{}' (presets: {}; or a path to a config.json)", name,
                               fmt::join(model_preset_names(), ", ")));
}

ModelConfig load_model(const std::string& name_or_path) {
  for (const std::string& preset : model_preset_names()) {
    if (preset == name_or_path) {
      return model_preset(name_or_path);
    }
  }
  const bool looks_like_path = name_or_path.find('/') != std::string::npos || name_or_path.ends_with(".json");
  if (!looks_like_path) {
    return model_preset(name_or_path);  // throws the "unknown model" message
  }
  return model_from_hf_config_json(read_input_file(name_or_path, "model config file", kMaxSmallInputBytes),
                                   name_or_path);
}

}  // namespace vramsim
