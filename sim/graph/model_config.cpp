#include "sim/graph/model_config.h"

#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "sim/core/error.h"

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
  return m;
}

ModelConfig cs336_preset(std::string name, std::int64_t d_model, std::int64_t d_ff, std::int64_t n_layers,
                         std::int64_t n_heads, std::int64_t context, ModelCode code) {
  ModelConfig m = llama_preset(std::move(name), 10000, d_model, n_layers, n_heads, n_heads, d_ff, context);
  m.code = code;
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
      llama_preset("mistral-7b", 32000, 4096, 32, 32, 8, 14336, 32768),
      // TinyLlama/TinyLlama-1.1B (config.json): the Llama-style 1B the dynamic-shape sweep uses.
      llama_preset("tinyllama-1.1b", 32000, 2048, 22, 32, 4, 5632, 2048),
      // The CS336 runs in shared/traces/real: MAGMA27 ran the staff model at d768 (context 256); kkaitlyn111
      // ran her own assignment-1 code at d2560 (context 128-512).
      cs336_preset("cs336-small", 768, 3072, 12, 12, 256, ModelCode::kCs336Basics),
      cs336_preset("cs336-2.7b", 2560, 10240, 32, 32, 512, ModelCode::kCs336Kkaitlyn111),
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
    add(out, p + "attn.c_attn.weight", {d, m.q_dim() + 2 * m.kv_dim()}, l);  // Conv1D: (in, out)
    add(out, p + "attn.c_attn.bias", {m.q_dim() + 2 * m.kv_dim()}, l);
    add(out, p + "attn.c_proj.weight", {m.q_dim(), d}, l);
    add(out, p + "attn.c_proj.bias", {d}, l);
    add(out, p + "ln_2.weight", {d}, l);
    add(out, p + "ln_2.bias", {d}, l);
    add(out, p + "mlp.c_fc.weight", {d, m.d_ff}, l);
    add(out, p + "mlp.c_fc.bias", {m.d_ff}, l);
    add(out, p + "mlp.c_proj.weight", {m.d_ff, d}, l);
    add(out, p + "mlp.c_proj.bias", {d}, l);
  }
  add(out, "transformer.ln_f.weight", {d});
  add(out, "transformer.ln_f.bias", {d});
  if (!m.tied_embeddings) {
    add(out, "lm_head.weight", {m.vocab_size, d});
  }
}

void llama_shapes(const ModelConfig& m, std::vector<ParameterShape>& out) {
  const std::int64_t d = m.d_model;
  add(out, "model.embed_tokens.weight", {m.vocab_size, d});
  const bool qkv_bias = m.qkv_bias || m.bias;
  for (int l = 0; l < m.n_layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
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
    add(out, p + "mlp.gate_proj.weight", {m.d_ff, d}, l);
    add(out, p + "mlp.up_proj.weight", {m.d_ff, d}, l);
    add(out, p + "mlp.down_proj.weight", {d, m.d_ff}, l);
    if (m.bias) {
      add(out, p + "mlp.gate_proj.bias", {m.d_ff}, l);
      add(out, p + "mlp.up_proj.bias", {m.d_ff}, l);
      add(out, p + "mlp.down_proj.bias", {d}, l);
    }
    add(out, p + "input_layernorm.weight", {d}, l);
    add(out, p + "post_attention_layernorm.weight", {d}, l);
  }
  add(out, "model.norm.weight", {d});
  if (!m.tied_embeddings) {
    add(out, "lm_head.weight", {m.vocab_size, d});
  }
}

