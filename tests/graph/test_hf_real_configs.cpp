// The real config.json files of tests/data/hf_configs (provenance in its SOURCES.md), one or more per
// supported model_type where a public copy was found: every model_type is either covered or named as
// missing; each preset with a stored config has exactly that config's shapes; each stored config's
// parameters are counted by hand below (per layer: attention, norms, MLP or MoE; then embeddings, final norm,
// lm_head; tied embeddings once) and compared exactly, with the model card's published total where there is
// one; and the quantization blocks these checkpoints ship are read into their storage format, counted by
// hand from the quantized modules' buffer shapes (sim/hub/checkpoint_quantization.h names the sources).
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "sim/core/error.h"
#include "sim/hub/checkpoint_quantization.h"
#include "sim/models/model_config.h"
#include "test_paths.h"

using namespace vramsim;
using Catch::Matchers::Contains;

namespace {

std::filesystem::path config_dir() { return test::source_dir() / "tests" / "data" / "hf_configs"; }

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

ModelConfig stored(const std::string& file) { return load_model((config_dir() / file).string()); }

// The stored file with the official checkpoint's quantization_config block added (the copies stored are of
// dequantized or re-saved checkpoints that dropped it; each test names where the block is quoted from).
std::string with_block(const std::string& file, const char* block) {
  nlohmann::json j = nlohmann::json::parse(read_text(config_dir() / file));
  j["quantization_config"] = nlohmann::json::parse(block);
  return j.dump();
}

// The model_types with no stored real config.json (SOURCES.md would say why). A new model_type must be
// added to one list or the other. A wrapper's text_config counts for the model_type it names (llama4_text:
// the text_config of the stored Llama-4-Scout file, read by the llama4_text reader).
const std::set<std::string> kNoRealConfig = {};

// Every field that fixes a tensor or an op of the step (the dropout rates excepted: presets run without
// dropout, model_config.h).
void check_same_shapes(const ModelConfig& a, const ModelConfig& b) {
  CHECK(a.family == b.family);
  CHECK(a.model_type == b.model_type);
  CHECK(a.vocab_size == b.vocab_size);
  CHECK(a.d_model == b.d_model);
  CHECK(a.n_layers == b.n_layers);
  CHECK(a.n_heads == b.n_heads);
  CHECK(a.n_kv_heads == b.n_kv_heads);
  CHECK(a.head_dim == b.head_dim);
  CHECK(a.d_ff == b.d_ff);
  CHECK(a.max_positions == b.max_positions);
  CHECK(a.tied_embeddings == b.tied_embeddings);
  CHECK(a.bias == b.bias);
  CHECK(a.qkv_bias == b.qkv_bias);
  CHECK(a.norm == b.norm);
  CHECK(a.mlp == b.mlp);
  CHECK(a.gelu == b.gelu);
  CHECK(a.gated_activation == b.gated_activation);
  CHECK(a.linear_weights == b.linear_weights);
  CHECK(a.fused_qkv == b.fused_qkv);
  CHECK(a.fused_gate_up == b.fused_gate_up);
  CHECK(a.scale_embeddings == b.scale_embeddings);
  CHECK(a.sandwich_norms == b.sandwich_norms);
  CHECK(a.attn_logit_softcapping == b.attn_logit_softcapping);
  CHECK(a.final_logit_softcapping == b.final_logit_softcapping);
  CHECK(a.softmax_in_fp32 == b.softmax_in_fp32);
  CHECK(a.always_builds_mask == b.always_builds_mask);
  CHECK(a.mistral_mask == b.mistral_mask);
  CHECK(a.moe.n_experts == b.moe.n_experts);
  CHECK(a.moe.top_k == b.moe.top_k);
  CHECK(a.moe.expert_d_ff == b.moe.expert_d_ff);
  CHECK(a.moe.normalize_top_k == b.moe.normalize_top_k);
  CHECK(a.moe.shared_expert_d_ff == b.moe.shared_expert_d_ff);
  CHECK(a.moe.sparse_step == b.moe.sparse_step);
  CHECK(a.moe.dense_layers == b.moe.dense_layers);
  CHECK(a.moe.shared_expert_gated == b.moe.shared_expert_gated);
  CHECK(a.moe.fused_experts == b.moe.fused_experts);
  CHECK(a.moe.expert_bias == b.moe.expert_bias);
  CHECK(a.moe.router_bias == b.moe.router_bias);
  CHECK(a.qk_norm == b.qk_norm);
  CHECK(a.post_norms_only == b.post_norms_only);
  CHECK(a.parallel_block == b.parallel_block);
  CHECK(a.parallel_two_norms == b.parallel_two_norms);
  CHECK(a.lm_head_bias == b.lm_head_bias);
  CHECK(a.embedding_multiplier == b.embedding_multiplier);
  CHECK(a.residual_multiplier == b.residual_multiplier);
  CHECK(a.logits_scaling == b.logits_scaling);
  CHECK(a.attention_sinks == b.attention_sinks);
  CHECK(a.sliding_window == b.sliding_window);
  // A preset has no layer_types; the stored config.json may (gpt-oss-20b): the class's default list the
  // reader writes for the preset must be the list the checkpoint ships.
  CHECK(a.sliding_window_layers == b.sliding_window_layers);
  CHECK(a.mla.q_lora_rank == b.mla.q_lora_rank);
  CHECK(a.mla.kv_lora_rank == b.mla.kv_lora_rank);
  CHECK(a.mla.qk_nope_head_dim == b.mla.qk_nope_head_dim);
  CHECK(a.mla.qk_rope_head_dim == b.mla.qk_rope_head_dim);
  CHECK(a.mla.v_head_dim == b.mla.v_head_dim);
  CHECK(a.parameter_count() == b.parameter_count());
}

}  // namespace

