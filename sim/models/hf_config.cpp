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
#include "sim/models/model_config.h"
#include "traces/json_input.h"

namespace vramsim {
namespace {

constexpr std::int64_t kMaxDimension = std::int64_t{1} << 24;
// Far above real models (Llama 3 405B: 126 layers; DeepSeek-V3: 256 experts), low enough that building the
// parameter table and the step graph stays within seconds and memory of a laptop.
constexpr std::int64_t kMaxLayers = 4096;
constexpr std::int64_t kMaxExperts = 4096;
constexpr std::int64_t kMaxExpertLayers = 65536;  // layers x experts: the MoE parameter tensors / 3
// 2^46 (70 trillion) parameters: no sum of parameter sizes can wrap, and no model is near it.
constexpr std::int64_t kMaxParameters = std::int64_t{1} << 46;

class JsonReader {
 public:
  JsonReader(const nlohmann::json& root, std::string_view source) : m_root(root), m_source(source) {}

  // Positive and at most `max`. Dimensions stay <= 2^24, so that a product of two of them (a weight) is an
  // exact int64 and larger products are checked where tensors are sized (eager_tape.h); counts that
  // multiply the work (layers, experts) have lower limits.
  std::int64_t integer(const char* key, std::int64_t max = kMaxDimension) const {
    const nlohmann::json& v = required(key);
    if (!v.is_number_integer()) {
      throw InputError(fmt::format("{}: key '{}' must be an integer, got {}", m_source, key, v.type_name()));
    }
    // A value above 2^63 - 1 is number_unsigned: compare it unconverted, not wrapped to a negative int64.
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(max)) {
      throw InputError(
          fmt::format("{}: key '{}' must be in 1..{}, got {}", m_source, key, max, v.get<std::uint64_t>()));
    }
    const std::int64_t x = v.get<std::int64_t>();
    if (x <= 0 || x > max) {
      throw InputError(fmt::format("{}: key '{}' must be in 1..{}, got {}", m_source, key, max, x));
    }
    return x;
  }
  std::int64_t integer_or(const char* key, std::int64_t fallback, std::int64_t max = kMaxDimension) const {
    return has(key) ? integer(key, max) : fallback;
  }
  bool boolean_or(const char* key, bool fallback) const {
    if (!has(key)) {
      return fallback;
    }
    const nlohmann::json& v = m_root.at(key);
    if (!v.is_boolean()) {
      throw InputError(
          fmt::format("{}: key '{}' must be true or false, got {}", m_source, key, v.type_name()));
    }
    return v.get<bool>();
  }
  bool has(const char* key) const { return m_root.contains(key) && !m_root.at(key).is_null(); }
  double number_or(const char* key, double fallback) const {
    if (!has(key)) {
      return fallback;
    }
    const nlohmann::json& v = m_root.at(key);
    if (!v.is_number()) {
      throw InputError(fmt::format("{}: key '{}' must be a number, got {}", m_source, key, v.type_name()));
    }
    const double x = v.get<double>();
    if (!std::isfinite(x) || x < 0.0) {
      throw InputError(fmt::format("{}: key '{}' must be a finite non-negative number", m_source, key));
    }
    return x;
  }
  // A probability in [0, 1), as the dropout keys hold.
  double probability_or(const char* key, double fallback) const {
    const double p = number_or(key, fallback);
    if (p >= 1.0) {
      throw InputError(fmt::format("{}: key '{}' must be in [0, 1), got {}", m_source, key, p));
    }
    return p;
  }
  std::string string_or(const char* key, const std::string& fallback) const {
    if (!has(key)) {
      return fallback;
    }
    const nlohmann::json& v = m_root.at(key);
    if (!v.is_string()) {
      throw InputError(fmt::format("{}: key '{}' must be a string, got {}", m_source, key, v.type_name()));
    }
    return v.get<std::string>();
  }
  std::vector<std::int64_t> integers_or_empty(const char* key) const {
    std::vector<std::int64_t> out;
    if (!has(key)) {
      return out;
    }
    const nlohmann::json& v = m_root.at(key);
    if (!v.is_array() || v.size() > 4096) {
      throw InputError(fmt::format("{}: key '{}' must be a list of layer indices", m_source, key));
    }
    for (const nlohmann::json& x : v) {
      if (!x.is_number_integer() || x.get<std::int64_t>() < 0) {
        throw InputError(fmt::format("{}: key '{}' must hold non-negative integers", m_source, key));
      }
      out.push_back(x.get<std::int64_t>());
    }
    return out;
  }
  // A list of [a, b] pairs of positive integers (image_grid_pinpoints), `fallback` when absent.
  std::vector<std::pair<std::int64_t, std::int64_t>> integer_pairs_or(
      const char* key, std::vector<std::pair<std::int64_t, std::int64_t>> fallback) const {
    if (!has(key)) {
      return fallback;
    }
    const nlohmann::json& v = m_root.at(key);
    if (!v.is_array() || v.empty() || v.size() > 4096) {
      throw InputError(
          fmt::format("{}: key '{}' must be a non-empty list of [height, width] pairs", m_source, key));
    }
    std::vector<std::pair<std::int64_t, std::int64_t>> out;
    for (const nlohmann::json& x : v) {
      if (!x.is_array() || x.size() != 2 || !x[0].is_number_integer() || !x[1].is_number_integer() ||
          x[0].get<std::int64_t>() <= 0 || x[1].get<std::int64_t>() <= 0 ||
          x[0].get<std::int64_t>() > 65536 || x[1].get<std::int64_t>() > 65536) {
        throw InputError(
            fmt::format("{}: key '{}' must hold [height, width] pairs of 1..65536 pixels", m_source, key));
      }
      out.emplace_back(x[0].get<std::int64_t>(), x[1].get<std::int64_t>());
    }
    return out;
  }
  // A list of strings (layer_types), empty when absent.
  std::vector<std::string> strings_or_empty(const char* key) const {
    std::vector<std::string> out;
    if (!has(key)) {
      return out;
    }
    const nlohmann::json& v = m_root.at(key);
    if (!v.is_array() || v.size() > 4096) {
      throw InputError(fmt::format("{}: key '{}' must be a list of strings", m_source, key));
    }
    for (const nlohmann::json& x : v) {
      if (!x.is_string()) {
        throw InputError(fmt::format("{}: key '{}' must hold strings", m_source, key));
      }
      out.push_back(x.get<std::string>());
    }
    return out;
  }
  // The JSON object under `key` (text_config of a multimodal checkpoint), read with the same source name.
  JsonReader child(const char* key) const {
    const nlohmann::json& v = required(key);
    if (!v.is_object()) {
      throw InputError(fmt::format("{}: key '{}' must be an object, got {}", m_source, key, v.type_name()));
    }
    return JsonReader(v, m_source);
  }
  // The object under `key`, or an empty one when it is absent (every key then takes its class default).
  JsonReader child_or_empty(const char* key) const {
    static const nlohmann::json kEmpty = nlohmann::json::object();
    return has(key) ? child(key) : JsonReader(kEmpty, m_source);
  }
  // The JSON object under `key` as it is (an empty object when absent), for a reader that merges class
  // defaults into it.
  nlohmann::json object_or_empty(const char* key) const {
    if (!has(key)) {
      return nlohmann::json::object();
    }
    const nlohmann::json& v = m_root.at(key);
    if (!v.is_object()) {
      throw InputError(fmt::format("{}: key '{}' must be an object, got {}", m_source, key, v.type_name()));
    }
    return v;
  }
  // An integer of either sign (vision_feature_layer: -2 counts from the end).
  std::int64_t signed_integer_or(const char* key, std::int64_t fallback, std::int64_t limit) const {
    if (!has(key)) {
      return fallback;
    }
    const nlohmann::json& v = m_root.at(key);
    if (!v.is_number_integer()) {
      throw InputError(fmt::format("{}: key '{}' must be an integer, got {}", m_source, key, v.type_name()));
    }
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(limit)) {
      throw InputError(fmt::format("{}: key '{}' must be in -{}..{}", m_source, key, limit, limit));
    }
    const std::int64_t x = v.get<std::int64_t>();
    if (x < -limit || x > limit) {
      throw InputError(
          fmt::format("{}: key '{}' must be in -{}..{}, got {}", m_source, key, limit, limit, x));
    }
    return x;
  }
  std::string_view source() const { return m_source; }
  const nlohmann::json& root() const { return m_root; }
  [[noreturn]] void fail(const char* key, const std::string& what) const {
    throw InputError(fmt::format("{}: key '{}': {}", m_source, key, what));
  }