// Both CS336 codes register the same tensors; the staff model registers attn, ffn, ln1, ln2 in that order,
// the kkaitlyn111 model ln1, attn, ln2, ffn.
void cs336_shapes(const ModelConfig& m, std::vector<ParameterShape>& out) {
  const std::int64_t d = m.d_model;
  add(out, "token_embeddings.weight", {m.vocab_size, d});
  for (int l = 0; l < m.n_layers; ++l) {
    const std::string p = fmt::format("layers.{}.", l);
    const auto attn = [&] {
      add(out, p + "attn.q_proj.weight", {m.q_dim(), d}, l);
      add(out, p + "attn.k_proj.weight", {m.kv_dim(), d}, l);
      add(out, p + "attn.v_proj.weight", {m.kv_dim(), d}, l);
      add(out, p + "attn.output_proj.weight", {d, m.q_dim()}, l);
    };
    const auto ffn = [&] {
      add(out, p + "ffn.w1.weight", {m.d_ff, d}, l);
      add(out, p + "ffn.w2.weight", {d, m.d_ff}, l);
      add(out, p + "ffn.w3.weight", {m.d_ff, d}, l);
    };
    if (m.code == ModelCode::kCs336Basics) {
      attn();
      ffn();
      add(out, p + "ln1.weight", {d}, l);
      add(out, p + "ln2.weight", {d}, l);
    } else {
      add(out, p + "ln1.weight", {d}, l);
      attn();
      add(out, p + "ln2.weight", {d}, l);
      ffn();
    }
  }
  add(out, "ln_final.weight", {d});
  add(out, "lm_head.weight", {m.vocab_size, d});
}

// ---- Hugging Face config.json ----------------------------------------------------------------------------

class JsonReader {
 public:
  JsonReader(const nlohmann::json& root, std::string_view source) : m_root(root), m_source(source) {}

