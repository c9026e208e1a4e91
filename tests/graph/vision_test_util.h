// Set-up shared by the vision-language model tests (test_vision_tower.cpp: LLaVA and Gemma 3;
// test_qwen2_vl_vision.cpp: Qwen2-VL): a stored config.json, one fp32 training step of one sample, and the
// bytes of a category of tensors under a name prefix.
#pragma once

#include <string>

#include "graph/graph_test_util.h"
#include "sim/models/model_config.h"
#include "test_paths.h"

namespace vramsim::test {

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