TEST_CASE("real configs: every supported model_type has a stored config.json or is named as missing",
          "[quick][graph]") {
  std::set<std::string> covered;
  const std::string sources = read_text(config_dir() / "SOURCES.md");
  for (const auto& entry : std::filesystem::directory_iterator(config_dir())) {
    const std::string file = entry.path().filename().string();
    if (!file.ends_with(".config.json")) {
      continue;
    }
    INFO(file);
    CHECK_THAT(sources, Contains("`" + file + "`"));  // its provenance is written down
    const nlohmann::json j = nlohmann::json::parse(read_text(entry.path()));
    covered.insert(j.at("model_type").get<std::string>());
    if (j.contains("text_config") && j.at("text_config").contains("model_type")) {
      covered.insert(j.at("text_config").at("model_type").get<std::string>());
    }
    CHECK(stored(file).parameter_count() > 0);  // and vramsim reads it
  }
  for (const std::string& type : supported_model_types()) {
    INFO(type);
    CHECK(covered.contains(type) != kNoRealConfig.contains(type));
    if (kNoRealConfig.contains(type)) {
      CHECK_THAT(sources, Contains(type));  // named as missing there
    }
  }
}

TEST_CASE("real configs: each preset with a stored config.json has that config's shapes", "[quick][graph]") {
  const std::map<std::string, std::string> pairs = {
      {"gpt2", "openai-community__gpt2.config.json"},
      {"llama-3.1-8b", "meta-llama__Llama-3.1-8B.config.json"},
      {"llama-3.2-3b", "meta-llama__Llama-3.2-3B.config.json"},
      {"qwen2.5-3b", "Qwen__Qwen2.5-3B.config.json"},
      {"qwen2.5-7b", "Qwen__Qwen2.5-7B.config.json"},
      {"qwen2.5-14b", "Qwen__Qwen2.5-14B.config.json"},
      {"qwen2.5-32b", "Qwen__Qwen2.5-32B.config.json"},
      {"qwen3-8b", "Qwen__Qwen3-8B.config.json"},
      {"qwen3-14b", "Qwen__Qwen3-14B.config.json"},
      {"qwen3-32b", "Qwen__Qwen3-32B.config.json"},
      {"qwen3-30b-a3b", "Qwen__Qwen3-30B-A3B.config.json"},
      {"mixtral-8x7b", "mistralai__Mixtral-8x7B-v0.1.config.json"},
      {"phi-2", "microsoft__phi-2.config.json"},
      {"phi-3-mini", "microsoft__Phi-3-mini-4k-instruct.config.json"},
      {"gpt-oss-20b", "openai__gpt-oss-20b.config.json"},
      {"deepseek-v3", "deepseek-ai__DeepSeek-V3.config.json"},
      {"mistral-7b-v0.3", "mistralai__Mistral-7B-Instruct-v0.3.config.json"},
      {"olmo-2-7b", "allenai__OLMo-2-1124-7B-Instruct.config.json"},
      {"granite-3.3-8b", "ibm-granite__granite-3.3-8b-instruct.config.json"},
      {"gemma-2-2b", "google__gemma-2-2b-it.config.json"},
      {"gemma-3-1b", "google__gemma-3-1b-it.config.json"},
      {"gemma-3-4b", "google__gemma-3-4b-it.config.json"},  // the wrapper's text_config
      {"qwen3-0.6b", "Qwen__Qwen3-0.6B.config.json"},
      {"qwen3-1.7b", "Qwen__Qwen3-1.7B.config.json"},
      {"phi-3-medium", "microsoft__Phi-3-medium-4k-instruct.config.json"},
      {"gemma-2b", "unsloth__gemma-2b.config.json"},
      {"qwen1.5-moe", "Qwen__Qwen1.5-MoE-A2.7B.config.json"},
      {"starcoder2-3b", "bigcode__starcoder2-3b.config.json"},
      {"falcon-7b", "tiiuae__falcon-7b.config.json"},
      {"llama-4-scout", "unsloth__Llama-4-Scout-17B-16E.config.json"},  // the wrapper's text_config
  };
  for (const auto& [preset, file] : pairs) {
    INFO(preset << " vs " << file);
    check_same_shapes(model_preset(preset), stored(file));
  }
  // The stored Qwen3-4B copy is probably of the -Instruct-2507 release (SOURCES.md): its context is 262144
  // where Qwen/Qwen3-4B's is 40960 (LLM-Prof's block, the preset's source); every other field is compared.
  ModelConfig qwen3_4b = stored("Qwen__Qwen3-4B.config.json");
  CHECK(qwen3_4b.max_positions == 262144);
  qwen3_4b.max_positions = 40960;
  check_same_shapes(model_preset("qwen3-4b"), qwen3_4b);
  // Likewise the stored Qwen3-235B-A22B file is of the -Instruct-2507 release (context 262144);
  // Qwen3-235B-A22B's own is 40960 (model_config.cpp names the source): every other field is compared.
  ModelConfig qwen3_235b = stored("Qwen__Qwen3-235B-A22B-Instruct-2507.config.json");
  CHECK(qwen3_235b.max_positions == 262144);
  qwen3_235b.max_positions = 40960;
  check_same_shapes(model_preset("qwen3-235b-a22b"), qwen3_235b);
}