  std::int64_t integer(const char* key) const {
    const nlohmann::json& v = required(key);
    if (!v.is_number_integer()) {
      throw InputError(fmt::format("{}: key '{}' must be an integer, got {}", m_source, key, v.type_name()));
    }
    const std::int64_t x = v.get<std::int64_t>();
    if (x <= 0) {
      throw InputError(fmt::format("{}: key '{}' must be positive, got {}", m_source, key, x));
    }
    return x;
  }
  std::int64_t integer_or(const char* key, std::int64_t fallback) const {
    return has(key) ? integer(key) : fallback;
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
  // A probability in [0, 1), GPT2Config / LlamaConfig style.
  double probability_or(const char* key, double fallback) const {
    if (!has(key)) {
      return fallback;
    }
    const nlohmann::json& v = m_root.at(key);
    if (!v.is_number()) {
      throw InputError(fmt::format("{}: key '{}' must be a number, got {}", m_source, key, v.type_name()));
    }
    const double p = v.get<double>();
    if (!(p >= 0.0 && p < 1.0)) {
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

std::string architecture_of(const nlohmann::json& root, std::string_view source) {
  if (root.contains("architectures")) {
    const nlohmann::json& a = root.at("architectures");
    if (!a.is_array() || a.empty() || !a.at(0).is_string()) {
      throw InputError(fmt::format("{}: key 'architectures' must be a non-empty list of names", source));
    }
    return a.at(0).get<std::string>();
  }
  if (root.contains("model_type") && root.at("model_type").is_string()) {
    const std::string t = root.at("model_type").get<std::string>();
    if (t == "llama") {
      return "LlamaForCausalLM";
    }
    if (t == "mistral") {
      return "MistralForCausalLM";
    }
    if (t == "qwen2") {
      return "Qwen2ForCausalLM";
    }
    if (t == "gpt2") {
      return "GPT2LMHeadModel";
    }
    throw InputError(fmt::format("{}: key 'model_type': unsupported model type '{}'", source, t));
  }
  throw InputError(fmt::format("{}: missing key 'architectures'", source));
}

}  // namespace

std::int64_t ParameterShape::numel() const {
  std::int64_t n = 1;
  for (std::int64_t d : shape) {
    n *= d;
  }
  return n;
}

std::vector<ParameterShape> ModelConfig::parameter_shapes() const {
  std::vector<ParameterShape> out;
  if (code != ModelCode::kTorchModules) {
    cs336_shapes(*this, out);
  } else if (family == ModelFamily::kGpt2) {
    gpt2_shapes(*this, out);
  } else {
    llama_shapes(*this, out);
  }
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

ModelConfig model_from_hf_config_json(std::string_view json_text, std::string_view source) {
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::parse_error& e) {
    throw InputError(fmt::format("{}: not valid JSON: {}", source, e.what()));
  }
  if (!root.is_object()) {
    throw InputError(fmt::format("{}: expected a JSON object (a Hugging Face config.json)", source));
  }
  const std::string arch = architecture_of(root, source);
  const JsonReader r(root, source);
  ModelConfig m;
  m.name = std::string(source);
  if (arch == "GPT2LMHeadModel") {
    m.family = ModelFamily::kGpt2;
    m.vocab_size = r.integer("vocab_size");
    m.d_model = r.integer("n_embd");
    m.n_layers = r.integer("n_layer");
    m.n_heads = r.integer("n_head");
    m.n_kv_heads = m.n_heads;
    m.head_dim = m.d_model / m.n_heads;
    m.d_ff = r.integer_or("n_inner", 4 * m.d_model);
    m.max_positions = r.integer("n_positions");
    m.tied_embeddings = r.boolean_or("tie_word_embeddings", true);
    m.dropout = {r.probability_or("embd_pdrop", 0.1), r.probability_or("attn_pdrop", 0.1),
                 r.probability_or("resid_pdrop", 0.1)};  // GPT2Config's defaults
    const std::string act = r.string_or("activation_function", "gelu_new");  // GPT2Config's default
    if (act == "gelu_new") {
      m.gelu = GeluKind::kNew;
    } else if (act == "gelu_pytorch_tanh") {
      m.gelu = GeluKind::kPytorchTanh;
    } else if (act == "gelu") {
      m.gelu = GeluKind::kExact;
    } else {
      throw InputError(
          fmt::format("{}: key 'activation_function': unsupported '{}' (supported: gelu_new, "
                      "gelu_pytorch_tanh, gelu)",
                      source, act));
    }
    m.bias = true;
    m.norm = NormKind::kLayerNorm;
    m.mlp = MlpKind::kGelu;
  } else if (arch == "LlamaForCausalLM" || arch == "MistralForCausalLM" || arch == "Qwen2ForCausalLM") {
    m.family = ModelFamily::kLlama;
    m.vocab_size = r.integer("vocab_size");
    m.d_model = r.integer("hidden_size");
    m.n_layers = r.integer("num_hidden_layers");
    m.n_heads = r.integer("num_attention_heads");
    m.n_kv_heads = r.integer_or("num_key_value_heads", m.n_heads);
    m.head_dim = r.integer_or("head_dim", m.d_model / m.n_heads);
    m.d_ff = r.integer("intermediate_size");
    m.max_positions = r.integer_or("max_position_embeddings", 4096);
    m.tied_embeddings = r.boolean_or("tie_word_embeddings", false);
    m.dropout.attention = r.probability_or("attention_dropout", 0.0);
    m.bias = arch != "Qwen2ForCausalLM" && r.boolean_or("attention_bias", false);
    m.qkv_bias = arch == "Qwen2ForCausalLM";
    if (r.boolean_or("mlp_bias", false)) {
      throw InputError(fmt::format("{}: key 'mlp_bias': MLP biases are not supported", source));
    }
  } else {
    throw InputError(
        fmt::format("{}: key 'architectures': unsupported architecture '{}' (supported: LlamaForCausalLM, "
                    "MistralForCausalLM, Qwen2ForCausalLM, GPT2LMHeadModel)",
                    source, arch));
  }
  if (m.n_heads % m.n_kv_heads != 0) {
    throw InputError(fmt::format("{}: key 'num_key_value_heads': {} does not divide num_attention_heads {}",
                                 source, m.n_kv_heads, m.n_heads));
  }
  return m;
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
  std::ifstream in(name_or_path);
  if (!in) {
    throw InputError(fmt::format("{}: cannot open the model config file", name_or_path));
  }
  std::stringstream text;
  text << in.rdbuf();
  return model_from_hf_config_json(text.str(), name_or_path);
}

std::string_view model_code_name(ModelCode code) {
  switch (code) {
    case ModelCode::kTorchModules:
      return "torch-modules";
    case ModelCode::kCs336Basics:
      return "cs336-basics";
    case ModelCode::kCs336Kkaitlyn111:
      return "cs336-kkaitlyn111";
  }
  return "?";
}

ModelCode parse_model_code(std::string_view text, std::string_view option) {
  for (ModelCode c : {ModelCode::kTorchModules, ModelCode::kCs336Basics, ModelCode::kCs336Kkaitlyn111}) {
    if (model_code_name(c) == text) {
      return c;
    }
  }
  throw InputError(
      fmt::format("{}: unknown model code '{}' (known: torch-modules, cs336-basics, "
                  "cs336-kkaitlyn111)",
                  option, text));
}

}  // namespace vramsim
