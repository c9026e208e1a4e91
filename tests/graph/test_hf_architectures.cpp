// The model_types read from real config.json files (tests/data/hf_configs, sources in SOURCES.md): parameter
// counts against published figures, the features each config switches on, and the tensors their modeling
// code adds, counted by hand from transformers' code.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include "graph/graph_test_util.h"
#include "sim/core/error.h"
#include "sim/models/model_config.h"
#include "sim/graph/tensor_lifetime.h"
#include "sim/models/transformer_builder.h"
#include "test_paths.h"

using namespace vramsim;
using Catch::Matchers::Contains;

namespace {

ModelConfig real_config(const std::string& file) {
  return load_model((test::source_dir() / "tests" / "data" / "hf_configs" / file).string());
}

// Rounded to the precision a model card states it (46.7B -> 467 at 1e8).
std::int64_t rounded(std::int64_t count, double unit) {
  return std::llround(static_cast<double>(count) / unit);
}

std::int64_t embedding_parameters(const ModelConfig& m) {
  return m.vocab_size * m.d_model * (m.tied_embeddings ? 1 : 2);
}

// transformers' Qwen2MoeConfig defaults ("a similar configuration to that of Qwen1.5-MoE-A2.7B").
const char* kQwen15MoeDefaults = R"({"model_type": "qwen2_moe", "vocab_size": 151936, "hidden_size": 2048,
  "intermediate_size": 5632, "num_hidden_layers": 24, "num_attention_heads": 16, "num_key_value_heads": 16,
  "num_experts": 60, "num_experts_per_tok": 4, "moe_intermediate_size": 1408,
  "shared_expert_intermediate_size": 5632, "decoder_sparse_step": 1, "norm_topk_prob": false})";
// transformers' GemmaConfig defaults (gemma-7b's shapes).
const char* kGemma7bDefaults = R"({"model_type": "gemma", "vocab_size": 256000, "hidden_size": 3072,
  "intermediate_size": 24576, "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 16,
  "head_dim": 256})";

Bytes sum_of(const OpGraph& g, const std::string& name_part, TensorCategory category, int layer) {
  Bytes total = 0;
  for (const Tensor& t : g.tensors()) {
    if (t.name.find(name_part) != std::string::npos && t.category == category && t.layer == layer) {
      total += t.size_bytes;
    }
  }
  return total;
}

}  // namespace

TEST_CASE("real config.json files: parameter counts match the published figures", "[quick][graph]") {
  SECTION("Mixtral-8x7B: 46.7B parameters (Mistral AI's release; Jiang et al. 2024, arXiv 2401.04088)") {
    const ModelConfig m = real_config("mistralai__Mixtral-8x7B-v0.1.config.json");
    CHECK(m.model_type == "mixtral");
    CHECK(m.moe.n_experts == 8);
    CHECK(m.moe.top_k == 2);
    CHECK(rounded(m.parameter_count(), 1e8) == 467);
  }
  SECTION("Phi-3-mini: 3.8B, Phi-3-medium: 14B (Abdin et al. 2024, the Phi-3 technical report)") {
    const ModelConfig mini = real_config("microsoft__Phi-3-mini-4k-instruct.config.json");
    CHECK(mini.fused_qkv);
    CHECK(mini.fused_gate_up);
    CHECK(rounded(mini.parameter_count(), 1e8) == 38);
    const ModelConfig medium = real_config("microsoft__Phi-3-medium-4k-instruct.config.json");
    CHECK(medium.n_kv_heads == 10);
    CHECK(rounded(medium.parameter_count(), 1e9) == 14);
  }
  SECTION("SantaCoder: 1.1B (Allal et al. 2023, arXiv 2301.03988), multi-query attention") {
    const ModelConfig m = real_config("bigcode__gpt_bigcode-santacoder.config.json");
    CHECK(m.n_kv_heads == 1);
    CHECK(m.linear_weights);
    CHECK(m.softmax_in_fp32);
    CHECK(rounded(m.parameter_count(), 1e8) == 11);
  }
  SECTION("Gemma 2 2B: 2,024,517,888 non-embedding parameters (Gemma Team 2024, Gemma 2 report, Table 1)") {
    const ModelConfig m = real_config("google__gemma-2-2b-it.config.json");
    CHECK(m.sandwich_norms);
    CHECK(m.attn_logit_softcapping == 50.0);
    CHECK(m.final_logit_softcapping == 30.0);
    CHECK(m.tied_embeddings);
    CHECK(m.norm == NormKind::kGemmaRmsNorm);
    CHECK(m.parameter_count() - embedding_parameters(m) == 2'024'517'888);
  }
  SECTION("Gemma 7B: 7,751,248,896 non-embedding parameters (Gemma Team 2024, arXiv 2403.08295, Table 2)") {
    const ModelConfig m = model_from_hf_config_json(kGemma7bDefaults, "gemma.json");
    CHECK(m.gated_activation == GatedActivation::kGeluTanh);
    CHECK(m.scale_embeddings);
    CHECK(m.parameter_count() - embedding_parameters(m) == 7'751'248'896);
  }
  SECTION("Qwen1.5-MoE-A2.7B: 14.3B parameters (its model card), a shared expert in all 24 layers") {
    const ModelConfig m = model_from_hf_config_json(kQwen15MoeDefaults, "qwen2_moe.json");
    CHECK(m.qkv_bias);
    CHECK(m.moe.shared_expert_d_ff == 5632);
    CHECK_FALSE(m.moe.normalize_top_k);
    CHECK(rounded(m.parameter_count(), 1e8) == 143);
  }
}

TEST_CASE("config.json of an unsupported model names the key", "[quick][graph]") {
  CHECK_THROWS_WITH(
      model_from_hf_config_json(R"({"model_type": "bert"})", "bert.json"),
      Contains("bert.json: key 'model_type': unsupported model type 'bert'") && Contains("gemma2"));
  CHECK_THROWS_WITH(model_from_hf_config_json(R"({"model_type": "gemma2", "vocab_size": 10})", "g.json"),
                    Contains("g.json: missing key 'hidden_size'"));
  CHECK_THROWS_WITH(model_from_hf_config_json(R"({"model_type": "phi3", "vocab_size": 10, "hidden_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
        "partial_rotary_factor": 0.75})",
                                              "phi.json"),
                    Contains("phi.json: key 'partial_rotary_factor'"));
  CHECK_THROWS_WITH(
      model_from_hf_config_json(R"({"model_type": "mixtral", "vocab_size": 10, "hidden_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128, "num_local_experts": 2,
        "num_experts_per_tok": 3})",
                                "m.json"),
      Contains("m.json: key 'num_experts_per_tok'"));
  CHECK_THROWS_WITH(model_from_hf_config_json(R"({"model_type": "llama", "vocab_size": 10, "hidden_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 99999999999})",
                                              "l.json"),
                    Contains("l.json: key 'intermediate_size' must be in 1.."));
}