 private:
  const nlohmann::json& required(const char* key) const {
    if (!has(key)) {
      throw InputError(fmt::format("{}: missing key '{}'", m_source, key));
    }
    return m_root.at(key);
  }
  const nlohmann::json& m_root;
  std::string_view m_source;
};

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

// The products and sums of a vision tower's parameter count, with overflow checks (sim/core/checked.h): an
// overflow is the config's error, named at its vision_config.
auto vision_count_ops(const JsonReader& v) {
  const auto mul = [&v](std::int64_t a, std::int64_t b) {
    const auto x = checked_mul(a, b);
    if (!x) {
      v.fail("vision_config", "the vision tower's parameter count overflows");
    }
    return *x;
  };
  const auto add = [&v](std::initializer_list<std::int64_t> xs) {
    std::int64_t sum = 0;
    for (std::int64_t x : xs) {
      const auto y = checked_add(sum, x);
      if (!y) {
        v.fail("vision_config", "the vision tower's parameter count overflows");
      }
      sum = *y;
    }
    return sum;
  };
  return std::pair{mul, add};
}

// The parameters SiglipVisionModel registers for a SiglipVisionConfig (transformers'
// models/siglip/modeling_siglip.py, SiglipVisionTransformer; the config's class defaults for missing keys):
// SiglipVisionEmbeddings (patch_embedding Conv2d(num_channels, hidden, patch, stride patch) with bias,
// position_embedding of (image_size / patch_size)^2 positions), num_hidden_layers SiglipEncoderLayers
// (layer_norm1, q/k/v/out_proj with biases, layer_norm2, fc1 / fc2 with biases), post_layernorm, and with
// vision_use_head the SiglipMultiheadAttentionPoolingHead (probe, nn.MultiheadAttention's in_proj and
// out_proj, layernorm, an MLP).
std::int64_t siglip_vision_parameters(const JsonReader& v) {
  const std::int64_t h = v.integer_or("hidden_size", 768);
  const std::int64_t ff = v.integer_or("intermediate_size", 3072);
  const std::int64_t layers = v.integer_or("num_hidden_layers", 12, kMaxLayers);
  const std::int64_t channels = v.integer_or("num_channels", 3, 64);
  const std::int64_t image = v.integer_or("image_size", 224);
  const std::int64_t patch = v.integer_or("patch_size", 16);
  if (image % patch != 0) {
    v.fail("vision_config.image_size", fmt::format("{} is not a multiple of patch_size {}", image, patch));
  }
  const auto [mul, add] = vision_count_ops(v);
  const std::int64_t side = image / patch;
  const std::int64_t linear = add({mul(h, h), h});
  const std::int64_t mlp = add({mul(h, ff), ff, mul(ff, h), h});
  const std::int64_t layer = add({2 * h, mul(4, linear), 2 * h, mlp});
  std::int64_t total =
      add({mul(mul(h, channels), mul(patch, patch)), h, mul(mul(side, side), h), mul(layers, layer), 2 * h});
  if (v.boolean_or("vision_use_head", true)) {
    total = add({total, h, add({mul(3 * h, h), 3 * h}), linear, 2 * h, mlp});
  }
  return total;
}

