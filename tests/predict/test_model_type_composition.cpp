// The composition matrix over model types (issue 36): every supported model_type, from its real config.json
// (tests/data/hf_configs; llama4_text is the stored Llama-4-Scout file's text_config written alone), crossed
// with the techniques people put on a current model: LoRA, QLoRA, full activation checkpointing, FSDP and
// generation, DoRA, IA3 and prompt tuning (the registry's entries, sim/cli/techniques.cpp). Each pair is
// predicted with the invariants every prediction keeps (the bill adds up to the peak allocated bytes,
// reserved >= allocated), or refused with the real library's reason. The expected refusals are written here
// from the library, not read from vramsim: PEFT's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING
// (peft/utils/constants.py, main of 2026-08, 5d602fdb) has entries for gpt2, gpt_bigcode, llama, llama4,
// mistral, mixtral, phi, gemma, gemma2, gemma3_text, qwen2, qwen3 and falcon, and get_peft_model raises
// "Please specify `target_modules` in `peft_config`" for any other model.config.model_type (a multimodal
// checkpoint's is its wrapper's: gemma3, llava, qwen2_vl, qwen2_5_vl and mllama have no entry, llama4 has
// one). The
// models are shrunk (2 layers, width 64, 4 experts) after their config.json is read, so that the predictions
// run in seconds; what is composed is the model_type's layer code, not its size.
#include <catch2/catch.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "sim/cli/commands.h"
#include "sim/cli/techniques.h"
#include "sim/core/error.h"
#include "sim/predict/step_prediction.h"
#include "test_paths.h"

using namespace vramsim;

namespace {

std::string stored(const std::string& file) {
  return (test::source_dir() / "tests" / "data" / "hf_configs" / file).string();
}

std::string written(const std::string& name, const std::string& json) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "vramsim_model_type_matrix";
  std::filesystem::create_directories(dir);
  const std::filesystem::path path = dir / (name + ".json");
  std::ofstream(path) << json;
  return path.string();
}

struct TypeCase {
  std::string model_type;  // config.json's top-level model_type
  std::string config;      // a path
};

std::string scout_text_config() {
  std::ifstream in(stored("unsloth__Llama-4-Scout-17B-16E.config.json"));
  return nlohmann::json::parse(in).at("text_config").dump();
}

// One config.json per supported model_type: the stored real ones (tests/data/hf_configs/SOURCES.md).
std::vector<TypeCase> type_cases() {
  return {
      {"gpt2", stored("openai-community__gpt2.config.json")},
      {"gpt_bigcode", stored("bigcode__gpt_bigcode-santacoder.config.json")},
      {"llama", stored("meta-llama__Llama-3.2-3B.config.json")},
      {"mistral", stored("mistralai__Mistral-7B-Instruct-v0.3.config.json")},
      {"qwen2", stored("Qwen__Qwen2.5-3B.config.json")},
      {"gemma", stored("unsloth__gemma-2b.config.json")},
      {"gemma2", stored("google__gemma-2-2b-it.config.json")},
      {"phi3", stored("microsoft__Phi-3-mini-4k-instruct.config.json")},
      {"mixtral", stored("mistralai__Mixtral-8x7B-v0.1.config.json")},
      {"qwen2_moe", stored("Qwen__Qwen1.5-MoE-A2.7B.config.json")},
      {"qwen3", stored("Qwen__Qwen3-0.6B.config.json")},
      {"qwen3_moe", stored("Qwen__Qwen3-30B-A3B.config.json")},
      {"gemma3_text", stored("google__gemma-3-1b-it.config.json")},
      {"gemma3", stored("google__gemma-3-4b-it.config.json")},
      {"olmo2", stored("allenai__OLMo-2-1124-7B-Instruct.config.json")},
      {"granite", stored("ibm-granite__granite-3.3-8b-instruct.config.json")},
      {"phi", stored("microsoft__phi-2.config.json")},
      {"starcoder2", stored("bigcode__starcoder2-3b.config.json")},
      {"falcon", stored("tiiuae__falcon-7b.config.json")},
      {"gpt_oss", stored("openai__gpt-oss-20b.config.json")},
      // meta-llama/Llama-4-Scout-17B-16E: the stored wrapper, and its text_config alone as a text-only
      // checkpoint's config.json
      {"llama4_text", written("llama4_text", scout_text_config())},
      {"llama4", stored("unsloth__Llama-4-Scout-17B-16E.config.json")},
      {"deepseek_v3", stored("deepseek-ai__DeepSeek-V3.config.json")},
      {"llava", stored("llava-hf__llava-1.5-7b-hf.config.json")},
      {"llava_next", stored("llava-hf__llava-v1.6-mistral-7b-hf.config.json")},
      {"qwen2_vl", stored("Qwen__Qwen2-VL-7B-Instruct.config.json")},
      {"qwen2_5_vl", stored("Qwen__Qwen2.5-VL-7B-Instruct.config.json")},
      // a text-only batch's step, the tower and cross-attention layers in memory (mllama_parameters.h)
      {"mllama", stored("meta-llama__Llama-3.2-11B-Vision-Instruct.config.json")},
  };
}

