#include "sim/models/model_config.h"

#include "sim/hub/hf_hub_cache.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "sim/core/checked.h"
#include "sim/core/error.h"
#include "sim/core/input_file.h"
#include "sim/models/layer_code.h"

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

// Current families, as the shape keys of each checkpoint's config.json (the Hugging Face repo in the second
// column), read by the same model_type readers as a config.json file.
struct HfPreset {
  const char* name;
  const char* source;  // Hugging Face repo id
  const char* json;
};
// clang-format off
constexpr HfPreset kHfPresets[] = {
    {"llama-3.1-8b", "meta-llama/Llama-3.1-8B", R"({"model_type": "llama", "vocab_size": 128256, "hidden_size": 4096,
      "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
      "max_position_embeddings": 131072, "tie_word_embeddings": false})"},
    {"llama-3.1-70b", "meta-llama/Llama-3.1-70B", R"({"model_type": "llama", "vocab_size": 128256, "hidden_size": 8192,
      "intermediate_size": 28672, "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
      "max_position_embeddings": 131072, "tie_word_embeddings": false})"},
    {"llama-3.1-405b", "meta-llama/Llama-3.1-405B", R"({"model_type": "llama", "vocab_size": 128256, "hidden_size": 16384,
      "intermediate_size": 53248, "num_hidden_layers": 126, "num_attention_heads": 128, "num_key_value_heads": 8,
      "max_position_embeddings": 131072, "tie_word_embeddings": false})"},
    {"llama-3.2-1b", "meta-llama/Llama-3.2-1B", R"({"model_type": "llama", "vocab_size": 128256, "hidden_size": 2048,
      "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
      "head_dim": 64, "max_position_embeddings": 131072, "tie_word_embeddings": true})"},
    {"llama-3.2-3b", "meta-llama/Llama-3.2-3B", R"({"model_type": "llama", "vocab_size": 128256, "hidden_size": 3072,
      "intermediate_size": 8192, "num_hidden_layers": 28, "num_attention_heads": 24, "num_key_value_heads": 8,
      "head_dim": 128, "max_position_embeddings": 131072, "tie_word_embeddings": true})"},
    {"llama-3.3-70b", "meta-llama/Llama-3.3-70B-Instruct", R"({"model_type": "llama", "vocab_size": 128256,
      "hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80, "num_attention_heads": 64,
      "num_key_value_heads": 8, "max_position_embeddings": 131072, "tie_word_embeddings": false})"},
    {"qwen2.5-3b", "Qwen/Qwen2.5-3B", R"({"model_type": "qwen2", "vocab_size": 151936, "hidden_size": 2048,
      "intermediate_size": 11008, "num_hidden_layers": 36, "num_attention_heads": 16, "num_key_value_heads": 2,
      "max_position_embeddings": 32768, "tie_word_embeddings": true})"},
    {"qwen2.5-7b", "Qwen/Qwen2.5-7B", R"({"model_type": "qwen2", "vocab_size": 152064, "hidden_size": 3584,
      "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
      "max_position_embeddings": 131072, "tie_word_embeddings": false})"},
    {"qwen2.5-14b", "Qwen/Qwen2.5-14B", R"({"model_type": "qwen2", "vocab_size": 152064, "hidden_size": 5120,
      "intermediate_size": 13824, "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8,
      "max_position_embeddings": 131072, "tie_word_embeddings": false})"},
    {"qwen2.5-32b", "Qwen/Qwen2.5-32B", R"({"model_type": "qwen2", "vocab_size": 152064, "hidden_size": 5120,
      "intermediate_size": 27648, "num_hidden_layers": 64, "num_attention_heads": 40, "num_key_value_heads": 8,
      "max_position_embeddings": 131072, "tie_word_embeddings": false})"},
    {"qwen2.5-72b", "Qwen/Qwen2.5-72B", R"({"model_type": "qwen2", "vocab_size": 152064, "hidden_size": 8192,
      "intermediate_size": 29568, "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
      "max_position_embeddings": 131072, "tie_word_embeddings": false})"},
    {"qwen3-0.6b", "Qwen/Qwen3-0.6B", R"({"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 1024,
      "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
      "head_dim": 128, "max_position_embeddings": 40960, "tie_word_embeddings": true})"},
    {"qwen3-1.7b", "Qwen/Qwen3-1.7B", R"({"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 2048,
      "intermediate_size": 6144, "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
      "head_dim": 128, "max_position_embeddings": 40960, "tie_word_embeddings": true})"},
    {"qwen3-4b", "Qwen/Qwen3-4B", R"({"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 2560,
      "intermediate_size": 9728, "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8,
      "head_dim": 128, "max_position_embeddings": 40960, "tie_word_embeddings": true})"},
    {"qwen3-8b", "Qwen/Qwen3-8B", R"({"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 4096,
      "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8,
      "head_dim": 128, "max_position_embeddings": 40960, "tie_word_embeddings": false})"},
    {"qwen3-14b", "Qwen/Qwen3-14B", R"({"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 5120,
      "intermediate_size": 17408, "num_hidden_layers": 40, "num_attention_heads": 40, "num_key_value_heads": 8,
      "head_dim": 128, "max_position_embeddings": 40960, "tie_word_embeddings": false})"},
    {"qwen3-32b", "Qwen/Qwen3-32B", R"({"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 5120,
      "intermediate_size": 25600, "num_hidden_layers": 64, "num_attention_heads": 64, "num_key_value_heads": 8,
      "head_dim": 128, "max_position_embeddings": 40960, "tie_word_embeddings": false})"},
    {"qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B", R"({"model_type": "qwen3_moe", "vocab_size": 151936, "hidden_size": 2048,
      "intermediate_size": 6144, "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4,
      "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768,
      "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": true, "max_position_embeddings": 40960,
      "tie_word_embeddings": false})"},
    // Qwen/Qwen3-235B-A22B: the shapes of the stored Qwen3-235B-A22B-Instruct-2507 config.json
    // (tests/data/hf_configs); Qwen3-235B-A22B's own context is 40960 (its config.json as a Python dict, search id
    // 22176531064)
    {"qwen3-235b-a22b", "Qwen/Qwen3-235B-A22B", R"({"model_type": "qwen3_moe", "vocab_size": 151936,
      "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 94, "num_attention_heads": 64,
      "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8,
      "moe_intermediate_size": 1536, "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": true,
      "max_position_embeddings": 40960, "tie_word_embeddings": false})"},
    {"qwen1.5-moe", "Qwen/Qwen1.5-MoE-A2.7B", R"({"model_type": "qwen2_moe", "vocab_size": 151936,
      "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 24, "num_attention_heads": 16,
      "num_key_value_heads": 16, "num_experts": 60, "num_experts_per_tok": 4, "moe_intermediate_size": 1408,
      "shared_expert_intermediate_size": 5632, "decoder_sparse_step": 1, "norm_topk_prob": false,
      "max_position_embeddings": 8192, "tie_word_embeddings": false})"},
    {"gemma-2b", "google/gemma-2b (unsloth/gemma-2b)", R"({"model_type": "gemma", "vocab_size": 256000,
      "hidden_size": 2048, "intermediate_size": 16384, "num_hidden_layers": 18, "num_attention_heads": 8,
      "num_key_value_heads": 1, "head_dim": 256, "max_position_embeddings": 8192})"},
    {"gemma-2-2b", "google/gemma-2-2b", R"({"model_type": "gemma2", "vocab_size": 256000, "hidden_size": 2304,
      "intermediate_size": 9216, "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
      "head_dim": 256, "max_position_embeddings": 8192})"},
    {"gemma-2-9b", "google/gemma-2-9b", R"({"model_type": "gemma2", "vocab_size": 256000, "hidden_size": 3584,
      "intermediate_size": 14336, "num_hidden_layers": 42, "num_attention_heads": 16, "num_key_value_heads": 8,
      "head_dim": 256, "max_position_embeddings": 8192})"},
    // a user's downloaded google/gemma-2-27b-it config.json quoted in vllm-project/vllm issue "v0.8.0 model_type
    // error" (search id 56987265480); the same shapes in a test fixture (search id 52328577661)
    {"gemma-2-27b", "google/gemma-2-27b", R"({"model_type": "gemma2", "vocab_size": 256000, "hidden_size": 4608,
      "intermediate_size": 36864, "num_hidden_layers": 46, "num_attention_heads": 32, "num_key_value_heads": 16,
      "head_dim": 128, "max_position_embeddings": 8192})"},
    {"gemma-3-1b", "google/gemma-3-1b-it", R"({"model_type": "gemma3_text", "vocab_size": 262144,
      "hidden_size": 1152, "intermediate_size": 6912, "num_hidden_layers": 26, "num_attention_heads": 4,
      "num_key_value_heads": 1, "head_dim": 256, "sliding_window": 512, "max_position_embeddings": 32768})"},
    {"gemma-3-4b", "google/gemma-3-4b-it (text_config)", R"({"model_type": "gemma3_text", "vocab_size": 262208,
      "hidden_size": 2560, "intermediate_size": 10240, "num_hidden_layers": 34, "num_attention_heads": 8,
      "num_key_value_heads": 4, "head_dim": 256, "sliding_window": 1024})"},
    // the Hub file's text_config names only these keys; Gemma3TextConfig's defaults give head_dim 256 and
    // vocab_size 262208 (a copy of google/gemma-3-12b-it's config.json in a public repo, search id 52647932717)
    {"gemma-3-12b", "google/gemma-3-12b-it (text_config)", R"({"model_type": "gemma3_text", "vocab_size": 262208,
      "hidden_size": 3840, "intermediate_size": 15360, "num_hidden_layers": 48, "num_attention_heads": 16,
      "num_key_value_heads": 8, "head_dim": 256, "sliding_window": 1024})"},
    {"gemma-3-27b", "google/gemma-3-27b-it (text_config)", R"({"model_type": "gemma3_text", "vocab_size": 262208,
      "hidden_size": 5376, "intermediate_size": 21504, "num_hidden_layers": 62, "num_attention_heads": 32,
      "num_key_value_heads": 16, "head_dim": 128, "sliding_window": 1024})"},
    {"mistral-7b-v0.3", "mistralai/Mistral-7B-Instruct-v0.3", R"({"model_type": "mistral", "vocab_size": 32768,
      "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
      "num_key_value_heads": 8, "max_position_embeddings": 32768, "tie_word_embeddings": false})"},
    {"mixtral-8x7b", "mistralai/Mixtral-8x7B-v0.1", R"({"model_type": "mixtral", "vocab_size": 32000, "hidden_size": 4096,
      "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
      "num_local_experts": 8, "num_experts_per_tok": 2, "max_position_embeddings": 32768})"},
    // mistralai/Mixtral-8x22B-v0.1: the shape keys of its config.json as a Go test quotes them ("8x22b", search
    // id 56951182956); no stored copy of the whole file was found
    {"mixtral-8x22b", "mistralai/Mixtral-8x22B-v0.1", R"({"model_type": "mixtral", "vocab_size": 32000,
      "hidden_size": 6144, "intermediate_size": 16384, "num_hidden_layers": 56, "num_attention_heads": 48,
      "num_key_value_heads": 8, "num_local_experts": 8, "num_experts_per_tok": 2, "max_position_embeddings": 65536,
      "tie_word_embeddings": false})"},
    {"phi-2", "microsoft/phi-2", R"({"model_type": "phi", "vocab_size": 51200, "hidden_size": 2560,
      "intermediate_size": 10240, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
      "hidden_act": "gelu_new", "partial_rotary_factor": 0.4, "qk_layernorm": false, "max_position_embeddings": 2048,
      "tie_word_embeddings": false})"},
    {"phi-3-mini", "microsoft/Phi-3-mini-4k-instruct", R"({"model_type": "phi3", "vocab_size": 32064, "hidden_size": 3072,
      "intermediate_size": 8192, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
      "max_position_embeddings": 4096})"},
    {"phi-3-medium", "microsoft/Phi-3-medium-4k-instruct", R"({"model_type": "phi3", "vocab_size": 32064,
      "hidden_size": 5120, "intermediate_size": 17920, "num_hidden_layers": 40, "num_attention_heads": 40,
      "num_key_value_heads": 10, "max_position_embeddings": 4096, "tie_word_embeddings": false})"},
    {"phi-4", "microsoft/phi-4", R"({"model_type": "phi3", "vocab_size": 100352, "hidden_size": 5120,
      "intermediate_size": 17920, "num_hidden_layers": 40, "num_attention_heads": 40, "num_key_value_heads": 10,
      "max_position_embeddings": 16384, "tie_word_embeddings": false})"},
    {"olmo-2-7b", "allenai/OLMo-2-1124-7B", R"({"model_type": "olmo2", "vocab_size": 100352, "hidden_size": 4096,
      "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
      "max_position_embeddings": 4096, "tie_word_embeddings": false})"},
    {"granite-3.3-8b", "ibm-granite/granite-3.3-8b-instruct", R"({"model_type": "granite", "vocab_size": 49159,
      "hidden_size": 4096, "intermediate_size": 12800, "num_hidden_layers": 40, "num_attention_heads": 32,
      "num_key_value_heads": 8, "embedding_multiplier": 12.0, "residual_multiplier": 0.22,
      "attention_multiplier": 0.0078125, "logits_scaling": 16.0, "max_position_embeddings": 131072,
      "tie_word_embeddings": true})"},
    {"starcoder2-3b", "bigcode/starcoder2-3b", R"({"model_type": "starcoder2", "vocab_size": 49152,
      "hidden_size": 3072, "intermediate_size": 12288, "num_hidden_layers": 30, "num_attention_heads": 24,
      "num_key_value_heads": 2, "hidden_act": "gelu_pytorch_tanh", "use_bias": true, "sliding_window": 4096,
      "max_position_embeddings": 16384})"},
    {"falcon-7b", "tiiuae/falcon-7b", R"({"model_type": "falcon", "vocab_size": 65024, "hidden_size": 4544,
      "num_hidden_layers": 32, "num_attention_heads": 71, "multi_query": true, "parallel_attn": true,
      "new_decoder_architecture": false, "bias": false, "alibi": false})"},
    {"llama-4-scout", "meta-llama/Llama-4-Scout-17B-16E (text_config)", R"({"model_type": "llama4_text",
      "vocab_size": 202048, "hidden_size": 5120, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
      "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
      "num_local_experts": 16, "num_experts_per_tok": 1, "interleave_moe_layer_step": 1, "use_qk_norm": true,
      "attention_chunk_size": 8192, "max_position_embeddings": 262144})"},
    {"deepseek-v3", "deepseek-ai/DeepSeek-V3", R"({"model_type": "deepseek_v3", "vocab_size": 129280, "hidden_size": 7168,
      "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128,
      "n_shared_experts": 1, "n_routed_experts": 256, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
      "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
      "max_position_embeddings": 163840})"},
    {"gpt-oss-20b", "openai/gpt-oss-20b", R"({"model_type": "gpt_oss", "vocab_size": 201088, "hidden_size": 2880,
      "intermediate_size": 2880, "num_hidden_layers": 24, "num_attention_heads": 64, "num_key_value_heads": 8,
      "head_dim": 64, "num_local_experts": 32, "num_experts_per_tok": 4, "sliding_window": 128,
      "max_position_embeddings": 131072})"},
    {"gpt-oss-120b", "openai/gpt-oss-120b", R"({"model_type": "gpt_oss", "vocab_size": 201088, "hidden_size": 2880,
      "intermediate_size": 2880, "num_hidden_layers": 36, "num_attention_heads": 64, "num_key_value_heads": 8,
      "head_dim": 64, "num_local_experts": 128, "num_experts_per_tok": 4, "sliding_window": 128,
      "max_position_embeddings": 131072})"},
};
// clang-format on

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