// Gemma3Config (Gemma3ForConditionalGeneration): the language model is text_config's, and it is what is
// simulated. The vision part transformers also builds is counted, not simulated: the SigLIP tower of
// vision_config (SiglipVisionConfig's defaults when the key is absent, as Gemma3Config does) and
// Gemma3MultiModalProjector (mm_input_projection_weight [vision hidden, text hidden], mm_soft_emb_norm of
// the vision hidden size).
ModelConfig gemma3(const JsonReader& r) {
  ModelConfig m = gemma3_text(r.child("text_config"));
  m.model_type = "gemma3_text";
  m.vision.wrapper_model_type = "gemma3";
  const JsonReader v = r.child_or_empty("vision_config");
  const std::string vision_type = v.string_or("model_type", "siglip_vision_model");
  if (vision_type != "siglip_vision_model") {
    v.fail("vision_config.model_type",
           fmt::format("'{}' is not modelled (siglip_vision_model is)", vision_type));
  }
  const std::int64_t vision_hidden = v.integer_or("hidden_size", 768);
  m.vision.model_type = vision_type;
  m.vision.tower_parameters = siglip_vision_parameters(v);
  m.vision.projector_parameters = vision_hidden * m.d_model + vision_hidden;
  // The tower as gemma3_vision.h runs it (SiglipVisionConfig's defaults for missing keys)
  ModelConfig::VisionPart::Clip c;
  c.tower = ModelConfig::VisionPart::Tower::kSiglip;
  c.hidden = vision_hidden;
  c.intermediate = v.integer_or("intermediate_size", 3072);
  c.layers = v.integer_or("num_hidden_layers", 12, kMaxLayers);
  c.heads = v.integer_or("num_attention_heads", 12);
  c.channels = v.integer_or("num_channels", 3, 64);
  c.image_size = v.integer_or("image_size", 224);
  c.patch_size = v.integer_or("patch_size", 16);
  c.feature_layer = -1;  // last_hidden_state
  c.drop_cls = false;    // SigLIP has no CLS token
  c.pooling_head = v.boolean_or("vision_use_head", true);
  const std::string act = v.string_or("hidden_act", "gelu_pytorch_tanh");
  if (act != "gelu_pytorch_tanh") {
    v.fail("vision_config.hidden_act", fmt::format("'{}' is not modelled (gelu_pytorch_tanh is)", act));
  }
  if (c.hidden % c.heads != 0) {
    v.fail("vision_config.num_attention_heads",
           fmt::format("{} heads do not split hidden_size {}", c.heads, c.hidden));
  }
  // Gemma3MultiModalProjector: AvgPool2d(kernel = patches per side / sqrt(mm_tokens_per_image))
  c.pooled_tokens = r.integer_or("mm_tokens_per_image", 256);
  const auto side = static_cast<std::int64_t>(std::llround(std::sqrt(static_cast<double>(c.pooled_tokens))));
  if (side * side != c.pooled_tokens || side > c.patches_per_side() || c.patches_per_side() % side != 0) {
    // AvgPool2d(kernel_size = patches_per_image // tokens_per_side) cannot pool this grid: transformers
    // builds the model (counted above) but its forward fails; the vision part stays counted, not simulated
    return m;
  }
  m.vision.clip = c;
  return m;
}