TEST_CASE("qwen2_moe: decoder_sparse_step and mlp_only_layers choose the dense layers", "[quick][graph]") {
  ModelConfig m = model_from_hf_config_json(
      R"({"model_type": "qwen2_moe", "vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 4,
          "num_attention_heads": 2, "intermediate_size": 16, "num_experts": 4, "num_experts_per_tok": 2,
          "moe_intermediate_size": 4, "shared_expert_intermediate_size": 8, "decoder_sparse_step": 2,
          "mlp_only_layers": [3]})",
      "q.json");
  // (l + 1) % 2 == 0: layers 1 and 3; layer 3 listed dense: only layer 1 is sparse
  CHECK_FALSE(m.moe.sparse(0));
  CHECK(m.moe.sparse(1));
  CHECK_FALSE(m.moe.sparse(2));
  CHECK_FALSE(m.moe.sparse(3));
  // Per layer: attention 4 * 8 * 8 + q/k/v biases 3 * 8, two norms 2 * 8; dense MLP 3 * 8 * 16; sparse block:
  // router 4 * 8, 4 experts of 3 * 8 * 4, shared expert 3 * 8 * 8, its gate 8.
  const std::int64_t attention = 4 * 8 * 8 + 3 * 8 + 2 * 8;
  const std::int64_t dense = 3 * 8 * 16;
  const std::int64_t sparse = 4 * 8 + 4 * 3 * 8 * 4 + 3 * 8 * 8 + 8;
  CHECK(m.parameter_count() == 2 * 10 * 8 + 4 * attention + 3 * dense + sparse + 8);
}

TEST_CASE("SDPA's backend choice follows PyTorch's sdp_utils", "[quick][graph]") {
  using A = AttentionKind;
  // flash: fp16/bf16, head_dim <= 256 and a multiple of 8, compute capability >= 8.0
  CHECK(resolve_attention(A::kSdpa, 128, Precision::kAmpBf16, 90, true) == A::kSdpaFlash);
  CHECK(resolve_attention(A::kSdpa, 256, Precision::kBf16, 80, true) == A::kSdpaFlash);
  // fp32 inputs: memory-efficient
  CHECK(resolve_attention(A::kSdpa, 128, Precision::kFp32, 90, true) == A::kSdpaEfficient);
  // sm 8.9 (RTX 4090, L4) keeps flash's backward to head_dim 192: Gemma's 256 trains on memory-efficient,
  // runs inference on flash
  CHECK(resolve_attention(A::kSdpa, 256, Precision::kAmpBf16, 89, true) == A::kSdpaEfficient);
  CHECK(resolve_attention(A::kSdpa, 256, Precision::kAmpBf16, 89, false) == A::kSdpaFlash);
  // V100 / T4: no flash kernel
  CHECK(resolve_attention(A::kSdpa, 64, Precision::kAmpFp16, 70, true) == A::kSdpaEfficient);
  // head_dim 100 is no multiple of 8: the composite math fallback in 16-bit
  CHECK(resolve_attention(A::kSdpa, 100, Precision::kAmpBf16, 90, true) == A::kSdpaMath);
  CHECK(resolve_attention(A::kEager, 128, Precision::kAmpBf16, 90, true) == A::kEager);
  CHECK(parse_attention("flash_attention_2") == A::kFlashAttention2);
  CHECK(parse_attention("math") == A::kEager);
}