void linear_shapes(std::vector<ParameterShape>& out, const std::string& name, std::int64_t in,
                   std::int64_t out_features, int layer, bool bias) {
  add(out, name + ".weight", {out_features, in}, layer);
  if (bias) {
    add(out, name + ".bias", {out_features}, layer);
  }
}

// DeepseekV3Attention: q_proj or q_a_proj, q_a_layernorm, q_b_proj; kv_a_proj_with_mqa, kv_a_layernorm,
// kv_b_proj; o_proj (attention_bias on q_a, kv_a and o).
void mla_shapes(const ModelConfig& m, std::vector<ParameterShape>& out, const std::string& p, int l) {
  const ModelConfig::Mla& a = m.mla;
  const std::int64_t h = m.n_heads, qk = a.qk_nope_head_dim + a.qk_rope_head_dim;
  if (a.q_lora_rank == 0) {
    linear_shapes(out, p + "self_attn.q_proj", m.d_model, h * qk, l, false);
  } else {
    linear_shapes(out, p + "self_attn.q_a_proj", m.d_model, a.q_lora_rank, l, m.bias);
    add(out, p + "self_attn.q_a_layernorm.weight", {a.q_lora_rank}, l);
    linear_shapes(out, p + "self_attn.q_b_proj", a.q_lora_rank, h * qk, l, false);
  }
  linear_shapes(out, p + "self_attn.kv_a_proj_with_mqa", m.d_model, a.kv_lora_rank + a.qk_rope_head_dim, l,
                m.bias);
  add(out, p + "self_attn.kv_a_layernorm.weight", {a.kv_lora_rank}, l);
  linear_shapes(out, p + "self_attn.kv_b_proj", a.kv_lora_rank, h * (a.qk_nope_head_dim + a.v_head_dim), l,
                false);
  linear_shapes(out, p + "self_attn.o_proj", h * a.v_head_dim, m.d_model, l, m.bias);
}

