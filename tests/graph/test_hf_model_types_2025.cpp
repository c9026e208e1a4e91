// Issue 36: the model_types of the checkpoints people download now. Each parameter count is worked by hand
// below from the config values (per layer: attention, its norms, the MLP or MoE block, the layer norms;
// then embeddings, final norm and lm_head, tied embeddings counted once) and compared exactly. Where a
// published total exists it is named in the section title as a cross-check of the hand count.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include "graph/graph_test_util.h"
#include "sim/core/error.h"
#include "sim/graph/tensor_lifetime.h"
#include "sim/models/model_config.h"
#include "sim/models/transformer_builder.h"
#include "test_paths.h"

using namespace vramsim;
using Catch::Matchers::Contains;

namespace {

ModelConfig stored_config(const std::string& file) {
  return load_model((test::source_dir() / "tests" / "data" / "hf_configs" / file).string());
}

// Shape keys of published checkpoints. Each now has a stored config.json (tests/data/hf_configs/SOURCES.md),
// counted by hand from the stored file in test_hf_real_configs.cpp; these inline keys are kept for the step
// tests below, which shrink them.
// Qwen/Qwen3-30B-A3B
const char* kQwen3MoeA3B = R"({"model_type": "qwen3_moe", "vocab_size": 151936, "hidden_size": 2048,
  "intermediate_size": 6144, "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4,
  "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768,
  "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": true, "tie_word_embeddings": false})";
// allenai/OLMo-2-1124-7B
const char* kOlmo2_7B = R"({"model_type": "olmo2", "vocab_size": 100352, "hidden_size": 4096,
  "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
  "tie_word_embeddings": false})";
// ibm-granite/granite-3.3-8b-instruct
const char* kGranite33_8B = R"({"model_type": "granite", "vocab_size": 49159, "hidden_size": 4096,
  "intermediate_size": 12800, "num_hidden_layers": 40, "num_attention_heads": 32, "num_key_value_heads": 8,
  "embedding_multiplier": 12.0, "residual_multiplier": 0.22, "attention_multiplier": 0.0078125,
  "logits_scaling": 16.0, "tie_word_embeddings": true})";
// microsoft/phi-2
const char* kPhi2 =
    R"({"model_type": "phi", "vocab_size": 51200, "hidden_size": 2560, "intermediate_size": 10240,
  "num_hidden_layers": 32, "num_attention_heads": 32, "hidden_act": "gelu_new", "partial_rotary_factor": 0.4,
  "resid_pdrop": 0.1, "embd_pdrop": 0.0, "qk_layernorm": false, "tie_word_embeddings": false})";
// bigcode/starcoder2-3b
const char* kStarcoder2_3B = R"({"model_type": "starcoder2", "vocab_size": 49152, "hidden_size": 3072,
  "intermediate_size": 12288, "num_hidden_layers": 30, "num_attention_heads": 24, "num_key_value_heads": 2,
  "hidden_act": "gelu_pytorch_tanh", "use_bias": true, "sliding_window": 4096})";
// tiiuae/falcon-7b
const char* kFalcon7B =
    R"({"model_type": "falcon", "vocab_size": 65024, "hidden_size": 4544, "num_hidden_layers": 32,
  "num_attention_heads": 71, "multi_query": true, "parallel_attn": true, "new_decoder_architecture": false,
  "bias": false, "alibi": false})";
// openai/gpt-oss-20b
const char* kGptOss20B = R"({"model_type": "gpt_oss", "vocab_size": 201088, "hidden_size": 2880,
  "intermediate_size": 2880, "num_hidden_layers": 24, "num_attention_heads": 64, "num_key_value_heads": 8,
  "head_dim": 64, "num_local_experts": 32, "num_experts_per_tok": 4, "experts_per_token": 4,
  "sliding_window": 128, "attention_bias": true, "tie_word_embeddings": false})";
// meta-llama/Llama-4-Scout-17B-16E (its text_config)
const char* kLlama4Scout = R"({"model_type": "llama4", "text_config": {"model_type": "llama4_text",
  "vocab_size": 202048, "hidden_size": 5120, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
  "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
  "num_local_experts": 16, "num_experts_per_tok": 1, "interleave_moe_layer_step": 1, "use_qk_norm": true,
  "attention_chunk_size": 8192}, "vision_config": {"hidden_size": 1408}})";