// CLIPVisionConfig (transformers' models/clip/configuration_clip.py; class defaults for missing keys, as
// LlavaConfig builds it from a vision_config dict): the CLIPVisionModel vision_tower.py simulates.
ModelConfig::VisionPart::Clip clip_vision(const JsonReader& v) {
  ModelConfig::VisionPart::Clip c;
  c.hidden = v.integer_or("hidden_size", 768);
  c.intermediate = v.integer_or("intermediate_size", 3072);
  c.layers = v.integer_or("num_hidden_layers", 12, kMaxLayers);
  c.heads = v.integer_or("num_attention_heads", 12);
  c.channels = v.integer_or("num_channels", 3, 64);
  c.image_size = v.integer_or("image_size", 224);
  c.patch_size = v.integer_or("patch_size", 32);
  if (c.image_size % c.patch_size != 0) {
    v.fail("vision_config.image_size",
           fmt::format("{} is not a multiple of patch_size {}", c.image_size, c.patch_size));
  }
  if (c.hidden % c.heads != 0 || (c.hidden / c.heads) % 2 != 0) {
    v.fail("vision_config.num_attention_heads",
           fmt::format("{} heads do not split hidden_size {} into even head sizes", c.heads, c.hidden));
  }
  const std::string act = v.string_or("hidden_act", "quick_gelu");
  if (act != "quick_gelu") {
    v.fail("vision_config.hidden_act", fmt::format("'{}' is not modelled (quick_gelu is)", act));
  }
  return c;
}

// The parameters CLIPVisionModel registers (modeling_clip.py, CLIPVisionTransformer): CLIPVisionEmbeddings
// (class_embedding [h], patch_embedding Conv2d(channels, h, patch, stride patch, bias=False),
// position_embedding of (image_size / patch_size)^2 + 1 positions), pre_layrnorm, num_hidden_layers
// CLIPEncoderLayers (k/v/q/out_proj with biases, layer_norm1, fc1 / fc2 with biases, layer_norm2),
// post_layernorm. Counted with overflow checks (sim/core/checked.h).
std::int64_t clip_vision_parameters(const ModelConfig::VisionPart::Clip& c, const JsonReader& v) {
  const auto [mul, add] = vision_count_ops(v);
  const std::int64_t h = c.hidden, ff = c.intermediate;
  const std::int64_t positions = add({mul(c.patches_per_side(), c.patches_per_side()), 1});
  const std::int64_t embeddings =
      add({h, mul(mul(h, c.channels), mul(c.patch_size, c.patch_size)), mul(positions, h)});
  const std::int64_t layer =
      add({mul(4, add({mul(h, h), h})), 2 * h, add({mul(h, ff), ff}), add({mul(ff, h), h}), 2 * h});
  return add({embeddings, 2 * h, mul(c.layers, layer), 2 * h});
}

ModelConfig text_model(const nlohmann::json& text, std::string_view source);