void attention_shapes(const ModelConfig& m, std::vector<ParameterShape>& out, const std::string& p, int l) {
  const std::int64_t d = m.d_model;
  if (m.mla.kv_lora_rank > 0) {
    mla_shapes(m, out, p, l);
    return;
  }
  if (m.model_type == "falcon") {  // FalconAttention: query_key_value, dense (bias: config.bias)
    linear_shapes(out, p + "self_attention.query_key_value", d, m.q_dim() + 2 * m.kv_dim(), l, m.bias);
    linear_shapes(out, p + "self_attention.dense", m.q_dim(), d, l, m.bias);
    return;
  }
  if (m.fused_qkv) {  // Phi3Attention registers o_proj before qkv_proj
    add(out, p + "self_attn.o_proj.weight", {d, m.q_dim()}, l);
    add(out, p + "self_attn.qkv_proj.weight", {m.q_dim() + 2 * m.kv_dim(), d}, l);
    return;
  }
  if (m.attention_sinks) {  // GptOssAttention's own parameter comes before its submodules'
    add(out, p + "self_attn.sinks", {m.n_heads}, l);
  }
  const bool qkv_bias = m.qkv_bias || m.bias;
  linear_shapes(out, p + "self_attn.q_proj", d, m.q_dim(), l, qkv_bias);
  linear_shapes(out, p + "self_attn.k_proj", d, m.kv_dim(), l, qkv_bias);
  linear_shapes(out, p + "self_attn.v_proj", d, m.kv_dim(), l, qkv_bias);
  // PhiAttention calls its output projection `dense`
  linear_shapes(out, p + (m.model_type == "phi" ? "self_attn.dense" : "self_attn.o_proj"), m.q_dim(), d, l,
                m.bias);
  if (m.qk_norm == ModelConfig::QkNorm::kPerHead) {
    add(out, p + "self_attn.q_norm.weight", {m.head_dim}, l);
    add(out, p + "self_attn.k_norm.weight", {m.head_dim}, l);
  } else if (m.qk_norm == ModelConfig::QkNorm::kWholeProjection) {
    add(out, p + "self_attn.q_norm.weight", {m.q_dim()}, l);
    add(out, p + "self_attn.k_norm.weight", {m.kv_dim()}, l);
  }
}

