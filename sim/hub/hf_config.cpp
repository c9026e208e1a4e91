// Hugging Face config.json -> ModelConfig: one reader per model_type, named after transformers'
// configuration_<model_type>.py, whose class defaults fill the optional keys. The keys that fix tensor shapes
// (hidden size, layers, heads, vocabulary, ...) are required: a config.json without them is not one a
// checkpoint ships, and guessing a shape would make every figure wrong.
#include <algorithm>
#include <cmath>
#include <functional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "sim/core/checked.h"
#include "sim/core/error.h"
#include "sim/hub/hf_config_json.h"
#include "sim/models/model_config.h"
#include "traces/json_input.h"

namespace vramsim::hf_config {
namespace {

GeluKind gpt2_activation_key(const JsonReader& r, const char* key, const std::string& fallback) {
  const std::string act = r.string_or(key, fallback);
  if (act == "gelu_new") {
    return GeluKind::kNew;
  }
  if (act == "gelu_pytorch_tanh") {
    return GeluKind::kPytorchTanh;
  }
  if (act == "gelu") {
    return GeluKind::kExact;
  }
  r.fail(key, fmt::format("unsupported '{}' (supported: gelu_new, gelu_pytorch_tanh, gelu)", act));
}

GeluKind gpt2_activation(const JsonReader& r, const std::string& fallback) {
  return gpt2_activation_key(r, "activation_function", fallback);
}

// ---- the gpt2 family --------------------------------------------------------------------------------------

// GPT2Config
ModelConfig gpt2(const JsonReader& r) {
  ModelConfig m;
  m.family = ModelFamily::kGpt2;
  m.vocab_size = r.integer("vocab_size");
  m.d_model = r.integer("n_embd");
  m.n_layers = r.integer("n_layer", kMaxLayers);
  m.n_heads = r.integer("n_head");
  m.n_kv_heads = m.n_heads;
  m.head_dim = m.d_model / m.n_heads;
  m.d_ff = r.integer_or("n_inner", 4 * m.d_model);
  m.max_positions = r.integer("n_positions");
  m.tied_embeddings = r.boolean_or("tie_word_embeddings", true);
  m.dropout = {r.probability_or("embd_pdrop", 0.1), r.probability_or("attn_pdrop", 0.1),
               r.probability_or("resid_pdrop", 0.1)};
  m.gelu = gpt2_activation(r, "gelu_new");
  m.bias = true;
  m.norm = NormKind::kLayerNorm;
  m.mlp = MlpKind::kGelu;
  // GPT2Attention._attn: nn.functional.softmax(attn_weights, dim=-1) in the scores' dtype, then
  // .type(value.dtype); scale_attn_by_inverse_layer_idx / reorder_and_upcast_attn are off by default.
  m.softmax_in_fp32 = false;
  if (r.boolean_or("reorder_and_upcast_attn", false)) {
    r.fail("reorder_and_upcast_attn", "true is not supported");
  }
  return m;
}

// GPTBigCodeConfig: GPT-2 with nn.Linear layers, one key/value head under multi_query (the default), and a
// fp32 softmax (attention_softmax_in_fp32, default true).
ModelConfig gpt_bigcode(const JsonReader& r) {
  ModelConfig m = gpt2(r);
  m.gelu = gpt2_activation(r, "gelu_pytorch_tanh");
  m.linear_weights = true;
  if (r.boolean_or("multi_query", true)) {
    m.n_kv_heads = 1;
  }
  m.softmax_in_fp32 = r.boolean_or("attention_softmax_in_fp32", true);
  return m;
}

// ---- the llama family -------------------------------------------------------------------------------------

// LlamaConfig and the configs written after it; `defaults` says what differs per model_type.
struct LlamaDefaults {
  bool tied_embeddings = false;
  const char* activation_key = "hidden_act";
  const char* activation = "silu";
  bool attention_bias_key = true;  // reads attention_bias (Llama); Qwen2 always has q/k/v biases
  bool gated = true;               // the MLP is gated (its activation read from activation_key)
};

ModelConfig llama_like(const JsonReader& r, const LlamaDefaults& d) {
  ModelConfig m;
  m.family = ModelFamily::kLlama;
  m.vocab_size = r.integer("vocab_size");
  m.d_model = r.integer("hidden_size");
  m.n_layers = r.integer("num_hidden_layers", kMaxLayers);
  m.n_heads = r.integer("num_attention_heads");
  m.n_kv_heads = r.integer_or("num_key_value_heads", m.n_heads);
  m.head_dim = r.integer_or("head_dim", m.d_model / m.n_heads);
  m.d_ff = r.integer("intermediate_size");
  m.max_positions = r.integer_or("max_position_embeddings", 4096);
  m.tied_embeddings = r.boolean_or("tie_word_embeddings", d.tied_embeddings);
  m.dropout.attention = r.probability_or("attention_dropout", 0.0);
  m.bias = d.attention_bias_key && r.boolean_or("attention_bias", false);
  if (d.gated) {
    m.gated_activation = gated_activation(r, d.activation_key, d.activation);
  }
  if (r.boolean_or("mlp_bias", false)) {
    r.fail("mlp_bias", "MLP biases are not supported");
  }
  return m;
}

// ModelConfig::sliding_window_layers: config.json's layer_types when it has the key (transformers writes the
// list into the configs it saves; "sliding_attention" marks a windowed layer), else is_sliding(layer), the
// configuration class's default list. None without a window.
template <typename IsSliding>
std::vector<std::int64_t> sliding_layers(const JsonReader& r, const ModelConfig& m, IsSliding is_sliding) {
  std::vector<std::int64_t> out;
  if (m.sliding_window <= 0) {
    return out;
  }
  const std::vector<std::string> types = r.strings_or_empty("layer_types");
  if (!types.empty() && static_cast<std::int64_t>(types.size()) != m.n_layers) {
    r.fail("layer_types", fmt::format("{} entries for {} layers", types.size(), m.n_layers));
  }
  for (std::int64_t l = 0; l < m.n_layers; ++l) {
    if (types.empty() ? is_sliding(l) : types[static_cast<std::size_t>(l)] == "sliding_attention") {
      out.push_back(l);
    }
  }
  return out;
}

// Qwen2Config / Qwen3Config: with use_sliding_window (false by default, and in every released checkpoint)
// the layers from max_window_layers on use sliding_window (layer_types' default).
void qwen_sliding_window(const JsonReader& r, ModelConfig& m) {
  if (!r.boolean_or("use_sliding_window", false)) {
    return;
  }
  m.sliding_window = r.integer_or("sliding_window", 4096);
  const std::int64_t from = r.integer_or("max_window_layers", 28, kMaxLayers);
  m.sliding_window_layers = sliding_layers(r, m, [from](std::int64_t l) { return l >= from; });
}

ModelConfig llama(const JsonReader& r) { return llama_like(r, {}); }
// MistralConfig: sliding_window (4096 in Mistral-7B-v0.1, null from v0.2 on) on every layer.
ModelConfig mistral(const JsonReader& r) {
  ModelConfig m = llama_like(r, {});
  m.mistral_mask = true;
  m.sliding_window = r.integer_or("sliding_window", 0);
  m.sliding_window_layers = sliding_layers(r, m, [](std::int64_t) { return true; });
  return m;
}

ModelConfig qwen2(const JsonReader& r) {
  ModelConfig m = llama_like(r, {.attention_bias_key = false});
  m.qkv_bias = true;
  qwen_sliding_window(r, m);
  return m;
}

// GemmaConfig: GemmaRMSNorm, GeGLU (hidden_activation, gelu_pytorch_tanh when absent), the embeddings scaled
// by sqrt(hidden_size), tied lm_head.
ModelConfig gemma(const JsonReader& r) {
  ModelConfig m = llama_like(
      r, {.tied_embeddings = true, .activation_key = "hidden_activation", .activation = "gelu_pytorch_tanh"});
  m.norm = NormKind::kGemmaRmsNorm;
  m.scale_embeddings = true;
  return m;
}

// Gemma2Config: Gemma plus four norms per layer and soft-capped scores and logits.
ModelConfig gemma2(const JsonReader& r) {
  ModelConfig m = gemma(r);
  m.sandwich_norms = true;
  m.always_builds_mask = true;
  m.attn_logit_softcapping = r.number_or("attn_logit_softcapping", 50.0);
  m.final_logit_softcapping = r.number_or("final_logit_softcapping", 30.0);
  // layer_types' default: "sliding_attention" if bool((i + 1) % 2), the even layers.
  m.sliding_window = r.integer_or("sliding_window", 4096);
  m.sliding_window_layers = sliding_layers(r, m, [](std::int64_t l) { return (l + 1) % 2 != 0; });
  return m;
}

// Phi3Config: fused qkv_proj and gate_up_proj; dropout after attention and MLP (resid_pdrop) and after the
// embeddings (embd_pdrop).
ModelConfig phi3(const JsonReader& r) {
  ModelConfig m = llama_like(r, {});
  m.fused_qkv = true;
  m.fused_gate_up = true;
  m.mistral_mask = true;
  m.dropout.embeddings = r.probability_or("embd_pdrop", 0.0);
  m.dropout.residual = r.probability_or("resid_pdrop", 0.0);
  if (r.number_or("partial_rotary_factor", 1.0) != 1.0) {
    r.fail("partial_rotary_factor", "only 1.0 (rotary embedding on the whole head) is supported");
  }
  return m;
}

// MixtralConfig: Mistral with a MixtralSparseMoeBlock of num_local_experts in every layer.
ModelConfig mixtral(const JsonReader& r) {
  ModelConfig m = mistral(r);
  m.moe.n_experts = r.integer_or("num_local_experts", 8, kMaxExperts);
  m.moe.top_k = r.integer_or("num_experts_per_tok", 2);
  m.moe.expert_d_ff = m.d_ff;
  m.moe.normalize_top_k = true;
  return m;
}

// Qwen2MoeConfig: Qwen2 attention (q/k/v biases); Qwen2MoeSparseMoeBlock with a shared expert in the layers
// that decoder_sparse_step and mlp_only_layers make sparse, a dense MLP of intermediate_size elsewhere.
ModelConfig qwen2_moe(const JsonReader& r) {
  ModelConfig m = qwen2(r);
  m.mistral_mask = true;
  m.moe.n_experts = r.integer_or("num_experts", 60, kMaxExperts);
  m.moe.top_k = r.integer_or("num_experts_per_tok", 4);
  m.moe.expert_d_ff = r.integer_or("moe_intermediate_size", 1408);
  m.moe.shared_expert_d_ff = r.integer_or("shared_expert_intermediate_size", 5632);
  m.moe.normalize_top_k = r.boolean_or("norm_topk_prob", false);
  m.moe.sparse_step = r.integer_or("decoder_sparse_step", 1);
  m.moe.dense_layers = r.integers_or_empty("mlp_only_layers");
  return m;
}

// Qwen3Config: Llama with q_norm / k_norm (RMSNorm of head_dim) on each head's queries and keys;
// attention_bias (default false) on q/k/v/o; tie_word_embeddings default false (Qwen3-0.6B to 4B set true).
// use_sliding_window defaults to false (and no released checkpoint sets it).
ModelConfig qwen3(const JsonReader& r) {
  ModelConfig m = llama_like(r, {});
  m.qk_norm = ModelConfig::QkNorm::kPerHead;
  qwen_sliding_window(r, m);
  return m;
}

// Qwen3MoeConfig: Qwen3 attention; Qwen3MoeSparseMoeBlock (gate, experts; no shared expert) where
// decoder_sparse_step and mlp_only_layers make a layer sparse, Qwen3MoeMLP of intermediate_size elsewhere.
ModelConfig qwen3_moe(const JsonReader& r) {
  ModelConfig m = qwen3(r);
  m.mistral_mask = true;
  m.moe.n_experts = r.integer_or("num_experts", 128, kMaxExperts);
  m.moe.top_k = r.integer_or("num_experts_per_tok", 8);
  m.moe.expert_d_ff = r.integer_or("moe_intermediate_size", 768);
  m.moe.normalize_top_k = r.boolean_or("norm_topk_prob", false);
  m.moe.sparse_step = r.integer_or("decoder_sparse_step", 1);
  m.moe.dense_layers = r.integers_or_empty("mlp_only_layers");
  return m;
}

}  // namespace

// A gated MLP's act_fn = ACT2FN[name]: SiLU, or F.gelu (exact or tanh: the same tensors).
GatedActivation gated_activation(const JsonReader& r, const char* key, const std::string& fallback) {
  const std::string act = r.string_or(key, fallback);
  if (act == "silu" || act == "swish") {
    return GatedActivation::kSilu;
  }
  if (act == "gelu_pytorch_tanh" || act == "gelu") {
    return GatedActivation::kGeluTanh;
  }
  r.fail(key, fmt::format("unsupported '{}' (supported: silu, gelu_pytorch_tanh, gelu)", act));
}

// Gemma3TextConfig: Gemma-2's layer (four norms, scaled embeddings, tied head) with q_norm / k_norm of
// head_dim; soft-capping off by default (both keys null in the released configs); five local layers of
// sliding_window per global one. Gemma3TextConfig has defaults for every shape key (the gemma3 wrapper's
// text_config leaves several out), so none is required here.
ModelConfig gemma3_text(const JsonReader& r) {
  ModelConfig m;
  m.family = ModelFamily::kLlama;
  m.vocab_size = r.integer_or("vocab_size", 262208);
  m.d_model = r.integer_or("hidden_size", 2304);
  m.n_layers = r.integer_or("num_hidden_layers", 26, kMaxLayers);
  m.n_heads = r.integer_or("num_attention_heads", 8);
  m.n_kv_heads = r.integer_or("num_key_value_heads", 4);
  m.head_dim = r.integer_or("head_dim", 256);
  m.d_ff = r.integer_or("intermediate_size", 9216);
  m.max_positions = r.integer_or("max_position_embeddings", 131072);
  m.tied_embeddings = r.boolean_or("tie_word_embeddings", true);
  m.dropout.attention = r.probability_or("attention_dropout", 0.0);
  m.bias = r.boolean_or("attention_bias", false);
  m.gated_activation = gated_activation(r, "hidden_activation", "gelu_pytorch_tanh");
  m.norm = NormKind::kGemmaRmsNorm;
  m.scale_embeddings = true;
  m.sandwich_norms = true;
  m.qk_norm = ModelConfig::QkNorm::kPerHead;
  m.attn_logit_softcapping = r.number_or("attn_logit_softcapping", 0.0);
  m.final_logit_softcapping = r.number_or("final_logit_softcapping", 0.0);
  m.sliding_window = r.integer_or("sliding_window", 4096);
  // layer_types' default: "sliding_attention" if bool((i + 1) % sliding_window_pattern), pattern 6.
  const std::int64_t pattern = std::max<std::int64_t>(1, r.integer_or("sliding_window_pattern", 6));
  m.sliding_window_layers =
      sliding_layers(r, m, [pattern](std::int64_t l) { return (l + 1) % pattern != 0; });
  return m;
}

namespace {

// Olmo2Config: Llama's shapes; q_norm / k_norm over the whole q / k projections; the two norms after
// attention and MLP instead of before.
ModelConfig olmo2(const JsonReader& r) {
  ModelConfig m = llama_like(r, {});
  m.qk_norm = ModelConfig::QkNorm::kWholeProjection;
  m.post_norms_only = true;
  return m;
}

// GraniteConfig: Llama with embedding_multiplier, residual_multiplier, attention_multiplier (the softmax
// scale: no tensor of its own) and logits_scaling.
ModelConfig granite(const JsonReader& r) {
  ModelConfig m = llama_like(r, {});
  m.embedding_multiplier = r.number_or("embedding_multiplier", 1.0);
  m.residual_multiplier = r.number_or("residual_multiplier", 1.0);
  m.logits_scaling = r.number_or("logits_scaling", 1.0);
  if (m.logits_scaling == 0.0) {
    r.fail("logits_scaling", "must not be 0 (the logits are divided by it)");
  }
  return m;
}

// PhiConfig (phi-1, phi-1.5, phi-2): LayerNorm with bias, one input_layernorm feeding attention and MLP in
// parallel, biases everywhere (q/k/v/dense, fc1/fc2, lm_head), GELU MLP (gelu_new), partial rotary
// embedding.
ModelConfig phi(const JsonReader& r) {
  ModelConfig m = llama_like(r, {.attention_bias_key = false, .gated = false});
  m.bias = true;
  m.norm = NormKind::kLayerNorm;
  m.mlp = MlpKind::kGelu;
  m.gelu = gpt2_activation_key(r, "hidden_act", "gelu_new");
  m.parallel_block = true;
  m.lm_head_bias = true;
  m.dropout.embeddings = r.probability_or("embd_pdrop", 0.0);
  m.dropout.residual = r.probability_or("resid_pdrop", 0.0);
  if (r.boolean_or("qk_layernorm", false)) {
    r.fail("qk_layernorm", "true is not supported");
  }
  return m;
}

// Starcoder2Config: LayerNorm with bias (norm_epsilon), biases on every Linear (use_bias, default true), a
// GELU MLP (c_fc, c_proj; gelu_pytorch_tanh), tied embeddings by PretrainedConfig's default,
// residual_dropout after attention and MLP, embedding_dropout after the embeddings.
ModelConfig starcoder2(const JsonReader& r) {
  ModelConfig m = llama_like(r, {.tied_embeddings = true, .attention_bias_key = false, .gated = false});
  m.bias = r.boolean_or("use_bias", true);
  m.norm = NormKind::kLayerNorm;
  m.mlp = MlpKind::kGelu;
  m.gelu = gpt2_activation_key(r, "hidden_act", "gelu_pytorch_tanh");
  m.mistral_mask = true;
  m.dropout.embeddings = r.probability_or("embedding_dropout", 0.0);
  m.dropout.residual = r.probability_or("residual_dropout", 0.0);
  if (r.has("sliding_window")) {
    m.sliding_window = r.integer("sliding_window");
  }
  m.sliding_window_layers = sliding_layers(r, m, [](std::int64_t) { return true; });
  return m;
}

// FalconConfig (attribute_map: n_layer, n_head): LayerNorm with bias, a fused query_key_value (one key/value
// head with multi_query, num_kv_heads with new_decoder_architecture), GELU MLP of ffn_hidden_size (4 x
// hidden), parallel attention and MLP (parallel_attn), tied lm_head. ALiBi is not supported.
ModelConfig falcon(const JsonReader& r) {
  ModelConfig m;
  m.family = ModelFamily::kLlama;
  m.vocab_size = r.integer("vocab_size");
  m.d_model = r.integer("hidden_size");
  m.n_layers = r.has("num_hidden_layers") ? r.integer("num_hidden_layers", kMaxLayers)
                                          : r.integer("n_layer", kMaxLayers);
  m.n_heads = r.has("num_attention_heads") ? r.integer("num_attention_heads") : r.integer("n_head");
  m.head_dim = m.d_model / m.n_heads;
  const bool new_arch = r.boolean_or("new_decoder_architecture", false);
  const bool multi_query = r.boolean_or("multi_query", true);
  m.n_kv_heads = new_arch ? r.integer_or("num_kv_heads", m.n_heads) : multi_query ? 1 : m.n_heads;
  m.d_ff = r.integer_or("ffn_hidden_size", 4 * m.d_model);
  m.max_positions = r.integer_or("max_position_embeddings", 2048);
  m.tied_embeddings = r.boolean_or("tie_word_embeddings", true);
  m.bias = r.boolean_or("bias", false);
  m.norm = NormKind::kLayerNorm;
  m.mlp = MlpKind::kGelu;
  m.gelu = gpt2_activation_key(r, "activation", "gelu");
  m.parallel_block = r.boolean_or("parallel_attn", true);
  m.parallel_two_norms = m.parallel_block && r.integer_or("num_ln_in_parallel_attn", new_arch ? 2 : 1) == 2;
  m.dropout.attention = r.probability_or("attention_dropout", 0.0);
  if (r.boolean_or("alibi", false)) {
    r.fail("alibi", "ALiBi position biases are not supported (rotary only)");
  }
  return m;
}

// GptOssConfig: attention with biases (attention_bias, default true) and a learned sink per head,
// alternating sliding (sliding_window, 128) and full layers; a router with bias and fused experts with biases
// (num_local_experts, experts_per_token / num_experts_per_tok, intermediate_size).
ModelConfig gpt_oss(const JsonReader& r) {
  ModelConfig m = llama_like(r, {.attention_bias_key = false});
  m.bias = r.boolean_or("attention_bias", true);
  m.attention_sinks = true;
  m.sliding_window = r.integer_or("sliding_window", 128);
  // layer_types' default (GptOssConfig): "sliding_attention" if bool((i + 1) % 2), the even layers.
  m.sliding_window_layers = sliding_layers(r, m, [](std::int64_t l) { return (l + 1) % 2 != 0; });
  m.moe.n_experts = r.integer_or("num_local_experts", 128, kMaxExperts);
  m.moe.top_k = r.integer_or("num_experts_per_tok", r.integer_or("experts_per_token", 4));
  m.moe.expert_d_ff = m.d_ff;
  m.moe.fused_experts = true;
  m.moe.expert_bias = true;
  m.moe.router_bias = true;
  return m;
}

// Llama4TextConfig's attention_chunk_size (8192; null: none) on the RoPE layers: no_rope_layers[l] == 1, by
// default every layer but each no_rope_layer_interval-th (configuration_llama4.py: [int((l + 1) % 4 != 0)];
// an empty list is taken as absent). vLLM's Llama4Attention runs those layers as ChunkedLocalAttention
// (vllm/model_executor/models/llama4.py: use_chunked_local_attn = not self.nope and
// config.attention_chunk_size).
void llama4_chunked_attention(const JsonReader& r, ModelConfig& m) {
  if (r.is_null("attention_chunk_size")) {
    return;
  }
  m.attention_chunk_size = r.integer_or("attention_chunk_size", 8192);
  const std::vector<std::int64_t> rope = r.integers_or_empty("no_rope_layers");
  if (!rope.empty() && static_cast<std::int64_t>(rope.size()) != m.n_layers) {
    r.fail("no_rope_layers", fmt::format("{} entries for {} layers", rope.size(), m.n_layers));
  }
  const std::int64_t interval = r.integer_or("no_rope_layer_interval", 4);
  for (std::int64_t l = 0; l < m.n_layers; ++l) {
    const std::int64_t flag =
        rope.empty() ? ((l + 1) % interval != 0 ? 1 : 0) : rope[static_cast<std::size_t>(l)];
    if (flag > 1) {
      r.fail("no_rope_layers", "entries must be 0 (NoPE) or 1 (RoPE)");
    }
    if (flag == 1) {
      m.chunked_attention_layers.push_back(l);
    }
  }
}

// Llama4TextConfig: Llama attention (use_qk_norm: an L2 norm without parameters); MoE layers every
// interleave_moe_layer_step (experts fused, num_local_experts of intermediate_size, a router, one shared
// expert of intermediate_size), dense layers an MLP of intermediate_size_mlp; chunked attention on the RoPE
// layers (attention_chunk_size).
ModelConfig llama4_text(const JsonReader& r) {
  ModelConfig m;
  m.family = ModelFamily::kLlama;
  m.vocab_size = r.integer_or("vocab_size", 202048);
  m.d_model = r.integer_or("hidden_size", 5120);
  m.n_layers = r.integer_or("num_hidden_layers", 48, kMaxLayers);
  m.n_heads = r.integer_or("num_attention_heads", 40);
  m.n_kv_heads = r.integer_or("num_key_value_heads", 8);
  m.head_dim = r.integer_or("head_dim", 128);
  m.d_ff = r.integer_or("intermediate_size_mlp", 16384);
  m.max_positions = r.integer_or("max_position_embeddings", 4096 * 32);
  m.tied_embeddings = r.boolean_or("tie_word_embeddings", false);
  m.bias = r.boolean_or("attention_bias", false);
  m.dropout.attention = r.probability_or("attention_dropout", 0.0);
  m.gated_activation = gated_activation(r, "hidden_act", "silu");
  m.moe.n_experts = r.integer_or("num_local_experts", 16, kMaxExperts);
  m.moe.top_k = r.integer_or("num_experts_per_tok", 1);
  m.moe.expert_d_ff = r.integer_or("intermediate_size", 8192);
  m.moe.shared_expert_d_ff = m.moe.expert_d_ff;
  m.moe.shared_expert_gated = false;
  m.moe.fused_experts = true;
  m.moe.normalize_top_k = false;
  // moe_layers = list(range(step - 1, num_hidden_layers, step)): (l + 1) % step == 0
  m.moe.sparse_step = r.integer_or("interleave_moe_layer_step", 1);
  llama4_chunked_attention(r, m);
  if (r.has("moe_layers")) {
    r.fail("moe_layers", "an explicit list is not supported (interleave_moe_layer_step is)");
  }
  return m;
}

// Llama4Config (Llama4ForConditionalGeneration): the language model is text_config's (model.model_type
// llama4_text); the vision encoder and projector are not modelled (README).
ModelConfig llama4(const JsonReader& r) {
  ModelConfig m = llama4_text(r.child("text_config"));
  m.model_type = "llama4_text";
  m.vision.wrapper_model_type = "llama4";  // its vision encoder is neither simulated nor counted (README)
  return m;
}

// DeepseekV3Config: multi-head latent attention (q_lora_rank, kv_lora_rank, qk_nope_head_dim,
// qk_rope_head_dim, v_head_dim), first_k_dense_replace dense layers of intermediate_size, then
// DeepseekV3MoE (n_routed_experts of moe_intermediate_size, num_experts_per_tok, n_shared_experts added
// ungated). The checkpoint's multi-token-prediction layers (num_nextn_predict_layers) are not built by
// transformers and are left out.
ModelConfig deepseek_v3(const JsonReader& r) {
  ModelConfig m;
  m.family = ModelFamily::kLlama;
  m.vocab_size = r.integer_or("vocab_size", 129280);
  m.d_model = r.integer_or("hidden_size", 7168);
  m.n_layers = r.integer_or("num_hidden_layers", 61, kMaxLayers);
  m.n_heads = r.integer_or("num_attention_heads", 128);
  m.n_kv_heads = m.n_heads;  // MLA: every head has its own key and value
  m.d_ff = r.integer_or("intermediate_size", 18432);
  m.max_positions = r.integer_or("max_position_embeddings", 4096);
  m.tied_embeddings = r.boolean_or("tie_word_embeddings", false);
  m.bias = r.boolean_or("attention_bias", false);
  m.dropout.attention = r.probability_or("attention_dropout", 0.0);
  m.gated_activation = gated_activation(r, "hidden_act", "silu");
  m.mla.q_lora_rank = r.has("q_lora_rank") ? r.integer("q_lora_rank") : 0;
  m.mla.kv_lora_rank = r.integer_or("kv_lora_rank", 512);
  m.mla.qk_nope_head_dim = r.integer_or("qk_nope_head_dim", 128);
  m.mla.qk_rope_head_dim = r.integer_or("qk_rope_head_dim", 64);
  m.mla.v_head_dim = r.integer_or("v_head_dim", 128);
  m.head_dim = m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim;
  m.moe.n_experts = r.integer_or("n_routed_experts", 256, kMaxExperts);
  m.moe.top_k = r.integer_or("num_experts_per_tok", 8);
  m.moe.expert_d_ff = r.integer_or("moe_intermediate_size", 2048);
  m.moe.shared_expert_d_ff = m.moe.expert_d_ff * r.integer_or("n_shared_experts", 1);
  m.moe.shared_expert_gated = false;
  m.moe.normalize_top_k = r.boolean_or("norm_topk_prob", true);
  const std::int64_t dense = r.integer_or("first_k_dense_replace", 3, kMaxLayers);
  for (std::int64_t l = 0; l < std::min(dense, m.n_layers); ++l) {
    m.moe.dense_layers.push_back(l);
  }
  return m;
}

struct HfModelType {
  const char* model_type;
  const char* architecture;  // the *ForCausalLM class config.json's "architectures" names
  ModelConfig (*read)(const JsonReader&);
};

constexpr HfModelType kModelTypes[] = {
    {"gpt2", "GPT2LMHeadModel", gpt2},
    {"gpt_bigcode", "GPTBigCodeForCausalLM", gpt_bigcode},
    {"llama", "LlamaForCausalLM", llama},
    {"mistral", "MistralForCausalLM", mistral},
    {"qwen2", "Qwen2ForCausalLM", qwen2},
    {"gemma", "GemmaForCausalLM", gemma},
    {"gemma2", "Gemma2ForCausalLM", gemma2},
    {"phi3", "Phi3ForCausalLM", phi3},
    {"mixtral", "MixtralForCausalLM", mixtral},
    {"qwen2_moe", "Qwen2MoeForCausalLM", qwen2_moe},
    {"qwen3", "Qwen3ForCausalLM", qwen3},
    {"qwen3_moe", "Qwen3MoeForCausalLM", qwen3_moe},
    {"gemma3_text", "Gemma3ForCausalLM", gemma3_text},
    {"gemma3", "Gemma3ForConditionalGeneration", gemma3},
    {"olmo2", "Olmo2ForCausalLM", olmo2},
    {"granite", "GraniteForCausalLM", granite},
    {"phi", "PhiForCausalLM", phi},
    {"starcoder2", "Starcoder2ForCausalLM", starcoder2},
    {"falcon", "FalconForCausalLM", falcon},
    {"gpt_oss", "GptOssForCausalLM", gpt_oss},
    {"llama4_text", "Llama4ForCausalLM", llama4_text},
    {"llama4", "Llama4ForConditionalGeneration", llama4},
    {"deepseek_v3", "DeepseekV3ForCausalLM", deepseek_v3},
    {"llava", "LlavaForConditionalGeneration", llava},
    {"llava_next", "LlavaNextForConditionalGeneration", llava_next},
    {"qwen2_vl", "Qwen2VLForConditionalGeneration", qwen2_vl},
    {"qwen2_5_vl", "Qwen2_5_VLForConditionalGeneration", qwen2_5_vl},
    {"mllama", "MllamaForConditionalGeneration", mllama},
};

// model_type decides (it is what transformers' AutoConfig dispatches on); a config.json with only
// "architectures" is matched by its first class name.
const HfModelType& model_type_of(const nlohmann::json& root, std::string_view source) {
  if (root.contains("model_type")) {
    const nlohmann::json& t = root.at("model_type");
    if (!t.is_string()) {
      throw InputError(fmt::format("{}: key 'model_type' must be a string", source));
    }
    for (const HfModelType& h : kModelTypes) {
      if (t.get<std::string>() == h.model_type) {
        return h;
      }
    }
    throw InputError(fmt::format("{}: key 'model_type': unsupported model type '{}' (supported: {})", source,
                                 t.get<std::string>(), fmt::join(supported_model_types(), ", ")));
  }
  if (root.contains("architectures")) {
    const nlohmann::json& a = root.at("architectures");
    if (!a.is_array() || a.empty() || !a.at(0).is_string()) {
      throw InputError(fmt::format("{}: key 'architectures' must be a non-empty list of names", source));
    }
    for (const HfModelType& h : kModelTypes) {
      if (a.at(0).get<std::string>() == h.architecture) {
        return h;
      }
    }
    throw InputError(
        fmt::format("{}: key 'architectures': unsupported architecture '{}' (supported model "
                    "types: {})",
                    source, a.at(0).get<std::string>(), fmt::join(supported_model_types(), ", ")));
  }
  throw InputError(fmt::format("{}: missing key 'model_type'", source));
}

}  // namespace

// A multimodal wrapper's text_config read by its own model_type's reader (llava): not another wrapper.
ModelConfig text_model(const nlohmann::json& text, std::string_view source) {
  const HfModelType& type = model_type_of(text, source);
  if (type.read == llava || type.read == gemma3 || type.read == llama4 || type.read == qwen2_vl ||
      type.read == qwen2_5_vl || type.read == mllama) {
    throw InputError(
        fmt::format("{}: key 'text_config': model_type '{}' is a multimodal wrapper, not a "
                    "language model",
                    source, type.model_type));
  }
  ModelConfig m = type.read(JsonReader(text, source));
  m.model_type = type.model_type;
  return m;
}

namespace {

void check_shapes(const ModelConfig& m, std::string_view source) {
  if (m.n_heads % m.n_kv_heads != 0) {
    throw InputError(fmt::format("{}: key 'num_key_value_heads': {} does not divide num_attention_heads {}",
                                 source, m.n_kv_heads, m.n_heads));
  }
  if (m.family == ModelFamily::kGpt2 && m.d_model % m.n_heads != 0) {
    throw InputError(
        fmt::format("{}: key 'n_head': {} does not divide n_embd {}", source, m.n_heads, m.d_model));
  }
  if (m.head_dim % 2 != 0) {
    throw InputError(
        fmt::format("{}: key 'head_dim': {} is odd (rotary embeddings rotate halves)", source, m.head_dim));
  }
  if (m.moe.n_experts > 0 && (m.moe.top_k > m.moe.n_experts)) {
    throw InputError(fmt::format("{}: key 'num_experts_per_tok': {} is more than the {} experts", source,
                                 m.moe.top_k, m.moe.n_experts));
  }
  if (m.moe.n_experts > 0 && m.n_layers * m.moe.n_experts > kMaxExpertLayers) {
    throw InputError(fmt::format("{}: {} layers x {} experts is more than the {} expert MLPs vramsim models",
                                 source, m.n_layers, m.moe.n_experts, kMaxExpertLayers));
  }
  for (const std::int64_t l : m.moe.dense_layers) {
    if (l >= m.n_layers) {
      throw InputError(fmt::format("{}: key 'mlp_only_layers': layer {} does not exist ({} layers)", source,
                                   l, m.n_layers));
    }
  }
}

}  // namespace
}  // namespace vramsim::hf_config