// LlavaConfig (LlavaForConditionalGeneration, transformers' models/llava): the language model of
// text_config (model_type "llama" when absent; a llama or mistral text_config takes LlamaConfig's or
// MistralConfig's class defaults for the shape keys it leaves out, as CONFIG_MAPPING[type](**text_config)
// does), the CLIP vision tower of vision_config, and LlavaMultiModalProjector (linear_1 vision hidden -> text
// hidden, projector_hidden_act, linear_2 text hidden -> text hidden, biases with multimodal_projector_bias).
// All three are simulated (vision_tower.h).
ModelConfig llava(const JsonReader& r) {
  nlohmann::json text = r.object_or_empty("text_config");
  if (!text.contains("model_type")) {
    text["model_type"] = "llama";
  }
  nlohmann::json defaults = nlohmann::json::object();
  if (text["model_type"] == "llama") {
    // LlamaConfig.__init__'s defaults (configuration_llama.py)
    defaults = {{"vocab_size", 32000},     {"hidden_size", 4096},       {"intermediate_size", 11008},
                {"num_hidden_layers", 32}, {"num_attention_heads", 32}, {"max_position_embeddings", 2048}};
  } else if (text["model_type"] == "mistral") {
    // MistralConfig.__init__'s defaults (configuration_mistral.py): llava-v1.6-mistral-7b-hf's text_config
    // leaves the shapes to them
    defaults = {{"vocab_size", 32000},
                {"hidden_size", 4096},
                {"intermediate_size", 14336},
                {"num_hidden_layers", 32},
                {"num_attention_heads", 32},
                {"num_key_value_heads", 8},
                {"max_position_embeddings", 4096 * 32}};
  }
  for (const auto& [key, value] : defaults.items()) {
    if (!text.contains(key) || text.at(key).is_null()) {
      text[key] = value;
    }
  }
  ModelConfig m = text_model(text, r.source());
  m.vision.wrapper_model_type = "llava";
  const JsonReader v = r.child_or_empty("vision_config");
  // LlavaConfig's own vision defaults when vision_config is absent: CLIP ViT-L/14 at 336 pixels
  ModelConfig::VisionPart::Clip clip;
  if (r.has("vision_config")) {
    const std::string vision_type = v.string_or("model_type", "clip_vision_model");
    if (vision_type != "clip_vision_model") {
      v.fail("vision_config.model_type",
             fmt::format("'{}' is not modelled (clip_vision_model is)", vision_type));
    }
    clip = clip_vision(v);
  } else {
    clip.hidden = 1024;
    clip.intermediate = 4096;
    clip.layers = 24;
    clip.heads = 16;
    clip.image_size = 336;
    clip.patch_size = 14;
  }
  // hidden_states has num_hidden_layers + 1 entries (the embeddings, then each layer's output)
  clip.feature_layer = r.signed_integer_or("vision_feature_layer", -2, clip.layers + 1);
  if (clip.feature_layer > clip.layers) {
    r.fail("vision_feature_layer", fmt::format("{} is past the {} hidden states of the vision tower",
                                               clip.feature_layer, clip.layers + 1));
  }
  const std::string strategy = r.string_or("vision_feature_select_strategy", "default");
  if (strategy != "default" && strategy != "full") {
    r.fail("vision_feature_select_strategy", fmt::format("'{}' is not 'default' or 'full'", strategy));
  }
  clip.drop_cls = strategy == "default";
  clip.projector_bias = r.boolean_or("multimodal_projector_bias", true);
  const std::string act = r.string_or("projector_hidden_act", "gelu");
  if (act != "gelu") {
    r.fail("projector_hidden_act", fmt::format("'{}' is not modelled (gelu is)", act));
  }
  m.vision.model_type = "clip_vision_model";
  m.vision.clip = clip;
  m.vision.tower_parameters = clip_vision_parameters(clip, v);
  const std::int64_t bias = clip.projector_bias ? 1 : 0;
  m.vision.projector_parameters =
      clip.hidden * m.d_model + bias * m.d_model + m.d_model * m.d_model + bias * m.d_model;
  return m;
}

// LlavaNextConfig (LlavaNextForConditionalGeneration, transformers' models/llava_next): LlavaConfig's
// language model, CLIP tower and projector, plus image_grid_pinpoints (LlavaNextConfig's default: 336 x 672,
// 672 x 336, 672 x 672, 1008 x 336, 336 x 1008) and LlavaNextModel.image_newline, one vector of the text
// hidden size (counted with the projector). Simulated with "anyres" tiling (llava_next_anyres.h).
ModelConfig llava_next(const JsonReader& r) {
  ModelConfig m = llava(r);
  m.vision.wrapper_model_type = "llava_next";
  ModelConfig::VisionPart::Clip& c = m.vision.clip;
  c.grid_pinpoints = r.integer_pairs_or("image_grid_pinpoints",
                                        {{336, 672}, {672, 336}, {672, 672}, {1008, 336}, {336, 1008}});
  for (const auto& [h, w] : c.grid_pinpoints) {
    if (h % c.image_size != 0 || w % c.image_size != 0) {
      // pack_image_features views each tile's features as (h / image_size, w / image_size, side, side, -1)
      r.fail("image_grid_pinpoints",
             fmt::format("{}x{} is not a multiple of vision_config.image_size {}", h, w, c.image_size));
    }
  }
  if (!c.drop_cls) {
    // pack_image_features' view(num_patch_height, num_patch_width, side, side, -1) of 577 tokens per tile
    r.fail("vision_feature_select_strategy", "'full' is not modelled for llava_next (vramsim)");
  }
  m.vision.projector_parameters += m.d_model;  // image_newline
  return m;
}