// A GELU MLP in the llama family: Starcoder2MLP (c_fc, c_proj), PhiMLP (fc1, fc2), FalconMLP
// (dense_h_to_4h, dense_4h_to_h).
void gelu_mlp_shapes(const ModelConfig& m, std::vector<ParameterShape>& out, const std::string& p, int l) {
  const bool phi = m.model_type == "phi", falcon = m.model_type == "falcon";
  linear_shapes(out,
                p + (phi      ? "mlp.fc1"
                     : falcon ? "mlp.dense_h_to_4h"
                              : "mlp.c_fc"),
                m.d_model, m.d_ff, l, m.bias);
  linear_shapes(out,
                p + (phi      ? "mlp.fc2"
                     : falcon ? "mlp.dense_4h_to_h"
                              : "mlp.c_proj"),
                m.d_ff, m.d_model, l, m.bias);
}

// The feed-forward part of layer l: a gated MLP, or a sparse MoE block (Mixtral's block_sparse_moe: gate,
// experts; Qwen2-MoE's mlp: gate, experts, shared_expert, shared_expert_gate; Qwen3-MoE's mlp: gate,
// experts; DeepSeek-V3's mlp: experts, gate, shared_experts; gpt-oss's mlp: router, experts (fused);
// Llama 4's feed_forward: experts (fused), router, shared_expert).
void feed_forward_shapes(const ModelConfig& m, std::vector<ParameterShape>& out, const std::string& p,
                         int l) {
  const std::int64_t d = m.d_model;
  const bool llama4 = m.model_type == "llama4_text";
  if (m.mlp == MlpKind::kGelu) {
    gelu_mlp_shapes(m, out, p, l);
    return;
  }
  if (!m.moe.sparse(l)) {
    gated_mlp_shapes(out, p + (llama4 ? "feed_forward." : "mlp."), d, m.d_ff, l, m.bias, m.fused_gate_up,
                     false);
    return;
  }
  const MoeConfig& moe = m.moe;
  if (moe.fused_experts) {
    const std::string block = p + (llama4 ? "feed_forward." : "mlp.");
    const auto router = [&] {
      add(out, block + "router.weight", {moe.n_experts, d}, l);
      if (moe.router_bias) {
        add(out, block + "router.bias", {moe.n_experts}, l);
      }
    };
    if (!llama4) {
      router();
    }
    add(out, block + "experts.gate_up_proj", {moe.local_experts(), d, 2 * moe.expert_d_ff}, l);
    if (moe.expert_bias) {
      add(out, block + "experts.gate_up_proj_bias", {moe.local_experts(), 2 * moe.expert_d_ff}, l);
    }
    add(out, block + "experts.down_proj", {moe.local_experts(), moe.expert_d_ff, d}, l);
    if (moe.expert_bias) {
      add(out, block + "experts.down_proj_bias", {moe.local_experts(), d}, l);
    }
    if (llama4) {
      router();
      gated_mlp_shapes(out, block + "shared_expert.", d, moe.shared_expert_d_ff, l, false, false, false);
    }
    return;
  }
  const bool mixtral = m.model_type == "mixtral";
  const bool deepseek = m.model_type == "deepseek_v3";
  const std::string block = p + (mixtral ? "block_sparse_moe." : "mlp.");
  if (!deepseek) {
    add(out, block + "gate.weight", {moe.n_experts, d}, l);
  }
  for (std::int64_t e = 0; e < moe.local_experts(); ++e) {
    gated_mlp_shapes(out, fmt::format("{}experts.{}.", block, e), d, moe.expert_d_ff, l, false, false,
                     mixtral);
  }
  if (deepseek) {  // DeepseekV3TopkRouter: weight (e_score_correction_bias is a buffer)
    add(out, block + "gate.weight", {moe.n_experts, d}, l);
    gated_mlp_shapes(out, block + "shared_experts.", d, moe.shared_expert_d_ff, l, false, false, false);
    return;
  }
  if (moe.shared_expert_d_ff > 0) {
    gated_mlp_shapes(out, block + "shared_expert.", d, moe.shared_expert_d_ff, l, false, false, false);
    if (moe.shared_expert_gated) {
      add(out, block + "shared_expert_gate.weight", {1, d}, l);
    }
  }
}