// PEFT's mapping (the header's list): the model_types whose LoRA needs no target_modules.
const std::set<std::string> kPeftDefaults = {"gpt2",    "gpt_bigcode", "llama", "llama4", "mistral",
                                             "mixtral", "phi",         "gemma", "gemma2", "gemma3_text",
                                             "qwen2",   "qwen3",       "falcon"};

std::vector<std::string> split_words(std::string_view flags) {
  std::istringstream in{std::string(flags)};
  std::vector<std::string> words;
  for (std::string w; in >> w;) {
    words.push_back(w);
  }
  return words;
}

RequestArgs parse(const std::string& config, const cli::Technique& t) {
  std::vector<std::string> words =
      split_words("--model " + config + " --capacity 200GiB --precision bf16 --seq 32 --steps 2");
  for (const std::string& w : split_words(t.flags)) {
    words.push_back(w);
  }
  RequestArgs args;
  args.batch = 1;
  std::string alloc_conf;
  CLI::App app;
  cli::add_request_options(&app, args, alloc_conf);
  std::vector<std::string> reversed(words.rbegin(), words.rend());  // CLI11 parses a reversed vector
  app.parse(reversed);
  return args;
}

// The model's layer code at a small size (test_hf_model_types_2025.cpp's shrink).
void shrink(ModelConfig& m) {
  m.vocab_size = 512;
  m.n_layers = 2;
  m.d_model = 64;
  m.n_heads = 4;
  m.n_kv_heads = m.n_kv_heads == 1 ? 1 : 2;
  m.head_dim = 16;
  m.d_ff = 96;
  m.max_positions = std::min<std::int64_t>(m.max_positions, 1024);
  if (m.mla.kv_lora_rank > 0) {
    m.n_kv_heads = 4;
    m.mla = {32, 16, 16, 8, 16};
    m.head_dim = 24;
    m.moe.dense_layers = {0};
  }
  if (m.vision.simulated()) {  // the vision tower: 2 layers of width 32; llava's and gemma3's 28-pixel
    // images of 14-pixel patches (4 tokens each: gemma3's AvgPool2d of kernel 1); qwen2_vl's 56-pixel
    // images (set in the request: 16 patches, 4 tokens) and 2.5-VL's windows of 2 x 2 merged tokens
    m.vision.clip.hidden = 32;
    m.vision.clip.intermediate = 64;
    m.vision.clip.layers = 2;
    m.vision.clip.heads = 2;
    // llava_next: the same tiles per pinpoint, each of 28 pixels
    for (auto& [h, w] : m.vision.clip.grid_pinpoints) {
      h = h / m.vision.clip.image_size * 28;
      w = w / m.vision.clip.image_size * 28;
    }
    m.vision.clip.image_size = 28;
    m.vision.clip.pooled_tokens = m.vision.clip.pooled_tokens > 0 ? 4 : 0;
    m.vision.clip.window_size = m.vision.clip.window_size > 0 ? 56 : 0;
    m.vision.clip.full_attention_layers =
        m.vision.clip.window_size > 0 ? std::vector<std::int64_t>{1} : std::vector<std::int64_t>{};
  }
  if (m.moe.n_experts > 0) {
    m.moe.n_experts = 4;
    m.moe.top_k = std::min<std::int64_t>(m.moe.top_k, 2);
    m.moe.expert_d_ff = 32;
    m.moe.shared_expert_d_ff = m.moe.shared_expert_d_ff > 0 ? 32 : 0;
    std::erase_if(m.moe.dense_layers, [](std::int64_t l) { return l >= 2; });
  }
}

}  // namespace