// Qwen2VLVisionConfig / Qwen2_5_VLVisionConfig (transformers' models/qwen2_vl/configuration_qwen2_vl.py and
// models/qwen2_5_vl/configuration_qwen2_5_vl.py; the class defaults for missing keys). 2.5-VL names the tower
// width hidden_size and the output out_hidden_size; 2-VL names them embed_dim and hidden_size.
ModelConfig::VisionPart::Clip qwen_vl_vision(const JsonReader& v, bool v2_5, std::int64_t text_hidden) {
  using Tower = ModelConfig::VisionPart::Tower;
  ModelConfig::VisionPart::Clip c;
  c.tower = v2_5 ? Tower::kQwen25Vl : Tower::kQwen2Vl;
  c.layers = v.integer_or("depth", 32, kMaxLayers);
  c.heads = v.integer_or("num_heads", 16);
  c.channels = v.integer_or("in_channels", v.integer_or("in_chans", 3, 64), 64);
  c.patch_size = v.integer_or("patch_size", 14, 4096);
  c.temporal_patch_size = v.integer_or("temporal_patch_size", 2, 64);
  c.spatial_merge_size = v.integer_or("spatial_merge_size", 2, 64);
  std::int64_t out = 0;
  if (v2_5) {
    c.hidden = v.integer_or("hidden_size", 3584);
    c.intermediate = v.integer_or("intermediate_size", 3420);
    out = v.integer_or("out_hidden_size", 3584);
    c.window_size = v.integer_or("window_size", 112, 1 << 20);
    c.full_attention_layers = v.has("fullatt_block_indexes") ? v.integers_or_empty("fullatt_block_indexes")
                                                             : std::vector<std::int64_t>{7, 15, 23, 31};
    const std::string act = v.string_or("hidden_act", "silu");
    if (act != "silu") {
      v.fail("vision_config.hidden_act", fmt::format("'{}' is not modelled (silu is)", act));
    }
    if (c.window_size % (c.spatial_merge_size * c.patch_size) != 0) {
      v.fail("vision_config.window_size",
             fmt::format("{} is not a multiple of spatial_merge_size x patch_size", c.window_size));
    }
  } else {
    c.hidden = v.integer_or("embed_dim", 1280);
    const double ratio = v.number_or("mlp_ratio", 4.0);
    if (ratio <= 0.0 || ratio > 64.0) {
      v.fail("vision_config.mlp_ratio", "must be in (0, 64]");
    }
    c.intermediate = static_cast<std::int64_t>(static_cast<double>(c.hidden) * ratio);  // int(dim * ratio)
    out = v.integer_or("hidden_size", 3584);
    const std::string act = v.string_or("hidden_act", "quick_gelu");
    if (act != "quick_gelu") {
      v.fail("vision_config.hidden_act", fmt::format("'{}' is not modelled (quick_gelu is)", act));
    }
  }
  if (out != text_hidden) {
    v.fail(v2_5 ? "vision_config.out_hidden_size" : "vision_config.hidden_size",
           fmt::format("{} is not the language model's hidden_size {}", out, text_hidden));
  }
  if (c.hidden % c.heads != 0 || (c.hidden / c.heads) % 4 != 0) {
    v.fail("vision_config.num_heads",
           fmt::format("{} heads do not split {} into head sizes that are multiples of 4 (2D rotary)",
                       c.heads, c.hidden));
  }
  for (const std::int64_t l : c.full_attention_layers) {
    if (l >= c.layers) {
      v.fail("vision_config.fullatt_block_indexes",
             fmt::format("layer {} is past the {} blocks", l, c.layers));
    }
  }
  c.drop_cls = true;
  return c;
}

// The parameters Qwen2VisionTransformerPretrainedModel / Qwen2_5_VisionTransformerPretrainedModel register
// (modeling_qwen2_vl.py / modeling_qwen2_5_vl.py): PatchEmbed's Conv3d(in_channels, width, kernel
// (temporal_patch_size, patch_size, patch_size), bias=False), depth blocks (norm1 / norm2 LayerNorms with
// biases, or 2.5-VL's RMSNorms; attn.qkv width -> 3 width and attn.proj with biases; VisionMlp fc1 / fc2, or
// 2.5-VL's gate_proj / up_proj / down_proj, all with biases). The PatchMerger (ln_q over the width, mlp.0
// width m^2 -> width m^2 and mlp.2 width m^2 -> the language model's width, with biases) is the projector.
std::pair<std::int64_t, std::int64_t> qwen_vl_vision_parameters(const ModelConfig::VisionPart::Clip& c,
                                                                std::int64_t text_hidden,
                                                                const JsonReader& v) {
  const auto [mul, add] = vision_count_ops(v);
  const bool v2_5 = c.tower == ModelConfig::VisionPart::Tower::kQwen25Vl;
  const std::int64_t h = c.hidden, ff = c.intermediate;
  const std::int64_t patch =
      mul(mul(h, c.channels), mul(c.temporal_patch_size, mul(c.patch_size, c.patch_size)));
  const std::int64_t norms = v2_5 ? 2 * h : 4 * h;
  const std::int64_t attention = add({mul(h, 3 * h), 3 * h, mul(h, h), h});
  const std::int64_t mlp = v2_5 ? add({mul(3, mul(h, ff)), 2 * ff, h}) : add({mul(h, ff), ff, mul(ff, h), h});
  const std::int64_t block = add({norms, attention, mlp});
  const std::int64_t merged = mul(h, mul(c.spatial_merge_size, c.spatial_merge_size));
  const std::int64_t merger =
      add({v2_5 ? h : 2 * h, mul(merged, merged), merged, mul(merged, text_hidden), text_hidden});
  return {add({patch, mul(c.layers, block)}), merger};
}

