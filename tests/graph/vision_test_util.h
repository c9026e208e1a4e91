// Set-up shared by the vision-language model tests (test_vision_tower.cpp: LLaVA and Gemma 3;
// test_qwen2_vl_vision.cpp: Qwen2-VL): a stored config.json, one fp32 training step of one sample, and the
// bytes of a category of tensors under a name prefix.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "graph/graph_test_util.h"
#include "sim/models/model_config.h"
#include "sim/vision/vision_tower.h"
#include "test_paths.h"

namespace vramsim::test {

// A LLaVA small enough to count every tensor: the language model a llama of width 64, 2 layers, 4 heads, MLP
// 128, vocabulary 256; the tower CLIP of width 32, 3 layers, 2 heads, MLP 64, 28-pixel images of 14-pixel
// patches (2 x 2 = 4 patches, 5 positions with the CLS token). Tests add the keys they vary.
inline nlohmann::json tiny_llava_json() {
  return {{"model_type", "llava"},
          {"text_config",
           {{"model_type", "llama"},
            {"hidden_size", 64},
            {"intermediate_size", 128},
            {"num_hidden_layers", 2},
            {"num_attention_heads", 4},
            {"vocab_size", 256}}},
          {"vision_config",
           {{"model_type", "clip_vision_model"},
            {"hidden_size", 32},
            {"intermediate_size", 64},
            {"num_hidden_layers", 3},
            {"num_attention_heads", 2},
            {"image_size", 28},
            {"patch_size", 14}}}};
}

// The vision parameters' shapes as the step creates them (llava_vision_parameter_shapes), and their elements.
inline std::pair<std::vector<ParameterShape>, std::int64_t> llava_vision_shapes(const ModelConfig& m) {
  std::vector<ParameterShape> shapes;
  llava_vision_parameter_shapes(m, shapes);
  std::int64_t listed = 0;
  for (const ParameterShape& s : shapes) {
    listed += s.numel();
  }
  return {shapes, listed};
}

// A config.json from tests/data/hf_configs, read as the CLI reads --model.
inline ModelConfig stored_hf_config(const std::string& file) {
  return load_model((source_dir() / "tests" / "data" / "hf_configs" / file).string());
}

// One fp32 step of batch 1 x 16 tokens, the vision tower frozen or trained.
inline TrainingOptions vision_fp32_options(bool freeze_tower) {
  TrainingOptions o = small_options();
  o.batch = 1;
  o.seq = 16;
  o.steps = 1;
  o.vision.freeze_tower = freeze_tower;
  return o;
}

// Bytes of the tensors of `category` whose name starts with `prefix`.
inline Bytes bytes_with_prefix(const OpGraph& g, TensorCategory category, const std::string& prefix) {
  Bytes total = 0;
  for (const Tensor& t : g.tensors()) {
    if (t.category == category && t.name.starts_with(prefix)) {
      total += t.size_bytes;
    }
  }
  return total;
}

}  // namespace vramsim::test