TEST_CASE("the new architectures build valid schedules in every attention kind", "[quick][graph]") {
  const char* files[] = {"mistralai__Mixtral-8x7B-v0.1.config.json",
                         "microsoft__Phi-3-mini-4k-instruct.config.json",
                         "bigcode__gpt_bigcode-santacoder.config.json", "google__gemma-2-2b-it.config.json"};
  for (const char* file : files) {
    ModelConfig m = real_config(file);
    m.vocab_size = 512;
    m.d_model = 64;
    m.n_layers = 2;
    m.n_heads = 4;
    m.n_kv_heads = m.n_kv_heads == 1 ? 1 : 2;
    m.head_dim = 16;
    m.d_ff = m.moe.expert_d_ff = 96;
    for (AttentionKind a : {AttentionKind::kEager, AttentionKind::kSdpa, AttentionKind::kFlashAttention2}) {
      for (Checkpointing ck : {Checkpointing::kNone, Checkpointing::kFull}) {
        INFO(file << " " << attention_name(a) << " " << checkpointing_name(ck));
        TrainingOptions o = test::small_options();
        o.precision = Precision::kAmpBf16;
        o.attention = a;
        o.checkpointing = ck;
        const OpGraph g = build_training_steps(m, o);
        test::check_schedule_invariants(g, build_allocation_schedule(g));
      }
    }
  }
}

TEST_CASE("MoE: the rows every expert saves add up to tokens x top_k", "[quick][graph]") {
  // Mixtral-style block, 4 experts, top-2, 2 x 32 tokens in fp32: the gathered inputs (current_state) saved
  // by the experts' w1 / w3 hold 64 * 2 = 128 rows of d_model fp32 values, however they are spread.
  ModelConfig m = real_config("mistralai__Mixtral-8x7B-v0.1.config.json");
  m.vocab_size = 512;
  m.d_model = 64;
  m.n_layers = 1;
  m.n_heads = 4;
  m.n_kv_heads = 4;
  m.head_dim = 16;
  m.d_ff = m.moe.expert_d_ff = 96;
  m.moe.n_experts = 4;
  TrainingOptions o = test::small_options();  // batch 2, seq 32, fp32
  o.steps = 1;
  o.forward_only = true;
  const OpGraph g = build_training_steps(m, o);
  CHECK(sum_of(g, ".current_state", TensorCategory::kActivation, 0) == Bytes{2 * 32 * 2 * 64 * 4});
  // the router's fp32 softmax over 4 experts, saved for backward: 64 tokens x 4 x 4 bytes
  CHECK(sum_of(g, "moe.routing_softmax", TensorCategory::kActivation, 0) == Bytes{64 * 4 * 4});
}

TEST_CASE("Gemma-2: soft-capping adds three logits-sized tensors, tanh's output saved", "[quick][graph]") {
  ModelConfig m = real_config("google__gemma-2-2b-it.config.json");
  m.vocab_size = 1000;
  m.d_model = 64;
  m.n_layers = 1;
  m.n_heads = 4;
  m.n_kv_heads = 2;
  m.head_dim = 16;
  m.d_ff = 96;
  TrainingOptions o = test::small_options();
  o.precision = Precision::kAmpBf16;
  o.steps = 1;
  o.forward_only = true;
  const OpGraph g = build_training_steps(m, o);
  // logits / cap, tanh, * cap on bf16 (batch 2 x 32 x 1000) logits: tanh_backward keeps tanh's result
  Bytes capped = 0, saved = 0;
  for (const Tensor& t : g.tensors()) {
    if (t.name.starts_with("final_logit_softcapping")) {
      CHECK(t.size_bytes == Bytes{2 * 32 * 1000 * 2});
      capped += t.size_bytes;
      saved += t.category == TensorCategory::kActivation ? t.size_bytes : 0;
    }
  }
  CHECK(capped == Bytes{3 * 2 * 32 * 1000 * 2});
  CHECK(saved == Bytes{2 * 32 * 1000 * 2});
}