TEST_CASE(
    "composition over model types: each type with LoRA, QLoRA, DoRA, IA3, prompt tuning, checkpointing, "
    "FSDP, generation",
    "[predict][composition]") {
  std::map<std::string, const cli::Technique*> by_name;
  for (const cli::Technique& t : cli::techniques()) {
    by_name[std::string(t.name)] = &t;
  }
  // and the PEFT catalogue's DoRA, IA3 and prompt tuning: IA3's defaults
  // (TRANSFORMERS_MODELS_TO_IA3_TARGET_MODULES_MAPPING, same commit) cover the same model_types as LoRA's;
  // prompt tuning targets no module, so every model_type takes it
  const std::vector<std::string> picked = {"lora",          "qlora",           "dora", "ia3",
                                           "prompt-tuning", "checkpoint-full", "fsdp", "generate"};
  std::set<std::string> types_seen;
  std::vector<std::string> rows;
  int predicted = 0;
  int refused = 0;
  for (const TypeCase& c : type_cases()) {
    types_seen.insert(c.model_type);
    std::string row = fmt::format("{:<12}", c.model_type);
    for (const std::string& name : picked) {
      REQUIRE(by_name.count(name) == 1);
      const cli::Technique& t = *by_name[name];
      INFO(c.model_type << " + " << name << " (" << c.config << ")");
      const bool lora = name == "lora" || name == "qlora" || name == "dora" || name == "ia3";
      const bool peft = lora || name == "prompt-tuning";
      const bool expect_refusal = lora && !kPeftDefaults.contains(c.model_type);
      // the vision-language models' vision parts are simulated (vision_tower.h, qwen2_vl_vision.h) for
      // training steps; prompt tuning (PEFT feeds inputs_embeds, with the image tokens' merge inside the
      // wrapper's model) and generate() with images are not
      const bool vlm = c.model_type == "llava" || c.model_type == "llava_next" || c.model_type == "gemma3" ||
                       c.model_type == "qwen2_vl" || c.model_type == "qwen2_5_vl" || c.model_type == "mllama";
      const bool not_modelled = vlm && (name == "prompt-tuning" || name == "generate");
      std::string refusal;
      Prediction p;
      try {
        PredictRequest request = make_request(parse(c.config, t), false);
        shrink(request.model);
        if (c.model_type == "qwen2_vl" || c.model_type == "qwen2_5_vl") {
          request.options.vision.image_size = 56;
        }
        p = predict(request);
      } catch (const InputError& e) {
        refusal = e.what();
      }
      if (expect_refusal) {
        CHECK(refusal ==
              fmt::format("--lora-targets: PEFT has no default target_modules for model_type '{}'; "
                          "name them (e.g. q_proj,v_proj or all-linear)",
                          c.model_type));
        ++refused;
        row += fmt::format(" {:<16}", name + ": PEFT");
        continue;
      }
      if (not_modelled) {
        CHECK_THAT(refusal, Catch::Matchers::EndsWith(fmt::format(
                                "with a vision-language model ({}): not modelled (vramsim)", c.model_type)));
        ++refused;
        row += fmt::format(" {:<16}", name + ": n/m");
        continue;
      }
      INFO(refusal);
      REQUIRE(refusal.empty());
      ++predicted;
      CHECK(p.peak_allocated_bytes > 0);
      CHECK(p.peak_reserved_bytes >= p.peak_allocated_bytes);
      const MemoryBill& b = p.bill;
      CHECK(b.parameters + b.gradients + b.optimizer_states + b.activations + b.temporaries + b.inputs +
                b.communication + b.kv_cache + b.allocator_rounding ==
            p.peak_allocated_bytes);
      if (peft) {
        CHECK(p.trainable_parameters > 0);
        CHECK(p.trainable_parameters < p.total_parameters);
      }
      if (name == "generate") {
        CHECK(b.gradients == 0);
        CHECK(b.kv_cache > 0);
      }
      row += fmt::format(" {:<16}", name + ": ok");
    }
    rows.push_back(row);
  }
  // every supported model_type is in the matrix
  for (const std::string& type : supported_model_types()) {
    INFO(type);
    CHECK(types_seen.contains(type));
  }
  WARN(fmt::format("{} predicted, {} refused (by PEFT, or not modelled):\n{}", predicted, refused,
                   fmt::join(rows, "\n")));
  CHECK(predicted + refused == static_cast<int>(type_cases().size() * picked.size()));
}
