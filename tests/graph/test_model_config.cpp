// Presets (parameter counts of the published models) and Hugging Face config.json loading.
#include <catch2/catch.hpp>

#include <string>

#include "sim/core/error.h"
#include "sim/models/model_config.h"

using namespace vramsim;

TEST_CASE("model presets have the published parameter counts", "[quick][graph]") {
  // GPT-2: GPT2LMHeadModel with tied lm_head; Llama / Mistral: the Hugging Face checkpoints' totals.
  const auto [name, count] = GENERATE(table<const char*, std::int64_t>({
      {"gpt2", 124'439'808},
      {"gpt2-medium", 354'823'168},
      {"gpt2-large", 774'030'080},
      {"gpt2-xl", 1'557'611'200},
      {"llama-2-7b", 6'738'415'616},
      {"llama-2-13b", 13'015'864'320},
      {"llama-2-70b", 68'976'648'192},
      {"llama-3-8b", 8'030'261'248},
      {"mistral-7b", 7'241'732'096},
      // CS336: 2 V d (embedding + untied lm_head) + L (4 d^2 + 3 d f + 2 d) + d
      {"cs336-small", 2 * 10000 * 768 + 12 * (4 * 768 * 768 + 3 * 768 * 3072 + 2 * 768) + 768},
      {"cs336-2.7b", 2 * 10000 * 2560 + 32 * (4 * 2560LL * 2560 + 3 * 2560LL * 10240 + 2 * 2560) + 2560},
  }));
  INFO(name);
  CHECK(model_preset(name).parameter_count() == count);
}

TEST_CASE("every preset name loads and round-trips through load_model", "[quick][graph]") {
  for (const std::string& name : model_preset_names()) {
    const ModelConfig m = load_model(name);
    CHECK(m.name == name);
    // head_dim is d_model / n_heads unless the checkpoint's config.json sets it otherwise (Qwen3-32B,
    // Qwen3-30B-A3B's 128 x 32 heads on 2048, Gemma, gpt-oss; DeepSeek-V3's MLA: qk_nope + qk_rope)
    const bool own_head_dim = m.model_type == "qwen3" || m.model_type == "qwen3_moe" ||
                              m.model_type == "qwen2" || m.model_type == "gemma2" ||
                              m.model_type == "gemma3_text" || m.model_type == "gpt_oss" ||
                              m.model_type == "deepseek_v3";
    if (!own_head_dim) {
      CHECK(m.head_dim * m.n_heads == m.d_model);
    }
  }
  CHECK(model_preset("cs336-2.7b").code == kCs336BasicsCode);
  CHECK(model_preset("cs336-small").code == kCs336BasicsCode);
  CHECK(model_preset("llama-2-70b").kv_dim() == 1024);
}

TEST_CASE("config.json of the supported architectures", "[quick][graph]") {
  SECTION("LlamaForCausalLM equals the llama-2-7b preset") {
    const ModelConfig m = model_from_hf_config_json(R"({
      "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 11008,
      "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
      "vocab_size": 32000, "max_position_embeddings": 4096, "tie_word_embeddings": false})",
                                                    "llama/config.json");
    CHECK(m.parameter_count() == 6'738'415'616);
    CHECK(m.family == ModelFamily::kLlama);
  }
  SECTION("MistralForCausalLM with grouped-query attention") {
    const ModelConfig m = model_from_hf_config_json(R"({
      "architectures": ["MistralForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
      "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 32000})",
                                                    "mistral.json");
    CHECK(m.parameter_count() == 7'241'732'096);
  }
  SECTION("Qwen2ForCausalLM has q/k/v biases and tied embeddings (Qwen2-0.5B: 494,032,768)") {
    const ModelConfig m = model_from_hf_config_json(R"({
      "architectures": ["Qwen2ForCausalLM"], "hidden_size": 896, "intermediate_size": 4864,
      "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
      "vocab_size": 151936, "tie_word_embeddings": true})",
                                                    "qwen2.json");
    CHECK(m.qkv_bias);
    CHECK(m.parameter_count() == 494'032'768);
  }
  SECTION("GPT2LMHeadModel equals the gpt2 preset") {
    const ModelConfig m = model_from_hf_config_json(R"({
      "architectures": ["GPT2LMHeadModel"], "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024,
      "n_inner": null, "vocab_size": 50257})",
                                                    "gpt2.json");
    CHECK(m.parameter_count() == 124'439'808);
    CHECK(m.tied_embeddings);
  }
}

TEST_CASE("config.json errors name the file and the key", "[quick][graph]") {
  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(model_from_hf_config_json(R"({"architectures": ["BertModel"]})", "bert.json"),
                    Contains("bert.json") && Contains("architectures") && Contains("BertModel"));
  CHECK_THROWS_WITH(
      model_from_hf_config_json(
          R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 10, "hidden_size": 64})", "c.json"),
      Contains("c.json") && Contains("missing key 'num_hidden_layers'"));
  CHECK_THROWS_WITH(
      model_from_hf_config_json(
          R"({"architectures": ["GPT2LMHeadModel"], "vocab_size": 10, "n_embd": "768"})", "g.json"),
      Contains("g.json") && Contains("'n_embd'") && Contains("integer"));
  CHECK_THROWS_WITH(model_from_hf_config_json("{not json", "broken.json"), Contains("broken.json"));
  CHECK_THROWS_WITH(load_model("llama-9b"), Contains("--model") && Contains("llama-9b"));
  CHECK_THROWS_WITH(load_model("/nonexistent/config.json"), Contains("/nonexistent/config.json"));
  CHECK_THROWS_AS(model_from_hf_config_json(R"({"architectures": []})", "e.json"), InputError);
  const std::string gpt2 =
      R"({"architectures": ["GPT2LMHeadModel"], "vocab_size": 10, "n_embd": 64, "n_layer": 1, "n_head": 4,
          "n_positions": 32)";
  CHECK_THROWS_WITH(model_from_hf_config_json(gpt2 + R"(, "activation_function": "swish"})", "a.json"),
                    Contains("a.json") && Contains("'activation_function'") && Contains("swish"));
  CHECK_THROWS_WITH(model_from_hf_config_json(gpt2 + R"(, "activation_function": 3})", "a.json"),
                    Contains("'activation_function' must be a string"));
}

TEST_CASE("config.json: GPT-2's activation_function, GPT2Config's default gelu_new", "[quick][graph]") {
  const std::string gpt2 =
      R"({"architectures": ["GPT2LMHeadModel"], "vocab_size": 10, "n_embd": 64, "n_layer": 1, "n_head": 4,
          "n_positions": 32)";
  CHECK(model_from_hf_config_json(gpt2 + "}", "g.json").gelu == GeluKind::kNew);
  CHECK(model_from_hf_config_json(gpt2 + R"(, "activation_function": "gelu_new"})", "g.json").gelu ==
        GeluKind::kNew);
  CHECK(model_from_hf_config_json(gpt2 + R"(, "activation_function": "gelu_pytorch_tanh"})", "g.json").gelu ==
        GeluKind::kPytorchTanh);
  CHECK(model_from_hf_config_json(gpt2 + R"(, "activation_function": "gelu"})", "g.json").gelu ==
        GeluKind::kExact);
  CHECK(model_preset("gpt2").gelu == GeluKind::kNew);  // openai-community/gpt2's config.json says gelu_new
}