// A norm's parameters: LayerNorm has a weight and a bias, RMSNorm a weight.
void norm_shapes(const ModelConfig& m, std::vector<ParameterShape>& out, const std::string& name, int l) {
  add(out, name + ".weight", {m.d_model}, l);
  if (m.norm == NormKind::kLayerNorm) {
    add(out, name + ".bias", {m.d_model}, l);
  }
}

// LlamaDecoderLayer and its descendants register self_attn, mlp, then the norms (Falcon: self_attention, mlp,
// then its layer norms; OLMo-2: only the two post-norms; Phi: one input_layernorm).
void llama_shapes(const ModelConfig& m, std::vector<ParameterShape>& out) {
  const std::int64_t d = m.d_model;
  const bool falcon = m.model_type == "falcon";
  add(out, falcon ? "transformer.word_embeddings.weight" : "model.embed_tokens.weight",
      {m.vocab_size + m.extra_embedding_rows, d});
  for (int l = 0; l < m.n_layers; ++l) {
    const std::string p = (falcon ? "transformer.h." : "model.layers.") + std::to_string(l) + ".";
    attention_shapes(m, out, p, l);
    feed_forward_shapes(m, out, p, l);
    if (m.post_norms_only) {
      norm_shapes(m, out, p + "post_attention_layernorm", l);
      norm_shapes(m, out, p + "post_feedforward_layernorm", l);
      continue;
    }
    if (m.parallel_two_norms) {
      norm_shapes(m, out, p + "ln_attn", l);
      norm_shapes(m, out, p + "ln_mlp", l);
      continue;
    }
    if (falcon && !m.parallel_block) {  // FalconDecoderLayer registers post_attention_layernorm first
      norm_shapes(m, out, p + "post_attention_layernorm", l);
    }
    norm_shapes(m, out, p + "input_layernorm", l);
    if (m.parallel_block || falcon) {
      continue;
    }
    norm_shapes(m, out, p + "post_attention_layernorm", l);
    if (m.sandwich_norms) {
      norm_shapes(m, out, p + "pre_feedforward_layernorm", l);
      norm_shapes(m, out, p + "post_feedforward_layernorm", l);
    }
  }
  norm_shapes(m, out,
              falcon                  ? "transformer.ln_f"
              : m.model_type == "phi" ? "model.final_layernorm"
                                      : "model.norm",
              -1);
  if (!m.tied_embeddings) {
    add(out, "lm_head.weight", {m.vocab_size, d});
  }
  if (m.lm_head_bias) {  // PhiForCausalLM: nn.Linear(hidden_size, vocab_size, bias=True)
    add(out, "lm_head.bias", {m.vocab_size});
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
  for (const HfPreset& p : kHfPresets) {
    names.emplace_back(p.name);
  }
  return names;
}

ModelConfig model_preset(std::string_view name) {
  for (ModelConfig& m : presets()) {
    if (m.name == name) {
      return m;
    }
  }
  for (const HfPreset& p : kHfPresets) {
    if (p.name == name) {
      ModelConfig m = model_from_hf_config_json(p.json, p.name);
      m.name = p.name;
      return m;
    }
  }
  throw InputError(fmt::format("--model: unknown model '{}' (presets: {}; or a path to a config.json)", name,
                               fmt::join(model_preset_names(), ", ")));
}

ModelConfig load_model(const std::string& name_or_path) {
  // A config.json path, a model folder or a hub id in the local Hugging Face cache (hf_hub_cache.h); the
  // report names the model as given.
  const std::optional<std::string> config = model_config_file(name_or_path);
  if (!config) {
    return model_preset(name_or_path);  // a preset, or the "unknown model" message
  }
  ModelConfig m =
      model_from_hf_config_json(read_input_file(*config, "model config file", kMaxSmallInputBytes), *config);
  if (*config != name_or_path) {
    m.name = name_or_path;
  }
  return m;
}

}  // namespace vramsim