namespace vramsim {

using hf_config::check_shapes;
using hf_config::HfModelType;
using hf_config::JsonReader;
using hf_config::kMaxParameters;
using hf_config::kModelTypes;
using hf_config::model_type_of;

std::vector<std::string> supported_model_types() {
  std::vector<std::string> out;
  for (const HfModelType& h : kModelTypes) {
    out.emplace_back(h.model_type);
  }
  return out;
}

ModelConfig model_from_hf_config_json(std::string_view json_text, std::string_view source) {
  const nlohmann::json root = parse_json_input(json_text, source, kMaxSmallJsonMemory);
  if (!root.is_object()) {
    throw InputError(fmt::format("{}: expected a JSON object (a Hugging Face config.json)", source));
  }
  const HfModelType& type = model_type_of(root, source);
  ModelConfig m = type.read(JsonReader(root, source));
  m.name = std::string(source);
  if (m.model_type.empty()) {  // a multimodal wrapper names its language model's type itself
    m.model_type = type.model_type;
  }
  check_shapes(m, source);
  std::vector<ParameterShape> shapes;
  transformers_parameter_shapes(m, shapes);
  std::int64_t parameters = 0;
  for (const ParameterShape& p : shapes) {
    const std::optional<std::int64_t> sum = checked_add(parameters, p.numel());
    if (!sum || *sum > kMaxParameters) {
      throw InputError(fmt::format("{}: the model has more than {} parameters, the most vramsim models",
                                   source, kMaxParameters));
    }
    parameters = *sum;
  }
  return m;
}

}  // namespace vramsim