TEST_CASE("config.json: dropout rates, GPT2Config's 0.1 by default, Llama's attention_dropout",
          "[quick][graph]") {
  const std::string gpt2 =
      R"({"architectures": ["GPT2LMHeadModel"], "vocab_size": 10, "n_embd": 64, "n_layer": 1, "n_head": 4,
          "n_positions": 32)";
  const ModelConfig d = model_from_hf_config_json(gpt2 + "}", "g.json");
  CHECK(d.dropout.embeddings == 0.1);
  CHECK(d.dropout.attention == 0.1);
  CHECK(d.dropout.residual == 0.1);
  const ModelConfig z = model_from_hf_config_json(
      gpt2 + R"(, "embd_pdrop": 0.0, "attn_pdrop": 0.2, "resid_pdrop": 0})", "g.json");
  CHECK(z.dropout.embeddings == 0.0);
  CHECK(z.dropout.attention == 0.2);
  CHECK(z.dropout.residual == 0.0);
  CHECK_THROWS_WITH(model_from_hf_config_json(gpt2 + R"(, "resid_pdrop": 1.5})", "g.json"),
                    Catch::Matchers::Contains("'resid_pdrop' must be in [0, 1)"));
  const ModelConfig l = model_from_hf_config_json(
      R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 10, "hidden_size": 64, "num_hidden_layers": 1,
          "num_attention_heads": 4, "intermediate_size": 128, "attention_dropout": 0.05})",
      "l.json");
  CHECK(l.dropout.attention == 0.05);
  CHECK(l.dropout.residual == 0.0);
  CHECK(model_preset("gpt2").dropout.residual == 0.0);  // presets: none unless --dropout
}
