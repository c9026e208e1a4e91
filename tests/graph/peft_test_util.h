// Shared fixtures of the PEFT tests (test_peft_catalogue.cpp, test_peft_adalora_oft_boft.cpp,
// test_peft_prefix_tokens.cpp): the Llama-3.2-3B whose trainable counts PEFT's MetaMathQA runs report, a
// method's LoraOptions, the saved-for-backward bytes of named ops, and the tiny bf16 Llama the graph checks
// run on.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "graph_test_util.h"
#include "sim/finetune/peft_lora.h"
#include "sim/finetune/peft_method.h"
#include "sim/models/model_config.h"
#include "test_paths.h"

namespace vramsim::test {

// Parameters of meta-llama/Llama-3.2-3B without adapters (PEFT's num_total_params minus
// num_trainable_params in method_comparison/MetaMathQA/results/lora--llama-3.2-3B-rank32.json:
// 3,221,924,864 - 9,175,040).
constexpr std::int64_t kLlama32Base = 3212749824;

// meta-llama/Llama-3.2-3B's config.json (tests/data/hf_configs).
inline ModelConfig llama32_3b() {
  return load_model(
      (source_dir() / "tests" / "data" / "hf_configs" / "meta-llama__Llama-3.2-3B.config.json").string());
}

// PEFT method `m` of rank `rank` on `targets` (0 and empty are LoraOptions' defaults: the method's own rank,
// PEFT's default targets for the model_type).
inline LoraOptions peft_method(PeftMethod m, int rank = 0, std::vector<std::string> targets = {}) {
  LoraOptions o;
  o.method = m;
  o.rank = rank;
  o.targets = std::move(targets);
  return o;
}

inline bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

constexpr int kAnyLayer = -2;

// Bytes of the saved-for-backward tensors (category kActivation) made by ops whose name ends with one of
// `suffixes`, in decoder layer `layer` (kAnyLayer: in any).
inline Bytes saved_by(const OpGraph& g, int layer, const std::vector<std::string>& suffixes) {
  Bytes total = 0;
  for (const Tensor& t : g.tensors()) {
    if (t.category != TensorCategory::kActivation || (layer != kAnyLayer && t.layer != layer)) {
      continue;
    }
    for (const std::string& s : suffixes) {
      if (ends_with(g.op(t.producer).name, s)) {
        total += t.size_bytes;
        break;
      }
    }
  }
  return total;
}

// The tiny Llama of graph_test_util.h with 2 key/value heads: width 64, 4 query heads of 16, 2 layers,
// vocabulary 1000, MLP 172 (q_proj 64 -> 64, k_proj and v_proj 64 -> 32), trained in bf16 without master
// weights for one step at batch 2 x 32 tokens (small_options).
constexpr std::int64_t kTinyTokens = 64, kTinyWidth = 64, kTinyKv = 32, kTinyFf = 172;
inline ModelConfig tiny_peft_model() { return tiny_model("tinyllama-1.1b", 2); }
inline TrainingOptions tiny_peft_options(const LoraOptions& lora) {
  TrainingOptions o = small_options();
  o.precision = Precision::kBf16;
  o.master_weights = MasterWeights::kNone;
  o.steps = 1;
  o.lora = lora;
  return o;
}

}  // namespace vramsim::test