// Qwen2VLConfig / Qwen2_5_VLConfig (Qwen2VLForConditionalGeneration / Qwen2_5_VLForConditionalGeneration):
// the vision transformer, its PatchMerger and the language model, all simulated (qwen2_vl_vision.h). The
// language model is text_config when there is one (transformers >= 4.52 writes it), else the top-level keys
// (the checkpoints' own files, written by 4.41.2), read as qwen2: Qwen2VLTextConfig and Qwen2_5_VLTextConfig
// have Qwen2Config's keys. Its rotary embedding is M-RoPE (rope_scaling type "mrope",
// Qwen2VLRotaryEmbedding).
ModelConfig qwen_vl(const JsonReader& r, bool v2_5) {
  nlohmann::json text = r.has("text_config") ? r.object_or_empty("text_config") : r.root();
  text.erase("vision_config");
  text.erase("rope_scaling");  // mrope_section: M-RoPE's split of the rotary dimensions (position ids only)
  text["model_type"] = "qwen2";
  ModelConfig m = text_model(text, r.source());
  m.vision.wrapper_model_type = v2_5 ? "qwen2_5_vl" : "qwen2_vl";
  m.vision.mrope = true;
  const JsonReader v = r.child_or_empty("vision_config");
  const ModelConfig::VisionPart::Clip c = qwen_vl_vision(v, v2_5, m.d_model);
  m.vision.model_type = v2_5 ? "qwen2_5_vl_vision" : "qwen2_vl_vision";
  m.vision.clip = c;
  const auto [tower, merger] = qwen_vl_vision_parameters(c, m.d_model, v);
  m.vision.tower_parameters = tower;
  m.vision.projector_parameters = merger;
  return m;
}
ModelConfig qwen2_vl(const JsonReader& r) { return qwen_vl(r, false); }
ModelConfig qwen2_5_vl(const JsonReader& r) { return qwen_vl(r, true); }

// ---- mllama (Llama 3.2 Vision) ----------------------------------------------------------------------------

// transformers' models/mllama (added in v4.45.0): configuration_mllama.py (MllamaVisionConfig,
// MllamaTextConfig, MllamaConfig; the stored copy at 032b32ab) and modeling_mllama.py (MllamaVisionModel,
// MllamaTextModel, MllamaForConditionalGeneration).

// MllamaVisionModel's parameters for a vision_config (MllamaVisionConfig's defaults for missing keys):
// patch_embedding Conv2d(num_channels, hidden, patch, bias=False); class_embedding (hidden);
// gated_positional_embedding: gate (1), embedding (patches + 1, hidden), tile_embedding (aspect ratios + 1,
// max_num_tiles x (patches + 1) x hidden); pre_ and post_tile_positional_embedding: embedding (aspect ratios
// + 1, max_num_tiles x hidden) and a gate (1) each; layernorm_pre and layernorm_post (weight and bias);
// transformer of num_hidden_layers MllamaVisionEncoderLayers (q/k/v/o_proj without bias, fc1 / fc2 with
// bias, input_layernorm and post_attention_layernorm) and global_transformer of num_global_layers gated
// ones (+ gate_attn and gate_ffn, one element each).
std::int64_t mllama_vision_parameters(const JsonReader& v, ModelConfig::VisionPart::Mllama& shape) {
  const std::int64_t h = v.integer_or("hidden_size", 1280);
  const std::int64_t ff = v.integer_or("intermediate_size", 5120);
  const std::int64_t layers = v.integer_or("num_hidden_layers", 32, kMaxLayers);
  const std::int64_t global = v.integer_or("num_global_layers", 8, kMaxLayers);
  const std::int64_t channels = v.integer_or("num_channels", 3, 64);
  const std::int64_t image = v.integer_or("image_size", 448);
  const std::int64_t patch = v.integer_or("patch_size", 14);
  const std::int64_t tiles = v.integer_or("max_num_tiles", 4, 64);
  const std::int64_t heads = v.integer_or("attention_heads", v.integer_or("num_attention_heads", 16));
  if (image % patch != 0) {
    v.fail("vision_config.image_size", fmt::format("{} is not a multiple of patch_size {}", image, patch));
  }
  if (h % heads != 0) {
    v.fail("vision_config.attention_heads", fmt::format("{} does not divide hidden_size {}", heads, h));
  }
  // MllamaVisionConfig.__init__ raises ValueError("max_num_tiles must be 4 for default supported aspect
  // ratios") when the list is absent; max_aspect_ratio_id is the list's length
  const std::vector<std::pair<std::int64_t, std::int64_t>> ratios =
      v.integer_pairs_or("supported_aspect_ratios", {});
  if (ratios.empty() && tiles != 4) {
    v.fail("vision_config.max_num_tiles", "must be 4 for the default supported_aspect_ratios");
  }
  const std::int64_t aspect_rows = (ratios.empty() ? 8 : static_cast<std::int64_t>(ratios.size())) + 1;
  shape = {.hidden = h,
           .intermediate = ff,
           .layers = layers,
           .global_layers = global,
           .channels = channels,
           .image_size = image,
           .patch_size = patch,
           .max_num_tiles = tiles,
           .aspect_ratios = aspect_rows - 1,
           .output_dim = v.integer_or("vision_output_dim", 7680)};
  const auto [mul, add] = vision_count_ops(v);
  const std::int64_t positions = add({mul(image / patch, image / patch), 1});
  const std::int64_t layer =
      add({mul(4, mul(h, h)), mul(h, ff), ff, mul(ff, h), h, 4 * h});  // attention, MLP, two LayerNorms
  const std::int64_t tile_embedding = add({mul(mul(aspect_rows, tiles), h), 1});
  return add({mul(mul(h, channels), mul(patch, patch)), h, 1, mul(positions, h),
              mul(mul(aspect_rows, tiles), mul(positions, h)), tile_embedding, tile_embedding, 2 * h, 2 * h,
              mul(layers, layer), mul(global, add({layer, 2}))});
}