TEST_CASE("real configs: parameter counts worked by hand", "[quick][graph]") {
  SECTION("llama: Llama-3.1-8B, 8,030,261,248 (the figure Meta's model card rounds to 8.03B)") {
    // q and o 4096 x 32*128, k and v 4096 x 8*128, MLP 3 x 4096 x 14336, two RMSNorms; embeddings and
    // lm_head 128256 x 4096 each (untied); final norm
    const std::int64_t layer = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096;
    const ModelConfig m = stored("meta-llama__Llama-3.1-8B.config.json");
    CHECK(m.parameter_count() == 2 * 128256LL * 4096 + 32 * layer + 4096);
    CHECK(m.parameter_count() == 8'030'261'248);
  }
  SECTION("llama: Llama-3.2-3B (3.21B), head_dim 128 given, tied embeddings") {
    const std::int64_t layer = 2 * 3072 * 3072 + 2 * 3072 * 1024 + 3 * 3072 * 8192 + 2 * 3072;
    const ModelConfig m = stored("meta-llama__Llama-3.2-3B.config.json");
    CHECK(m.tied_embeddings);
    CHECK(m.parameter_count() == 128256LL * 3072 + 28 * layer + 3072);
    CHECK(m.parameter_count() == 3'212'749'824);
  }
  SECTION("qwen2: Qwen2.5-7B (7.61B, 6.53B non-embedding on its model card), q/k/v biases") {
    // head_dim 3584 / 28 = 128: q 3584 x 3584 + 3584, k and v 3584 x 512 + 512, o 3584 x 3584
    const std::int64_t layer =
        (3584 * 3584 + 3584) + 2 * (3584 * 512 + 512) + 3584 * 3584 + 3 * 3584 * 18944 + 2 * 3584;
    const ModelConfig m = stored("Qwen__Qwen2.5-7B.config.json");
    CHECK(m.qkv_bias);
    CHECK(m.parameter_count() == 2 * 152064LL * 3584 + 28 * layer + 3584);
    CHECK(m.parameter_count() == 7'615'616'512);
    CHECK(std::llround((m.parameter_count() - 2 * 152064LL * 3584) / 1e7) == 653);
  }
  SECTION("qwen3: Qwen3-8B (8.2B, 6.95B non-embedding on its model card), q_norm / k_norm") {
    const std::int64_t layer =
        4096 * 4096 + 2 * 4096 * 1024 + 4096 * 4096 + 2 * 128 + 3 * 4096 * 12288 + 2 * 4096;
    const ModelConfig m = stored("Qwen__Qwen3-8B.config.json");
    CHECK(m.parameter_count() == 2 * 151936LL * 4096 + 36 * layer + 4096);
    CHECK(m.parameter_count() == 8'190'735'360);
    CHECK(std::llround((m.parameter_count() - 2 * 151936LL * 4096) / 1e7) == 695);
  }
  SECTION("qwen3_moe: Qwen3-30B-A3B (30.5B, 29.9B non-embedding on its model card)") {
    // attention 2048 x 4096 + 2 x 2048 x 512 + 4096 x 2048, q/k norms 2 x 128; router 128 x 2048; 128
    // experts of 3 x 2048 x 768; two norms
    const std::int64_t layer =
        2048 * 4096 + 2 * 2048 * 512 + 4096 * 2048 + 2 * 128 + 128 * 2048 + 128LL * 3 * 2048 * 768 + 2 * 2048;
    const ModelConfig m = stored("Qwen__Qwen3-30B-A3B.config.json");
    CHECK(m.moe.n_experts == 128);
    CHECK(m.moe.top_k == 8);
    CHECK(m.parameter_count() == 2 * 151936LL * 2048 + 48 * layer + 2048);
    CHECK(m.parameter_count() == 30'532'122'624);
    CHECK(std::llround((m.parameter_count() - 2 * 151936LL * 2048) / 1e8) == 299);
  }
  SECTION("gpt2: openai-community/gpt2, 124,439,808 (tied lm_head, 1024 learned positions)") {
    // per layer: ln_1, c_attn 768 x 2304 + 2304, c_proj 768 x 768 + 768, ln_2, c_fc 768 x 3072 + 3072,
    // c_proj 3072 x 768 + 768; wte 50257 x 768, wpe 1024 x 768, ln_f
    const std::int64_t layer = 2 * 768 + (768 * 2304 + 2304) + (768 * 768 + 768) + 2 * 768 +
                               (768 * 3072 + 3072) + (3072 * 768 + 768);
    const ModelConfig m = stored("openai-community__gpt2.config.json");
    CHECK(m.parameter_count() == 50257LL * 768 + 1024 * 768 + 12 * layer + 2 * 768);
    CHECK(m.parameter_count() == 124'439'808);
  }
  SECTION("phi: microsoft/phi-2 (2.78B), resid_pdrop 0.1 read") {
    const std::int64_t layer =
        4 * (2560 * 2560 + 2560) + (2560 * 10240 + 10240) + (10240 * 2560 + 2560) + 2 * 2560;
    const ModelConfig m = stored("microsoft__phi-2.config.json");
    CHECK(m.dropout.residual == 0.1);
    CHECK(m.parameter_count() == 51200LL * 2560 + 32 * layer + 2 * 2560 + (51200LL * 2560 + 51200));
    CHECK(m.parameter_count() == 2'779'683'840);
  }
  SECTION("gpt_oss: gpt-oss-20b (20.91B on its model card), sinks, biased router, fused experts") {
    // sinks 64; q 2880 x 4096 + 4096, k and v 2880 x 512 + 512, o 4096 x 2880 + 2880; router 32 x 2880 + 32;
    // gate_up_proj 32 x 2880 x 5760 + bias 32 x 5760; down_proj 32 x 2880 x 2880 + bias 32 x 2880; two norms
    const std::int64_t layer = 64 + (2880 * 4096 + 4096) + 2 * (2880 * 512 + 512) + (4096 * 2880 + 2880) +
                               (32 * 2880 + 32) + (32LL * 2880 * 5760 + 32 * 5760) +
                               (32LL * 2880 * 2880 + 32 * 2880) + 2 * 2880;
    const ModelConfig m = stored("openai__gpt-oss-20b.config.json");
    CHECK(m.sliding_window == 128);
    // layer_types: "sliding_attention" on the even layers of 24, "full_attention" on the odd ones.
    REQUIRE(m.sliding_window_layers.size() == 12);
    CHECK(m.sliding_window_layers.front() == 0);
    CHECK(m.sliding_window_layers.back() == 22);
    CHECK(m.parameter_count() == 2 * 201088LL * 2880 + 24 * layer + 2880);
    CHECK(m.parameter_count() == 20'914'757'184);
  }
  SECTION("mistral: Mistral-7B-Instruct-v0.3 (7.25B), vocabulary 32768, sliding_window null") {
    // q and o 4096 x 4096, k and v 4096 x 1024, MLP 3 x 4096 x 14336, two RMSNorms; untied 32768 x 4096
    // embeddings and lm_head; final norm. The stored file's own parameter listing (the same markdown) lists
    // exactly these modules per layer.
    const std::int64_t layer = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096;
    const ModelConfig m = stored("mistralai__Mistral-7B-Instruct-v0.3.config.json");
    CHECK(m.model_type == "mistral");
    CHECK(m.parameter_count() == 2 * 32768LL * 4096 + 32 * layer + 4096);
    CHECK(m.parameter_count() == 7'248'023'552);
  }
  SECTION("olmo2: OLMo-2-1124-7B-Instruct (7.3B), q_norm / k_norm over the whole projections, post-norms") {
    // q, k, v, o 4096 x 4096 (32 key/value heads); q_norm and k_norm of 4096 each; MLP 3 x 4096 x 11008;
    // post_attention_layernorm and post_feedforward_layernorm; untied 100352 x 4096 embeddings and lm_head
    const std::int64_t layer = 4 * 4096LL * 4096 + 2 * 4096 + 3 * 4096 * 11008 + 2 * 4096;
    const ModelConfig m = stored("allenai__OLMo-2-1124-7B-Instruct.config.json");
    CHECK(m.post_norms_only);
    CHECK(m.qk_norm == ModelConfig::QkNorm::kWholeProjection);
    CHECK(m.parameter_count() == 2 * 100352LL * 4096 + 32 * layer + 4096);
    CHECK(m.parameter_count() == 7'298'617'344);
  }
  SECTION("granite: granite-3.3-8b-instruct (8.17B on its model card), multipliers read, tied embeddings") {
    const std::int64_t layer = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 12800 + 2 * 4096;
    const ModelConfig m = stored("ibm-granite__granite-3.3-8b-instruct.config.json");
    CHECK(m.embedding_multiplier == 12.0);
    CHECK(m.residual_multiplier == 0.22);
    CHECK(m.logits_scaling == 16.0);
    CHECK(m.tied_embeddings);
    CHECK(m.parameter_count() == 49159LL * 4096 + 40 * layer + 4096);
    CHECK(m.parameter_count() == 8'170'864'640);
  }
  SECTION("qwen3: Qwen3-0.6B (0.6B, 0.44B non-embedding) and Qwen3-1.7B (1.7B, 1.4B), tied") {
    // 16 query heads and 8 key/value heads of 128: q 1024 x 2048, k and v 1024 x 1024, o 2048 x 1024,
    // q_norm / k_norm 128 each, MLP 3 x 1024 x 3072, two norms
    const std::int64_t small =
        1024 * 2048 + 2 * 1024 * 1024 + 2048 * 1024 + 2 * 128 + 3 * 1024 * 3072 + 2 * 1024;
    const ModelConfig a = stored("Qwen__Qwen3-0.6B.config.json");
    CHECK(a.parameter_count() == 151936LL * 1024 + 28 * small + 1024);
    CHECK(a.parameter_count() == 596'049'920);
    CHECK(std::llround((a.parameter_count() - 151936LL * 1024) / 1e8) == 4);  // 0.44B
    // q 2048 x 2048, k and v 2048 x 1024, o 2048 x 2048, MLP 3 x 2048 x 6144
    const std::int64_t large =
        2048 * 2048 + 2 * 2048 * 1024 + 2048 * 2048 + 2 * 128 + 3 * 2048 * 6144 + 2 * 2048;
    const ModelConfig b = stored("Qwen__Qwen3-1.7B.config.json");
    CHECK(b.parameter_count() == 151936LL * 2048 + 28 * large + 2048);
    CHECK(b.parameter_count() == 1'720'574'976);
    CHECK(std::llround((b.parameter_count() - 151936LL * 2048) / 1e8) == 14);  // 1.4B
  }
  SECTION("gemma3: gemma-3-4b-it (4.3B), the language model of text_config and the SigLIP part counted") {
    // text_config: q 2560 x 8*256, k and v 2560 x 4*256, o 2048 x 2560, q_norm / k_norm 256, MLP
    // 3 x 2560 x 10240, four norms; tied 262208 x 2560 embeddings; final norm
    const std::int64_t layer =
        2560 * 2048 + 2 * 2560 * 1024 + 2048 * 2560 + 2 * 256 + 3 * 2560 * 10240 + 4 * 2560;
    const ModelConfig m = stored("google__gemma-3-4b-it.config.json");
    CHECK(m.model_type == "gemma3_text");
    CHECK(m.sliding_window == 1024);
    CHECK(m.parameter_count() == 262208LL * 2560 + 34 * layer + 2560);
    CHECK(m.parameter_count() == 3'880'263'168);
    // vision_config as SiglipVisionModel builds it (the model print stored with the config, SOURCES.md):
    // patch_embedding Conv2d(3, 1152, 14) with bias; position_embedding Embedding(4096, 1152) (896 / 14 = 64
    // patches a side); 27 encoder layers of layer_norm1 and layer_norm2 (weight and bias), q/k/v/out_proj
    // 1152 x 1152 with bias, fc1 1152 x 4304 + 4304, fc2 4304 x 1152 + 1152; post_layernorm; no head
    // (vision_use_head false)
    const std::int64_t siglip_layer =
        2 * 2 * 1152 + 4 * (1152 * 1152 + 1152) + (1152 * 4304 + 4304) + (4304 * 1152 + 1152);
    const std::int64_t tower = (1152 * 3 * 14 * 14 + 1152) + 4096 * 1152 + 27 * siglip_layer + 2 * 1152;
    CHECK(m.vision.model_type == "siglip_vision_model");
    CHECK(m.vision.tower_parameters == tower);
    CHECK(m.vision.tower_parameters == 416'866'032);  // SigLIP So400m without its pooling head
    // Gemma3MultiModalProjector: mm_input_projection_weight 1152 x 2560, mm_soft_emb_norm 1152
    CHECK(m.vision.projector_parameters == 1152 * 2560 + 1152);
    // the model card's 4.3B is the whole Gemma3ForConditionalGeneration
    CHECK(m.parameter_count() + m.vision.total() == 4'300'079'472);
    CHECK(std::llround((m.parameter_count() + m.vision.total()) / 1e8) == 43);
  }
  SECTION("gemma: gemma-2b (2.51B; the unsloth copy of google/gemma-2b), multi-query, tied") {
    // modeling_gemma.py: q_proj 2048 x 8*256, k_proj and v_proj 2048 x 1*256, o_proj 8*256 x 2048; GemmaMLP
    // gate/up/down 3 x 2048 x 16384; input_layernorm and post_attention_layernorm (GemmaRMSNorm, 2048 each);
    // embed_tokens 256000 x 2048 tied to lm_head; final norm
    const std::int64_t layer = 2048 * 2048 + 2 * 2048 * 256 + 2048 * 2048 + 3 * 2048 * 16384 + 2 * 2048;
    const ModelConfig m = stored("unsloth__gemma-2b.config.json");
    CHECK(m.model_type == "gemma");
    CHECK(m.tied_embeddings);
    CHECK(m.n_kv_heads == 1);
    CHECK(m.parameter_count() == 256000LL * 2048 + 18 * layer + 2048);
    CHECK(m.parameter_count() == 2'506'172'416);
  }
  SECTION("qwen2_moe: Qwen1.5-MoE-A2.7B (14.3B total, 2.7B activated on its model card)") {
    // modeling_qwen2_moe.py: q/k/v 2048 x 2048 with bias (16 heads of 128, 16 key/value heads), o_proj
    // without; Qwen2MoeSparseMoeBlock: gate 60 x 2048, 60 experts of gate/up/down 3 x 2048 x 1408,
    // shared_expert 3 x 2048 x 5632, shared_expert_gate 1 x 2048; two RMSNorms; untied 151936 x 2048
    // embeddings and lm_head; final norm
    const std::int64_t attention = 3 * (2048 * 2048 + 2048) + 2048 * 2048;
    const std::int64_t expert = 3 * 2048 * 1408;
    const std::int64_t layer = attention + 60 * 2048 + 60 * expert + 3 * 2048 * 5632 + 2048 + 2 * 2048;
    const ModelConfig m = stored("Qwen__Qwen1.5-MoE-A2.7B.config.json");
    CHECK(m.parameter_count() == 2 * 151936LL * 2048 + 24 * layer + 2048);
    CHECK(m.parameter_count() == 14'315'784'192);
    CHECK(std::llround(m.parameter_count() / 1e8) == 143);
    // activated: each token runs num_experts_per_tok (4) of the 60 routed experts
    const std::int64_t active = m.parameter_count() - 24 * (m.moe.n_experts - m.moe.top_k) * expert;
    CHECK(std::llround(active / 1e8) == 27);
  }
  SECTION("starcoder2: starcoder2-3b (3.03B on its model card), LayerNorms and biases, tied") {
    // modeling_starcoder2.py: q_proj and o_proj 3072 x 3072 + 3072, k_proj and v_proj 3072 x 2*128 + 256
    // (use_bias); Starcoder2MLP c_fc 3072 x 12288 + 12288, c_proj 12288 x 3072 + 3072; input_layernorm and
    // post_attention_layernorm (nn.LayerNorm: weight and bias); embed_tokens 49152 x 3072 tied; final
    // LayerNorm
    const std::int64_t layer = 2 * (3072 * 3072 + 3072) + 2 * (3072 * 256 + 256) + (3072 * 12288 + 12288) +
                               (12288 * 3072 + 3072) + 2 * 2 * 3072;
    const ModelConfig m = stored("bigcode__starcoder2-3b.config.json");
    CHECK(m.sliding_window == 4096);
    CHECK(m.dropout.residual == 0.1);
    CHECK(m.parameter_count() == 49152LL * 3072 + 30 * layer + 2 * 3072);
    CHECK(m.parameter_count() == 3'030'371'328);
  }
  SECTION("falcon: falcon-7b (6.92B), multi_query fused query_key_value, one LayerNorm per layer, tied") {
    // modeling_falcon.py: query_key_value 4544 x (4544 + 2 x 64) (71 query heads, one key/value head),
    // dense 4544 x 4544, no biases (bias false); MLP dense_h_to_4h and dense_4h_to_h 2 x 4544 x 18176;
    // input_layernorm (weight and bias: parallel_attn with one norm); word_embeddings 65024 x 4544 tied;
    // ln_f
    const std::int64_t layer = 4544 * (4544 + 128) + 4544 * 4544 + 2 * 4544 * 18176 + 2 * 4544;
    const ModelConfig m = stored("tiiuae__falcon-7b.config.json");
    CHECK(m.parallel_block);
    CHECK_FALSE(m.parallel_two_norms);
    CHECK(m.parameter_count() == 65024LL * 4544 + 32 * layer + 2 * 4544);
    CHECK(m.parameter_count() == 6'921'720'704);
  }
  SECTION("llama4: Llama-4-Scout-17B-16E's text_config (17B activated; 109B with the vision encoder)") {
    // modeling_llama4.py: q_proj 5120 x 40*128, k_proj and v_proj 5120 x 8*128, o_proj 40*128 x 5120 (the
    // qk L2 norm has no weight); Llama4TextMoe in every layer (interleave_moe_layer_step 1): experts
    // gate_up_proj [16, 5120, 2 x 8192], down_proj [16, 8192, 5120], router 16 x 5120, shared_expert
    // 3 x 5120 x 8192; two RMSNorms; untied 202048 x 5120 embeddings and lm_head; final norm
    const std::int64_t expert = 3 * 5120 * 8192;
    const std::int64_t layer =
        2 * 5120 * 5120 + 2 * 5120 * 1024 + 16 * expert + 16 * 5120 + expert + 2 * 5120;
    const ModelConfig m = stored("unsloth__Llama-4-Scout-17B-16E.config.json");
    CHECK(m.model_type == "llama4_text");
    CHECK(m.parameter_count() == 2 * 202048LL * 5120 + 48 * layer + 5120);
    CHECK(m.parameter_count() == 107'769'861'120);
    // activated: one routed expert of 16 per token (num_experts_per_tok 1), with the shared expert
    const std::int64_t active = m.parameter_count() - 48 * (m.moe.n_experts - m.moe.top_k) * expert;
    CHECK(std::llround(active / 1e9) == 17);
  }
  SECTION("qwen3_moe: Qwen3-235B-A22B (235B total, 234B non-embedding, 22B activated on its model card)") {
    // The stored -Instruct-2507 file, whose module print (the same page, SOURCES.md) lists q_proj 4096 ->
    // 8192, k_proj and v_proj 4096 -> 512, o_proj 8192 -> 4096, q_norm / k_norm 128; router 128 x 4096;
    // 128 experts of 3 x 4096 x 1536; two norms; untied 151936 x 4096 embeddings and lm_head
    const std::int64_t expert = 3 * 4096 * 1536;
    const std::int64_t layer =
        4096 * 8192 + 2 * 4096 * 512 + 8192 * 4096 + 2 * 128 + 128 * 4096 + 128 * expert + 2 * 4096;
    const ModelConfig m = stored("Qwen__Qwen3-235B-A22B-Instruct-2507.config.json");
    CHECK(m.parameter_count() == 2 * 151936LL * 4096 + 94 * layer + 4096);
    CHECK(m.parameter_count() == 235'093'634'560);
    CHECK(std::llround(m.parameter_count() / 1e9) == 235);
    CHECK(std::llround((m.parameter_count() - 2 * 151936LL * 4096) / 1e9) == 234);
    const std::int64_t active = m.parameter_count() - 94 * (m.moe.n_experts - m.moe.top_k) * expert;
    CHECK(std::llround(active / 1e9) == 22);
  }
  SECTION("deepseek_v3: DeepSeek-V3, 671B without the multi-token-prediction layer (the 685B checkpoint)") {
    // num_nextn_predict_layers 1: the checkpoint's model.layers.61 is the MTP module, which
    // DeepseekV3ForCausalLM does not build (its weights are dropped at load); 671B is the figure the model
    // card gives for the main model, 685B with MTP.
    const std::int64_t attention =
        7168 * 1536 + 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 + 512 * 128 * 256 + 128 * 128 * 7168;
    const std::int64_t dense = 3LL * 7168 * 18432;
    const std::int64_t moe = 256LL * 3 * 7168 * 2048 + 256 * 7168 + 3 * 7168 * 2048;
    const ModelConfig m = stored("deepseek-ai__DeepSeek-V3.config.json");
    CHECK(m.parameter_count() == 3 * (attention + dense + 2 * 7168) + 58 * (attention + moe + 2 * 7168) +
                                     2 * 129280LL * 7168 + 7168);
    CHECK(m.parameter_count() == 671'026'404'352);
  }
}

TEST_CASE("quantization_config: the formats checkpoints ship, read into bytes by hand", "[quick][graph]") {
  SECTION("fp8: DeepSeek-V3's block (quant_method fp8, e4m3, weight_block_size [128, 128])") {
    // The block as DeepSeek-V3 and R1 ship it (SOURCES.md). A published weight listing of a checkpoint with
    // this block (moonshotai/Kimi-K2-Instruct, same MLA shapes, search id 62698259723) shows the tensors
    // counted here: kv_a_proj_with_mqa [576, 7168] float8_e4m3fn with weight_scale_inv [5, 56] float32,
    // q_a_proj [1536, 7168] with [12, 56], an expert's down_proj [7168, 2048] with [56, 16], the router bf16.
    const char* block = R"({"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                            "weight_block_size": [128, 128]})";
    const std::string text = with_block("deepseek-ai__DeepSeek-V3.config.json", block);
    const auto q = read_checkpoint_quantization(text, "ds.json");
    REQUIRE(q);
    CHECK(q->method == QuantMethod::kFp8);
    const ModelConfig m = model_from_hf_config_json(text, "ds.json");
    const QuantizedWeightBytes b = quantized_weight_bytes(m, *q, "ds.json");
    // per layer, one byte per weight of q_a 1536 x 7168, q_b 24576 x 1536, kv_a 576 x 7168, kv_b 32768 x 512,
    // o 7168 x 16384, and a float32 per 128 x 128 tile: 12 x 56, 192 x 12, 5 x 56, 256 x 4, 56 x 128;
    // 3 dense MLPs of 3 x 7168 x 18432 (tiles 144 x 56 each); 58 MoE layers of 256 routed + 1 shared expert,
    // 3 x 7168 x 2048 each (tiles 16 x 56). The router (DeepseekV3TopkRouter, not an nn.Linear), embeddings,
    // norms and lm_head stay bf16.
    const std::int64_t attention = 1536 * 7168 + 24576 * 1536 + 576 * 7168 + 32768 * 512 + 7168 * 16384;
    const std::int64_t attention_tiles = 12 * 56 + 192 * 12 + 5 * 56 + 256 * 4 + 56 * 128;
    CHECK(b.weights == 61 * 5 + 3 * 3 + 58 * 257 * 3);
    CHECK(b.packed == 61 * attention + 3 * 3LL * 7168 * 18432 + 58 * 257 * 3LL * 7168 * 2048);
    CHECK(b.scales == 4 * (61 * attention_tiles + 3 * 3 * 144 * 56 + 58 * 257 * 3 * 16 * 56));
    CHECK(b.zeros == 0);
    CHECK(b.total() == 669'228'962'144);
  }
  SECTION("mxfp4: gpt-oss-20b's block (modules_to_not_convert as the checkpoint ships it)") {
    // openai/gpt-oss-20b config.json's block (SOURCES.md). Mxfp4GptOssExperts: gate_up_proj_blocks [32, 5760,
    // 90, 16] uint8 and scales [32, 5760, 90], down_proj_blocks [32, 2880, 90, 16] and scales [32, 2880, 90];
    // both biases float32.
    const char* block =
        R"({"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                            "model.embed_tokens", "lm_head"], "quant_method": "mxfp4"})";
    const std::string text = with_block("openai__gpt-oss-20b.config.json", block);
    const auto q = read_checkpoint_quantization(text, "oss.json");
    REQUIRE(q);
    const QuantizedWeightBytes b =
        quantized_weight_bytes(model_from_hf_config_json(text, "oss.json"), *q, "oss.json");
    CHECK(b.weights == 2 * 24);
    CHECK(b.packed == 24 * (32LL * 5760 * 90 * 16 + 32LL * 2880 * 90 * 16));
    CHECK(b.scales == 24 * (32LL * 5760 * 90 + 32LL * 2880 * 90));
    CHECK(b.other == 24 * 4 * (32LL * 5760 + 32 * 2880));
    // 17 bytes per 32 expert weights: 4.25 bits a weight, against 16 in bf16
    CHECK(b.packed + b.scales == 24 * 3LL * 32 * 2880 * 2880 / 32 * 17);
  }
  SECTION("gptq and awq on Llama-3.1-8B: 4-bit, group 128") {
    // q_proj 4096 x 4096: GPTQ qweight 4096/32*4 x 4096 int32, qzeros 32 x 4096/32*4 int32, scales 32 x 4096
    // float16, g_idx 4096 int32; AWQ qweight 4096 x 4096/8 int32, qzeros 32 x 512 int32, scales 32 x 4096
    // float16 (no g_idx).
    const std::string base = read_text(config_dir() / "meta-llama__Llama-3.1-8B.config.json");
    nlohmann::json j = nlohmann::json::parse(base);
    j["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 128}};
    const ModelConfig m = model_from_hf_config_json(j.dump(), "g.json");
    const auto gptq = read_checkpoint_quantization(j.dump(), "g.json");
    REQUIRE(gptq);
    const auto linear = [](std::int64_t out, std::int64_t in, bool awq) {
      const std::int64_t packed = awq ? in * (out / 8) * 4 : (in / 32 * 4) * out * 4;
      return packed + (in / 128) * (out / 8) * 4 + (in / 128) * out * 2 + (awq ? 0 : in * 4);
    };
    const auto layer = [&](bool awq) {
      return 2 * linear(4096, 4096, awq) + 2 * linear(1024, 4096, awq) + 2 * linear(14336, 4096, awq) +
             linear(4096, 14336, awq);
    };
    CHECK(quantized_weight_bytes(m, *gptq, "g.json").total() == static_cast<Bytes>(32 * layer(false)));
    j["quantization_config"] = {
        {"quant_method", "awq"}, {"bits", 4}, {"group_size", 128}, {"version", "gemm"}};
    const auto awq = read_checkpoint_quantization(j.dump(), "a.json");
    REQUIRE(awq);
    CHECK(quantized_weight_bytes(m, *awq, "a.json").total() == static_cast<Bytes>(32 * layer(true)));
  }
  SECTION("bitsandbytes: BitsAndBytesConfig's keys map onto --base-weights") {
    const auto q = read_checkpoint_quantization(
        R"({"quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": true,
            "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": true, "bnb_4bit_compute_dtype": "bfloat16",
            "bnb_4bit_quant_storage": "uint8"}})",
        "b.json");
    REQUIRE(q);
    CHECK(q->bnb_format == BnbFormat::kNf4);
    CHECK(q->bnb_double_quant);
    CHECK(q->bnb_compute_dtype == DType::kBFloat16);
    // BitsAndBytesConfig's defaults: bnb_4bit_quant_type fp4, compute dtype float32
    const auto d =
        read_checkpoint_quantization(R"({"quantization_config": {"load_in_4bit": true}})", "d.json");
    REQUIRE(d);
    CHECK(d->bnb_format == BnbFormat::kFp4);
    CHECK(d->bnb_compute_dtype == DType::kFloat32);
  }
  SECTION("bad blocks name the key; unknown methods are refused, not ignored") {
    CHECK_FALSE(read_checkpoint_quantization(R"({"model_type": "llama"})", "n.json"));
    CHECK_THROWS_WITH(
        read_checkpoint_quantization(R"({"quantization_config": {"quant_method": "hqq"}})", "h.json"),
        Contains("h.json: key 'quantization_config.quant_method' 'hqq' is not modelled"));
    CHECK_THROWS_WITH(
        read_checkpoint_quantization(
            R"({"quantization_config": {"quant_method": "fp8", "weight_block_size": [128]}})", "f.json"),
        Contains("f.json: key 'quantization_config.weight_block_size' must be a list of two integers"));
    CHECK_THROWS_WITH(
        read_checkpoint_quantization(
            R"({"quantization_config": {"load_in_4bit": true, "load_in_8bit": true}})", "b.json"),
        Contains("exactly one must be true"));
    CHECK_THROWS_WITH(
        read_checkpoint_quantization(R"({"quantization_config": {"quant_method": "gptq"}})", "g.json"),
        Contains("g.json: key 'quantization_config.bits' is missing"));
    CHECK_THROWS_WITH(read_checkpoint_quantization(R"({"quantization_config": 4})", "x.json"),
                      Contains("x.json: key 'quantization_config' must be an object"));
  }
}
