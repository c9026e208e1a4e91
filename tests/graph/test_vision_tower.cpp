// LLaVA (model_type llava) as transformers builds and runs it: the parameter count of
// llava-hf/llava-1.5-7b-hf worked by hand from modeling_clip.py (CLIPVisionModel), modeling_llava.py
// (LlavaMultiModalProjector) and modeling_llama.py, against the model card's 7.06B; and the bytes a tiny
// LLaVA's step allocates for the vision part, worked by hand from the code each tensor comes from (cited per
// check): the frozen tower keeps only the projector's input for backward, a trained tower's layers after
// vision_feature_layer keep nothing, masked_scatter's CUDA scratch and backward indices,
// get_placeholder_mask's check.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "graph/graph_test_util.h"
#include "graph/vision_test_util.h"
#include "sim/core/error.h"
#include "sim/models/model_config.h"
#include "sim/models/transformer_builder.h"
#include "sim/vision/vision_tower.h"
#include "test_paths.h"

using namespace vramsim;

namespace {

ModelConfig stored(const std::string& file) { return test::stored_hf_config(file); }

// A LLaVA with the shapes small enough to count every tensor: the language model a llama of width 64, 2
// layers, 4 heads, MLP 128, vocabulary 256; the tower CLIP of width 32, 3 layers, 2 heads, MLP 64, 28-pixel
// images of 14-pixel patches (2 x 2 = 4 patches, 5 positions with the CLS token).
ModelConfig tiny_llava(int feature_layer = -2, const std::string& strategy = "default") {
  nlohmann::json j = test::tiny_llava_json();
  j["vision_feature_layer"] = feature_layer;
  j["vision_feature_select_strategy"] = strategy;
  return model_from_hf_config_json(j.dump(), "tiny_llava.json");
}

TrainingOptions fp32_options(bool freeze_tower) { return test::vision_fp32_options(freeze_tower); }

Bytes bytes_of(const OpGraph& g, TensorCategory category, const std::string& prefix) {
  return test::bytes_with_prefix(g, category, prefix);
}

}  // namespace