// deepseek-ai/DeepSeek-V3
const char* kDeepSeekV3 = R"({"model_type": "deepseek_v3", "vocab_size": 129280, "hidden_size": 7168,
  "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128,
  "num_key_value_heads": 128, "n_shared_experts": 1, "n_routed_experts": 256, "num_experts_per_tok": 8,
  "first_k_dense_replace": 3, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
  "qk_rope_head_dim": 64, "v_head_dim": 128, "num_nextn_predict_layers": 1, "tie_word_embeddings": false})";

}  // namespace

TEST_CASE("issue 36 model types: parameter counts worked by hand from config.json", "[quick][graph]") {
  SECTION("qwen3: Qwen3-4B (stored config; 4.02B on its model card), q_norm / k_norm, tied embeddings") {
    const ModelConfig m = stored_config("Qwen__Qwen3-4B.config.json");
    CHECK(m.qk_norm == ModelConfig::QkNorm::kPerHead);
    CHECK(m.tied_embeddings);
    // q 2560 x 32*128, k and v 2560 x 8*128, o 32*128 x 2560, q_norm and k_norm 128 each; MLP 3 x 2560 x
    // 9728; two RMSNorms of 2560
    const std::int64_t layer =
        2560 * 4096 + 2 * 2560 * 1024 + 4096 * 2560 + 2 * 128 + 3 * 2560 * 9728 + 2 * 2560;
    CHECK(m.parameter_count() == 151936LL * 2560 + 36 * layer + 2560);
    CHECK(m.parameter_count() == 4'022'468'096);
  }
  SECTION("gemma3_text: gemma-3-1b-it (stored config; Keras-Hub's gemma3_1b: 999,885,952)") {
    const ModelConfig m = stored_config("google__gemma-3-1b-it.config.json");
    CHECK(m.sandwich_norms);
    CHECK(m.attn_logit_softcapping == 0.0);
    CHECK(m.final_logit_softcapping == 0.0);
    CHECK(m.sliding_window == 512);
    // q 1152 x 4*256, k and v 1152 x 256, o 4*256 x 1152, q_norm / k_norm 256; MLP 3 x 1152 x 6912; four
    // norms
    const std::int64_t layer =
        1152 * 1024 + 2 * 1152 * 256 + 1024 * 1152 + 2 * 256 + 3 * 1152 * 6912 + 4 * 1152;
    CHECK(m.parameter_count() == 262144LL * 1152 + 26 * layer + 1152);
    CHECK(m.parameter_count() == 999'885'952);
  }
  SECTION("gemma3: the multimodal wrapper reads text_config (the vision part is counted apart)") {
    const ModelConfig m = model_from_hf_config_json(
        R"({"model_type": "gemma3", "text_config": {"hidden_size": 1152, "intermediate_size": 6912,
        "num_hidden_layers": 26, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256,
        "vocab_size": 262144}, "vision_config": {"hidden_size": 1152}})",
        "gemma3.json");
    CHECK(m.model_type == "gemma3_text");
    CHECK(m.parameter_count() == 999'885'952);
  }
  SECTION(
      "gemma3: vision_config's SigLIP tower counted as transformers builds it, with or without its head") {
    // hidden 8, intermediate 16, one layer, 3 channels, image 8 of patch 4 (2 x 2 positions): patch_embedding
    // 8 x 3 x 4 x 4 + 8; position_embedding 4 x 8; the layer's two LayerNorms 2 x 2 x 8, q/k/v/out_proj
    // 4 x (8 x 8 + 8), fc1 8 x 16 + 16, fc2 16 x 8 + 8; post_layernorm 2 x 8
    const std::int64_t layer = 2 * 2 * 8 + 4 * (8 * 8 + 8) + (8 * 16 + 16) + (16 * 8 + 8);
    const std::int64_t no_head = (8 * 3 * 4 * 4 + 8) + 4 * 8 + layer + 2 * 8;
    // SiglipMultiheadAttentionPoolingHead: probe [1, 1, 8], nn.MultiheadAttention in_proj 3*8 x 8 + 3*8 and
    // out_proj 8 x 8 + 8, layernorm 2 x 8, SiglipMLP 8 x 16 + 16 and 16 x 8 + 8
    const std::int64_t head = 8 + (3 * 8 * 8 + 3 * 8) + (8 * 8 + 8) + 2 * 8 + (8 * 16 + 16) + (16 * 8 + 8);
    const std::string text = R"("text_config": {"hidden_size": 64, "intermediate_size": 96,
        "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "vocab_size": 512})";
    const std::string vision = R"("hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1,
        "num_attention_heads": 2, "image_size": 8, "patch_size": 4)";
    const ModelConfig with_head = model_from_hf_config_json(
        R"({"model_type": "gemma3", )" + text + R"(, "vision_config": {)" + vision + "}}", "v.json");
    CHECK(with_head.vision.tower_parameters == no_head + head);  // SiglipVisionConfig: vision_use_head absent
    CHECK(with_head.vision.projector_parameters == 8 * 64 + 8);
    const ModelConfig without =
        model_from_hf_config_json(R"({"model_type": "gemma3", )" + text + R"(, "vision_config": {)" + vision +
                                      R"(, "vision_use_head": false}})",
                                  "v.json");
    CHECK(without.vision.tower_parameters == no_head);
    CHECK(without.parameter_count() == with_head.parameter_count());  // the language model is unchanged
    CHECK_THROWS_WITH(
        model_from_hf_config_json(R"({"model_type": "gemma3", )" + text +
                                      R"(, "vision_config": {"image_size": 10, "patch_size": 4}})",
                                  "v.json"),
        Contains("v.json: key 'vision_config.image_size': 10 is not a multiple of patch_size 4"));
    CHECK_THROWS_WITH(
        model_from_hf_config_json(R"({"model_type": "gemma3", )" + text +
                                      R"(, "vision_config": {"model_type": "clip_vision_model"}})",
                                  "v.json"),
        Contains("v.json: key 'vision_config.model_type': 'clip_vision_model' is not modelled"));
  }
  SECTION("qwen3_moe: Qwen3-30B-A3B (30.5B total, 29.9B non-embedding on its model card)") {
    const ModelConfig m = model_from_hf_config_json(kQwen3MoeA3B, "qwen3_moe.json");
    // attention 2048 x 4096 + 2 x 2048 x 512 + 4096 x 2048, q/k norms 2 x 128; router 128 x 2048; 128 experts
    // of 3 x 2048 x 768; two norms
    const std::int64_t layer =
        2048 * 4096 + 2 * 2048 * 512 + 4096 * 2048 + 2 * 128 + 128 * 2048 + 128LL * 3 * 2048 * 768 + 2 * 2048;
    CHECK(m.parameter_count() == 2 * 151936LL * 2048 + 48 * layer + 2048);
  }
  SECTION("olmo2: OLMo-2-1124-7B (7.3B), q_norm / k_norm over the whole projections, two post-norms") {
    const ModelConfig m = model_from_hf_config_json(kOlmo2_7B, "olmo2.json");
    CHECK(m.post_norms_only);
    const std::int64_t layer = 4 * 4096LL * 4096 + 2 * 4096 + 3 * 4096 * 11008 + 2 * 4096;
    CHECK(m.parameter_count() == 2 * 100352LL * 4096 + 32 * layer + 4096);
  }
  SECTION("granite: granite-3.3-8b (8.17B), Llama's parameters, tied embeddings") {
    const ModelConfig m = model_from_hf_config_json(kGranite33_8B, "granite.json");
    CHECK(m.residual_multiplier == 0.22);
    CHECK(m.logits_scaling == 16.0);
    const std::int64_t layer = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 12800 + 2 * 4096;
    CHECK(m.parameter_count() == 49159LL * 4096 + 40 * layer + 4096);
  }
  SECTION("phi: phi-2 (2.78B), biases everywhere, one LayerNorm per layer, lm_head bias") {
    const ModelConfig m = model_from_hf_config_json(kPhi2, "phi.json");
    CHECK(m.parallel_block);
    // q, k, v, dense: 2560 x 2560 + 2560 each; fc1 2560 x 10240 + 10240; fc2 10240 x 2560 + 2560; LayerNorm 2
    // x 2560
    const std::int64_t layer =
        4 * (2560 * 2560 + 2560) + (2560 * 10240 + 10240) + (10240 * 2560 + 2560) + 2 * 2560;
    CHECK(m.parameter_count() == 51200LL * 2560 + 32 * layer + 2 * 2560 + (51200LL * 2560 + 51200));
    CHECK(m.parameter_count() == 2'779'683'840);
  }
  SECTION("starcoder2: starcoder2-3b (3.03B), LayerNorm and biases, GELU MLP, tied embeddings") {
    const ModelConfig m = model_from_hf_config_json(kStarcoder2_3B, "starcoder2.json");
    CHECK(m.tied_embeddings);
    const std::int64_t attention = 2 * (3072 * 3072 + 3072) + 2 * (3072 * 256 + 256);
    const std::int64_t mlp = (3072 * 12288 + 12288) + (12288 * 3072 + 3072);
    CHECK(m.parameter_count() == 49152LL * 3072 + 30 * (attention + mlp + 4 * 3072) + 2 * 3072);
  }
  SECTION("falcon: Falcon-7B (6.92B), multi-query fused query_key_value, parallel attention, tied") {
    const ModelConfig m = model_from_hf_config_json(kFalcon7B, "falcon.json");
    CHECK(m.n_kv_heads == 1);
    // query_key_value 4544 x (4544 + 2 x 64), dense 4544 x 4544, MLP 2 x 4544 x 18176, input_layernorm 2 x
    // 4544
    const std::int64_t layer = 4544 * (4544 + 128) + 4544 * 4544 + 2 * 4544 * 18176 + 2 * 4544;
    CHECK(m.parameter_count() == 65024LL * 4544 + 32 * layer + 2 * 4544);
    CHECK(m.parameter_count() == 6'921'720'704);
  }
  SECTION("gpt_oss: gpt-oss-20b (20.91B on its model card), sinks, biased router, fused experts") {
    const ModelConfig m = model_from_hf_config_json(kGptOss20B, "gpt_oss.json");
    CHECK(m.moe.fused_experts);
    // sinks 64; q 2880 x 4096 + 4096, k and v 2880 x 512 + 512, o 4096 x 2880 + 2880; router 32 x 2880 + 32;
    // gate_up_proj 32 x 2880 x 5760 + bias 32 x 5760; down_proj 32 x 2880 x 2880 + bias 32 x 2880; two norms
    const std::int64_t layer = 64 + (2880 * 4096 + 4096) + 2 * (2880 * 512 + 512) + (4096 * 2880 + 2880) +
                               (32 * 2880 + 32) + (32LL * 2880 * 5760 + 32 * 5760) +
                               (32LL * 2880 * 2880 + 32 * 2880) + 2 * 2880;
    CHECK(m.parameter_count() == 2 * 201088LL * 2880 + 24 * layer + 2880);
  }
  SECTION("llama4: Llama-4-Scout's text_config, 16 fused experts + a shared expert in every layer") {
    const ModelConfig m = model_from_hf_config_json(kLlama4Scout, "llama4.json");
    CHECK(m.model_type == "llama4_text");
    const std::int64_t attention = 5120 * 5120 + 2 * 5120 * 1024 + 5120 * 5120;
    const std::int64_t moe = 16LL * 5120 * 16384 + 16LL * 8192 * 5120 + 16 * 5120 + 3 * 5120 * 8192;
    CHECK(m.parameter_count() == 2 * 202048LL * 5120 + 48 * (attention + moe + 2 * 5120) + 5120);
  }
  SECTION("deepseek_v3: DeepSeek-V3 (671B; the checkpoint's 685B adds the MTP layer, not built)") {
    const ModelConfig m = model_from_hf_config_json(kDeepSeekV3, "deepseek_v3.json");
    // MLA: q_a 7168 x 1536, q_a_layernorm 1536, q_b 1536 x 128 x 192, kv_a 7168 x (512 + 64),
    // kv_a_layernorm 512, kv_b 512 x 128 x (128 + 128), o 128 x 128 x 7168
    const std::int64_t attention =
        7168 * 1536 + 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 + 512 * 128 * 256 + 128 * 128 * 7168;
    const std::int64_t dense = 3LL * 7168 * 18432;
    // 256 experts of 3 x 7168 x 2048, the router 256 x 7168, one shared expert 3 x 7168 x 2048
    const std::int64_t moe = 256LL * 3 * 7168 * 2048 + 256 * 7168 + 3 * 7168 * 2048;
    const std::int64_t norms = 2 * 7168;
    CHECK(m.parameter_count() ==
          3 * (attention + dense + norms) + 58 * (attention + moe + norms) + 2 * 129280LL * 7168 + 7168);
    CHECK(m.parameter_count() == 671'026'404'352);
  }
}

TEST_CASE("issue 36 model types: the step builds a valid schedule, training and generation",
          "[quick][graph]") {
  const char* shrunk[] = {kQwen3MoeA3B, kOlmo2_7B,  kGranite33_8B, kPhi2,      kStarcoder2_3B,
                          kFalcon7B,    kGptOss20B, kLlama4Scout,  kDeepSeekV3};
  std::vector<ModelConfig> models;
  for (const char* json : shrunk) {
    models.push_back(model_from_hf_config_json(json, "m.json"));
  }
  models.push_back(stored_config("Qwen__Qwen3-4B.config.json"));
  models.push_back(stored_config("google__gemma-3-1b-it.config.json"));
  for (ModelConfig m : models) {
    m.vocab_size = 512;
    m.n_layers = 2;
    m.d_model = 64;
    m.n_heads = 4;
    m.n_kv_heads = m.n_kv_heads == 1 ? 1 : 2;
    m.head_dim = 16;
    m.d_ff = 96;
    if (m.mla.kv_lora_rank > 0) {
      m.n_kv_heads = 4;
      m.mla = {32, 16, 16, 8, 16};
      m.head_dim = 24;
      m.moe.dense_layers = {0};
    }
    if (m.moe.n_experts > 0) {
      m.moe.n_experts = 4;
      m.moe.top_k = 2;
      m.moe.expert_d_ff = 32;
      m.moe.shared_expert_d_ff = m.moe.shared_expert_d_ff > 0 ? 32 : 0;
    }
    for (AttentionKind a : {AttentionKind::kEager, AttentionKind::kSdpa}) {
      INFO(m.model_type << " " << attention_name(a));
      TrainingOptions o = test::small_options();
      o.precision = Precision::kAmpBf16;
      o.attention = a;
      const OpGraph g = build_training_steps(m, o);
      test::check_schedule_invariants(g, build_allocation_schedule(g));
    }
  }
}

TEST_CASE("issue 36 model types: what each adds to the step, counted by hand", "[quick][graph]") {
  // Phi's lm_head bias has vocab_size elements (512 here); gpt-oss-20b's sinks one per query head (64);
  // unsupported variants are refused naming the key.
  ModelConfig phi = model_from_hf_config_json(kPhi2, "phi.json");
  phi.vocab_size = 512;
  phi.n_layers = 1;
  phi.d_model = 64;
  phi.n_heads = phi.n_kv_heads = 4;
  phi.head_dim = 16;
  phi.d_ff = 96;
  std::int64_t head_bias = 0;
  for (const ParameterShape& p : phi.parameter_shapes()) {
    if (p.name == "lm_head.bias") {
      head_bias = p.numel();
    }
  }
  CHECK(head_bias == 512);
  ModelConfig oss = model_from_hf_config_json(kGptOss20B, "gpt_oss.json");
  std::int64_t sinks = 0;
  for (const ParameterShape& p : oss.parameter_shapes()) {
    if (p.name == "model.layers.0.self_attn.sinks") {
      sinks = p.numel();
    }
  }
  CHECK(sinks == 64);
  CHECK_THROWS_WITH(model_from_hf_config_json(R"({"model_type": "falcon", "vocab_size": 10, "hidden_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "alibi": true})",
                                              "f.json"),
                    Contains("f.json: key 'alibi'"));
  CHECK_THROWS_WITH(model_from_hf_config_json(R"({"model_type": "gemma3"})", "g3.json"),
                    Contains("g3.json: missing key 'text_config'"));
}