// MllamaConfig (MllamaForConditionalGeneration): MllamaTextConfig's defaults for text_config's missing keys
// (the 11B model's shapes: 40 layers of which cross_attention_layers [3, 8, ..., 38] are
// MllamaCrossAttentionDecoderLayers). The step simulated is a text-only batch's (MllamaTextModel.forward
// skips a cross-attention layer when it has no cross_attention_states and no cached ones): embed_tokens of
// vocab_size + 8 rows, the self-attention layers (LlamaDecoderLayer's shapes), norm, lm_head of vocab_size.
// In memory but not run (mllama_parameters.h), counted as the vision part: MllamaVisionModel, the
// multi_modal_projector Linear(vision_output_dim, hidden, bias) and the cross-attention layers (cross_attn's
// q/k/v/o_proj, q_norm and k_norm of head_dim, input_layernorm, cross_attn_attn_gate, the MLP,
// post_attention_layernorm, cross_attn_mlp_gate).
ModelConfig mllama(const JsonReader& r) {
  const JsonReader t = r.child_or_empty("text_config");
  const std::int64_t layers = t.integer_or("num_hidden_layers", 40, kMaxLayers);
  std::vector<std::int64_t> cross = t.integers_or_empty("cross_attention_layers");
  if (!t.has("cross_attention_layers")) {
    cross = {3, 8, 13, 18, 23, 28, 33, 38};
  }
  std::sort(cross.begin(), cross.end());
  if (std::adjacent_find(cross.begin(), cross.end()) != cross.end() ||
      (!cross.empty() && cross.back() >= layers)) {
    t.fail("text_config.cross_attention_layers",
           fmt::format("must be distinct layer indices below num_hidden_layers {}", layers));
  }
  ModelConfig m;
  m.family = ModelFamily::kLlama;
  m.vocab_size = t.integer_or("vocab_size", 128256);
  m.extra_embedding_rows = 8;
  m.d_model = t.integer_or("hidden_size", 4096);
  m.n_layers = layers - static_cast<std::int64_t>(cross.size());
  m.n_heads = t.integer_or("num_attention_heads", 32);
  m.n_kv_heads = t.integer_or("num_key_value_heads", 8);
  m.head_dim = m.d_model / m.n_heads;  // MllamaTextSelfAttention: hidden_size // num_attention_heads
  m.d_ff = t.integer_or("intermediate_size", 14336);
  m.max_positions = t.integer_or("max_position_embeddings", 131072);
  m.tied_embeddings = t.boolean_or("tie_word_embeddings", false);
  m.dropout.attention = t.probability_or("dropout", 0.0);
  m.gated_activation = gated_activation(t, "hidden_act", "silu");
  if (m.n_layers == 0) {
    t.fail("text_config.cross_attention_layers", "leaves no self-attention layer");
  }
  m.model_type = "mllama_text_model";
  m.vision.wrapper_model_type = "mllama";
  const JsonReader v = r.child_or_empty("vision_config");
  m.vision.model_type = v.string_or("model_type", "mllama_vision_model");
  if (m.vision.model_type != "mllama_vision_model") {
    v.fail("vision_config.model_type",
           fmt::format("'{}' is not modelled (mllama_vision_model is)", m.vision.model_type));
  }
  m.vision.tower_parameters = mllama_vision_parameters(v, m.vision.mllama);
  const auto [mul, add] = vision_count_ops(v);
  const std::int64_t d = m.d_model;
  m.vision.projector_parameters = add({mul(m.vision.mllama.output_dim, d), d});
  const std::int64_t cross_layer = add({mul(d, m.q_dim()), mul(2, mul(d, m.kv_dim())), mul(m.q_dim(), d),
                                        2 * m.head_dim, d, 1, mul(3, mul(d, m.d_ff)), d, 1});
  m.vision.cross_attention_parameters = mul(static_cast<std::int64_t>(cross.size()), cross_layer);
  m.vision.cross_attention_layers = cross;
  return m;
}

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
  m.sliding_window = r.integer_or("attention_chunk_size", 8192);
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