TEST_CASE("llava: llava-1.5-7b-hf's parameters counted by hand, the model card's 7.06B", "[quick][graph]") {
  const ModelConfig m = stored("llava-hf__llava-1.5-7b-hf.config.json");
  CHECK(m.model_type == "llama");
  CHECK(m.vision.wrapper_model_type == "llava");
  CHECK(m.vision.simulated());
  // text_config: LlamaConfig's defaults for the keys it leaves out (hidden 4096, MLP 11008, 32 layers, 32
  // heads), vocab_size 32064. LlamaDecoderLayer: q/k/v/o 4 x 4096 x 4096, gate/up/down 3 x 4096 x 11008, two
  // RMSNorms; embed_tokens and the untied lm_head 32064 x 4096; the final norm.
  const std::int64_t llama_layer = 4 * 4096LL * 4096 + 3 * 4096LL * 11008 + 2 * 4096;
  CHECK(m.parameter_count() == 32 * llama_layer + 2 * 32064LL * 4096 + 4096);
  CHECK(m.parameter_count() == 6'738'939'904);
  // modeling_clip.py CLIPVisionModel of vision_config: class_embedding 1024; patch_embedding Conv2d(3, 1024,
  // 14, bias=False) 1024 x 3 x 14 x 14; position_embedding (336 / 14)^2 + 1 = 577 x 1024; pre_layrnorm 2 x
  // 1024; 24 CLIPEncoderLayers of k/v/q/out_proj 4 x (1024 x 1024 + 1024), layer_norm1 and layer_norm2 2 x 2
  // x 1024, fc1 1024 x 4096 + 4096, fc2 4096 x 1024 + 1024; post_layernorm 2 x 1024
  const std::int64_t clip_layer =
      4 * (1024 * 1024 + 1024) + 2 * 2 * 1024 + (1024 * 4096 + 4096) + (4096 * 1024 + 1024);
  const std::int64_t tower = 1024 + 1024 * 3 * 14 * 14 + 577 * 1024 + 2 * 1024 + 24 * clip_layer + 2 * 1024;
  CHECK(m.vision.tower_parameters == tower);
  CHECK(m.vision.tower_parameters == 303'507'456);
  // LlavaMultiModalProjector: linear_1 1024 -> 4096 and linear_2 4096 -> 4096, with biases
  CHECK(m.vision.projector_parameters == (1024 * 4096 + 4096) + (4096 * 4096 + 4096));
  CHECK(m.vision.projector_parameters == 20'979'712);
  const std::int64_t total = m.parameter_count() + m.vision.total();
  CHECK(total == 7'063'427'072);
  CHECK(std::llround(total / 1e7) == 706);  // the model card's "7.06B params"
  // the shapes the step creates add up to the same count
  const auto [shapes, listed] = test::llava_vision_shapes(m);
  CHECK(listed == m.vision.total());
  CHECK(shapes.front().name == "model.vision_tower.vision_model.embeddings.class_embedding");
  CHECK(shapes.back().name == "model.multi_modal_projector.linear_2.bias");
  // 336-pixel images in 14-pixel patches, the CLS token dropped (vision_feature_select_strategy "default"):
  // LlavaProcessor's 576 image tokens
  CHECK(m.vision.clip.tokens_per_image() == 576);
  CHECK(m.vision.clip.feature_layers_run() == 23);  // hidden_states[-2]: the 23rd layer's output
}

TEST_CASE("llava: a tiny LLaVA's vision bytes, worked by hand", "[quick][graph]") {
  const ModelConfig m = tiny_llava();
  REQUIRE(m.vision.clip.tokens_per_image() == 4);
  SECTION("frozen tower: only the selected hidden state is kept for backward (the projector's input)") {
    const OpGraph g = build_training_steps(m, fp32_options(true));
    // hidden_states[-2] of 4 (embeddings + 3 layers) is the output of layer 1 (residual2): [1, 5, 32] fp32.
    // [:, 1:] is a view, so linear_1 (mm saves mat1 for the weight's gradient) keeps the whole storage,
    // CLS row included: 5 x 32 x 4 bytes. The frozen layers save nothing (no input requires grad).
    CHECK(bytes_of(g, TensorCategory::kActivation, "vision.") == 5 * 32 * 4);
    CHECK(test::sizes_named(g, "vision.layers.1.residual2") == std::vector<Bytes>{5 * 32 * 4});
    CHECK(bytes_of(g, TensorCategory::kActivation, "vision.layers.0.") == 0);
    // no gradient for the tower; the projector's 32 x 64 + 64 + 64 x 64 + 64 elements get one
    CHECK(bytes_of(g, TensorCategory::kGradient, "model.vision_tower.") == 0);
    CHECK(bytes_of(g, TensorCategory::kGradient, "model.multi_modal_projector.") ==
          (32 * 64 + 64 + 64 * 64 + 64) * 4);
  }
  SECTION("trained tower: its layers up to the selected one save, the one after does not") {
    const OpGraph g = build_training_steps(m, fp32_options(false));
    CHECK(bytes_of(g, TensorCategory::kActivation, "vision.layers.0.") > 0);
    CHECK(bytes_of(g, TensorCategory::kActivation, "vision.layers.1.") > 0);
    // layer 2's output is hidden_states[-1]: only the unused pooled output reads it, a graph that dies
    CHECK(bytes_of(g, TensorCategory::kActivation, "vision.layers.2.") == 0);
    // every tower parameter gets its gradient: class 32, patch 32 x 3 x 14 x 14, positions 5 x 32,
    // pre_layrnorm 64, 3 layers of 4 x (32 x 32 + 32) + 4 x 32 + (32 x 64 + 64) + (64 x 32 + 32), and
    // post_layernorm 64 -- except post_layernorm's and layer 2's, which the loss does not reach
    const Bytes layer = (4 * (32 * 32 + 32) + 4 * 32 + (32 * 64 + 64) + (64 * 32 + 32)) * 4;
    const Bytes embeddings = (32 + 32 * 3 * 14 * 14 + 5 * 32 + 64) * 4;
    CHECK(bytes_of(g, TensorCategory::kGradient, "model.vision_tower.") == embeddings + 2 * layer);
  }
  SECTION("masked_scatter and get_placeholder_mask") {
    const OpGraph g = build_training_steps(m, fp32_options(true));
    // masked_scatter__cuda: maskPrefixSum = at::empty(self.sizes(), kLong) of inputs_embeds' [1, 16, 64],
    // and launch_masked_scatter_kernel's mask.contiguous() of the expanded bool mask
    CHECK(test::sizes_named(g, "inputs_embeds.masked_scatter.scratch") ==
          std::vector<Bytes>{1 * 16 * 64 * 8, 1 * 16 * 64});
    // inputs_embeds[special_image_mask]: nonzero's (n, 3) int64 indices of the 4 x 64 selected elements, and
    // the elements
    CHECK(test::sizes_named(g, "special_image_mask.nonzero") == std::vector<Bytes>{4 * 64 * 3 * 8});
    CHECK(test::sizes_named(g, "inputs_embeds[special_image_mask]") == std::vector<Bytes>{4 * 64 * 4});
    // torch.cat(image_features, dim=0): the [4, 64] features copied once
    CHECK(test::sizes_named(g, "image_features.cat") == std::vector<Bytes>{4 * 64 * 4});
  }
  SECTION("two images per sample: the slice is copied before linear_1") {
    TrainingOptions o = fp32_options(true);
    o.vision.images_per_sample = 2;
    const OpGraph g = build_training_steps(m, o);
    // [2, 5, 32][:, 1:] is not contiguous, so the linear's reshape copies it: [2, 4, 32], saved instead of
    // the hidden state
    CHECK(test::sizes_named(g, "vision.select_features_reshape") == std::vector<Bytes>{2 * 4 * 32 * 4});
    CHECK(bytes_of(g, TensorCategory::kActivation, "vision.") == 2 * 4 * 32 * 4);
    CHECK(test::sizes_named(g, "pixel_values") == std::vector<Bytes>{2 * 3 * 28 * 28 * 4});
  }
}

TEST_CASE("llava: what the vision part refuses", "[quick][graph]") {
  const ModelConfig m = tiny_llava();
  TrainingOptions o = fp32_options(true);
  o.vision.image_size = 56;
  CHECK_THROWS_WITH(build_training_steps(m, o),
                    Catch::Matchers::Contains("Input image size (56*56) doesn't match model (28*28)"));
  o = fp32_options(true);
  o.vision.images_per_sample = 5;  // 20 image tokens in a sequence of 16
  CHECK_THROWS_WITH(build_training_steps(m, o),
                    "--images-per-sample 5: 20 image tokens (4 per image) do not fit in --seq 16 (the "
                    "language model's sequence, image tokens included)");
  o = fp32_options(true);
  o.generate_tokens = 2;
  CHECK_THROWS_WITH(build_training_steps(m, o),
                    "--generate with a vision-language model (llava): not modelled (vramsim)");
  // config.json errors name the file and key
  CHECK_THROWS_WITH(
      model_from_hf_config_json(R"({"model_type": "llava", "vision_feature_layer": -40})", "c.json"),
      "c.json: key 'vision_feature_layer' must be in -25..25, got -40");
  CHECK_THROWS_WITH(
      model_from_hf_config_json(
          R"({"model_type": "llava", "vision_config": {"model_type": "siglip_vision_model"}})", "c.json"),
      "c.json: key 'vision_config.model_type': 'siglip_vision_model' is not modelled (clip_vision_model is)");
  CHECK_THROWS_WITH(
      model_from_hf_config_json(R"({"model_type": "llava", "text_config": {"model_type": "llava"}})",
                                "c.json"),
      "c.json: key 'text_config': model_type 'llava' is a multimodal wrapper, not a language model");
}