TEST_CASE("presets of the current families: counts and sources", "[quick][graph]") {
  // Llama-3.1-8B: embeddings and lm_head 2 x 128256 x 4096; per layer q and o 4096 x 4096, k and v
  // 4096 x 1024, MLP 3 x 4096 x 14336, two norms
  const std::int64_t llama31_layer = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096;
  CHECK(model_preset("llama-3.1-8b").parameter_count() == 2 * 128256LL * 4096 + 32 * llama31_layer + 4096);
  CHECK(model_preset("llama-3.1-8b").parameter_count() == 8'030'261'248);
  // Llama-3.2-1B: tied; q and o 2048 x 2048, k and v 2048 x 512, MLP 3 x 2048 x 8192
  const std::int64_t llama32_layer = 2 * 2048 * 2048 + 2 * 2048 * 512 + 3 * 2048 * 8192 + 2 * 2048;
  CHECK(model_preset("llama-3.2-1b").parameter_count() == 128256LL * 2048 + 16 * llama32_layer + 2048);
  CHECK(model_preset("llama-3.2-1b").parameter_count() == 1'235'814'400);
  CHECK(model_preset("deepseek-v3").parameter_count() == 671'026'404'352);
  CHECK(model_preset("gpt-oss-20b").parameter_count() ==
        model_from_hf_config_json(kGptOss20B, "gpt_oss.json").parameter_count());
  CHECK(model_preset("mixtral-8x7b").parameter_count() == 46'702'792'704);
  // Gemma-2-27B (27.2B): q 4608 x 32*128, k and v 4608 x 16*128, o 4096 x 4608, MLP 3 x 4608 x 36864, four
  // norms; tied 256000 x 4608 embeddings
  const std::int64_t gemma2_27b_layer =
      4608 * 4096 + 2 * 4608 * 2048 + 4096 * 4608 + 3 * 4608 * 36864 + 4 * 4608;
  CHECK(model_preset("gemma-2-27b").parameter_count() == 256000LL * 4608 + 46 * gemma2_27b_layer + 4608);
  CHECK(model_preset("gemma-2-27b").parameter_count() == 27'227'128'320);
  // Gemma-3-12B's language model: q 3840 x 16*256, k and v 3840 x 8*256, o 4096 x 3840, q_norm / k_norm 256,
  // MLP 3 x 3840 x 15360, four norms; tied 262208 x 3840. With the SigLIP tower of gemma-3-4b (416,866,032,
  // test_hf_real_configs.cpp) and a projector of 1152 x 3840 + 1152 it is the model card's 12.2B.
  const std::int64_t gemma3_12b_layer =
      3840 * 4096 + 2 * 3840 * 2048 + 4096 * 3840 + 2 * 256 + 3 * 3840 * 15360 + 4 * 3840;
  const std::int64_t gemma3_12b = model_preset("gemma-3-12b").parameter_count();
  CHECK(gemma3_12b == 262208LL * 3840 + 48 * gemma3_12b_layer + 3840);
  CHECK(std::llround((gemma3_12b + 416'866'032 + 1152 * 3840 + 1152) / 1e8) == 122);
  // Mixtral-8x22B (141B, 39B active on Mistral's announcement): q and o 6144 x 48*128, k and v 6144 x 8*128,
  // router 8 x 6144, 8 experts of w1/w2/w3 3 x 6144 x 16384, two norms; untied 32000 x 6144 embeddings and
  // lm_head; final norm
  const std::int64_t mixtral_expert = 3LL * 6144 * 16384;
  const std::int64_t mixtral_layer =
      2 * 6144 * 6144 + 2 * 6144 * 1024 + 8 * 6144 + 8 * mixtral_expert + 2 * 6144;
  const ModelConfig mixtral = model_preset("mixtral-8x22b");
  CHECK(mixtral.parameter_count() == 2 * 32000LL * 6144 + 56 * mixtral_layer + 6144);
  CHECK(mixtral.parameter_count() == 140'620'634'112);
  CHECK(std::llround(mixtral.parameter_count() / 1e9) == 141);
  CHECK(std::llround(
            (mixtral.parameter_count() - 56 * (mixtral.moe.n_experts - mixtral.moe.top_k) * mixtral_expert) /
            1e9) == 39);
  // Qwen3-235B-A22B: its shapes are the stored -Instruct-2507 file's, counted in test_hf_real_configs.cpp
  CHECK(model_preset("qwen3-235b-a22b").parameter_count() == 235'093'634'560);
  for (const char* name :
       {"llama-3.1-70b",  "llama-3.1-405b",  "llama-3.2-3b",      "llama-3.3-70b",   "qwen2.5-7b",
        "qwen2.5-72b",    "qwen3-8b",        "qwen3-32b",         "gemma-2-9b",      "gemma-3-27b",
        "phi-3-mini",     "phi-4",           "gpt-oss-120b",      "gemma-2-2b",      "gemma-2-27b",
        "gemma-3-1b",     "gemma-3-4b",      "gemma-3-12b",       "mistral-7b-v0.3", "olmo-2-7b",
        "granite-3.3-8b", "qwen3-0.6b",      "qwen3-1.7b",        "qwen3-4b",        "phi-3-medium",
        "mixtral-8x22b",  "qwen3-235b-a22b", "qwen1.5-moe", "gemma-2b",        "starcoder2-3b",
        "falcon-7b",      "llama-4-scout"}) {
    INFO(name);
    CHECK(model_preset(name).name == name);
    CHECK(load_model(name).parameter_count() > 0);
  }
}
