// Qwen2-VL / Qwen2.5-VL (model_types qwen2_vl, qwen2_5_vl) and Gemma-3's vision part (gemma3) as
// transformers builds and runs them: parameter counts of the real checkpoints worked by hand from
// modeling_qwen2_vl.py (Qwen2VisionTransformerPretrainedModel, PatchMerger), modeling_qwen2_5_vl.py
// (Qwen2_5_VisionTransformerPretrainedModel, Qwen2_5_VLPatchMerger) and modeling_qwen2.py against the model
// cards' 8.29B; image tokens from image_processing_qwen2_vl.py's smart_resize worked by hand; and the bytes
// one vision layer of a tiny model saves for backward, worked tensor by tensor from the code each comes from.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "graph/graph_test_util.h"
#include "graph/vision_test_util.h"
#include "sim/core/error.h"
#include "sim/models/model_config.h"
#include "sim/models/transformer_builder.h"
#include "sim/vision/qwen2_vl_vision.h"
#include "sim/vision/vision_tower.h"
#include "test_paths.h"

using namespace vramsim;

namespace {

ModelConfig stored(const std::string& file) { return test::stored_hf_config(file); }

std::int64_t listed_vision_parameters(const ModelConfig& m) {
  std::vector<ParameterShape> shapes;
  llava_vision_parameter_shapes(m, shapes);
  std::int64_t n = 0;
  for (const ParameterShape& s : shapes) {
    n += numel(s.shape);
  }
  return n;
}

// A Qwen2-VL small enough to count every tensor: the language model a qwen2 of width 64, 2 layers, 4 heads,
// MLP 128, vocabulary 256; the vision transformer of width 32 (embed_dim), 2 blocks, 2 heads (head size 16),
// mlp_ratio 2 (MLP 64), 14-pixel patches of 2 frames, 2 x 2 patches per token.
nlohmann::json tiny_qwen2_vl_json(const std::string& type = "qwen2_vl") {
  nlohmann::json vision = {{"depth", 2},
                           {"num_heads", 2},
                           {"patch_size", 14},
                           {"spatial_merge_size", 2},
                           {"temporal_patch_size", 2}};
  if (type == "qwen2_vl") {
    vision["embed_dim"] = 32;
    vision["mlp_ratio"] = 2;
    vision["hidden_size"] = 64;
  } else {
    vision["hidden_size"] = 32;
    vision["intermediate_size"] = 64;
    vision["out_hidden_size"] = 64;
    vision["window_size"] = 56;  // 2 x 2 merged tokens per window
    vision["fullatt_block_indexes"] = {1};
  }
  const nlohmann::json j = {
      {"model_type", type},       {"hidden_size", 64},
      {"intermediate_size", 128}, {"num_hidden_layers", 2},
      {"num_attention_heads", 4}, {"num_key_value_heads", 2},
      {"vocab_size", 256},        {"tie_word_embeddings", false},
      {"vision_config", vision},  {"rope_scaling", {{"type", "mrope"}, {"mrope_section", {2, 3, 3}}}}};
  return j;
}

ModelConfig tiny_qwen2_vl(const std::string& type = "qwen2_vl") {
  return model_from_hf_config_json(tiny_qwen2_vl_json(type).dump(), "tiny_qwen2_vl.json");
}

// Gemma-3 small: gemma3_text of width 64, 2 layers; SigLIP of width 32, 2 layers, 2 heads, MLP 64, 56-pixel
// images of 14-pixel patches (4 x 4 = 16 patches), pooled to mm_tokens_per_image 4 (AvgPool2d kernel 2).
ModelConfig tiny_gemma3() {
  const nlohmann::json j = {{"model_type", "gemma3"},
                            {"mm_tokens_per_image", 4},
                            {"text_config",
                             {{"model_type", "gemma3_text"},
                              {"hidden_size", 64},
                              {"intermediate_size", 128},
                              {"num_hidden_layers", 2},
                              {"num_attention_heads", 4},
                              {"num_key_value_heads", 2},
                              {"head_dim", 16},
                              {"vocab_size", 256}}},
                            {"vision_config",
                             {{"model_type", "siglip_vision_model"},
                              {"hidden_size", 32},
                              {"intermediate_size", 64},
                              {"num_hidden_layers", 2},
                              {"num_attention_heads", 2},
                              {"image_size", 56},
                              {"patch_size", 14},
                              {"vision_use_head", false}}}};
  return model_from_hf_config_json(j.dump(), "tiny_gemma3.json");
}

TrainingOptions fp32_options(bool freeze_tower) {
  TrainingOptions o = test::vision_fp32_options(freeze_tower);
  o.attention = AttentionKind::kSdpaEfficient;
  return o;
}

Bytes bytes_of(const OpGraph& g, TensorCategory category, const std::string& prefix) {
  return test::bytes_with_prefix(g, category, prefix);
}

}  // namespace

TEST_CASE("qwen2_vl: Qwen2-VL-7B-Instruct's parameters by hand (8.29B)", "[quick][graph]") {
  const ModelConfig m = stored("Qwen__Qwen2-VL-7B-Instruct.config.json");
  CHECK(m.vision.wrapper_model_type == "qwen2_vl");
  CHECK(m.model_type == "qwen2");
  CHECK(m.vision.simulated());
  CHECK(m.vision.mrope);
  // Qwen2 language model: 28 layers of q 3584 x 3584 + 3584, k and v 3584 x 512 + 512 each, o 3584 x 3584,
  // gate / up / down 3 x 3584 x 18944, two RMSNorms; untied 152064 x 3584 embeddings and lm_head; final norm
  const std::int64_t lm_layer =
      (3584 * 3584 + 3584) + 2 * (3584 * 512 + 512) + 3584 * 3584 + 3 * 3584 * 18944 + 2 * 3584;
  CHECK(lm_layer == 233'057'792);
  CHECK(m.parameter_count() == 28 * lm_layer + 2 * 152064 * 3584 + 3584);
  CHECK(m.parameter_count() == 7'615'616'512);
  // PatchEmbed Conv3d(3, 1280, (2, 14, 14), bias=False); 32 Qwen2VLVisionBlocks of norm1 / norm2 LayerNorms
  // (weight and bias), qkv 1280 -> 3840, proj 1280 -> 1280, fc1 1280 -> 5120 (mlp_ratio 4), fc2 5120 -> 1280,
  // all with biases
  const std::int64_t block =
      4 * 1280 + (1280 * 3840 + 3840) + (1280 * 1280 + 1280) + (1280 * 5120 + 5120) + (5120 * 1280 + 1280);
  CHECK(block == 19'677'440);
  CHECK(m.vision.tower_parameters == 1280 * 3 * 2 * 14 * 14 + 32 * block);
  // PatchMerger: ln_q LayerNorm(1280), mlp.0 5120 -> 5120, mlp.2 5120 -> 3584, with biases
  CHECK(m.vision.projector_parameters == 2 * 1280 + (5120 * 5120 + 5120) + (5120 * 3584 + 3584));
  CHECK(m.vision.projector_parameters == 44'575'744);
  CHECK(listed_vision_parameters(m) == m.vision.total());
  // Hugging Face's model card for Qwen/Qwen2-VL-7B-Instruct: "Model size 8.29B params"
  CHECK(m.parameter_count() + m.vision.total() == 8'291'375'616);
  CHECK(std::llround((m.parameter_count() + m.vision.total()) / 1e7) == 829);
}

TEST_CASE("qwen2_5_vl: Qwen2.5-VL-7B-Instruct's parameters by hand (8.29B)", "[quick][graph]") {
  const ModelConfig m = stored("Qwen__Qwen2.5-VL-7B-Instruct.config.json");
  CHECK(m.vision.wrapper_model_type == "qwen2_5_vl");
  CHECK(m.parameter_count() == 7'615'616'512);  // the same Qwen2-7B language model
  // Qwen2_5_VLVisionBlock: norm1 / norm2 RMSNorms (weight only), qkv and proj as 2-VL, Qwen2_5_VLMLP
  // gate_proj / up_proj 1280 -> 3420 and down_proj 3420 -> 1280, with biases
  const std::int64_t block = 2 * 1280 + (1280 * 3840 + 3840) + (1280 * 1280 + 1280) +
                             2 * (1280 * 3420 + 3420) + (3420 * 1280 + 1280);
  CHECK(block == 19'702'200);
  CHECK(m.vision.tower_parameters == 1280 * 3 * 2 * 14 * 14 + 32 * block);
  // Qwen2_5_VLPatchMerger: ln_q Qwen2RMSNorm(1280), mlp.0 5120 -> 5120, mlp.2 5120 -> 3584
  CHECK(m.vision.projector_parameters == 1280 + (5120 * 5120 + 5120) + (5120 * 3584 + 3584));
  CHECK(listed_vision_parameters(m) == m.vision.total());
  // Hugging Face's model card for Qwen/Qwen2.5-VL-7B-Instruct: "Model size 8.29B params"
  CHECK(m.parameter_count() + m.vision.total() == 8'292'166'656);
  CHECK(m.vision.clip.full_attention_layers == std::vector<std::int64_t>{7, 15, 23, 31});
}

TEST_CASE("qwen2_vl: smart_resize's image tokens, worked by hand", "[quick][graph]") {
  const ModelConfig m = stored("Qwen__Qwen2-VL-7B-Instruct.config.json");
  const auto grid = [&m](std::int64_t h, std::int64_t w, std::int64_t lo = kQwenMinPixels,
                         std::int64_t hi = kQwenMaxPixels) {
    return qwen2_vl_image_grid(m.vision.clip, h, w, lo, hi);
  };
  // factor 28: 448 / 28 = 16 exactly -> 448 x 448 = 200704 pixels, inside [3136, 1003520]; 32 x 32 patches,
  // 1024 / 4 = 256 tokens
  CHECK(grid(448, 448).patches() == 1024);
  CHECK(grid(448, 448).tokens(2) == 256);
  // 1080 x 1920: round(38.57) = 39 -> 1092, round(68.57) = 69 -> 1932; 1092 x 1932 = 2109744 > 1003520, so
  // beta = sqrt(1080 x 1920 / 1003520) = 1.43747: floor(1080 / beta / 28) = floor(26.83) = 26 -> 728,
  // floor(1920 / beta / 28) = floor(47.70) = 47 -> 1316; 52 x 94 patches = 4888, 1222 tokens
  CHECK(grid(1080, 1920).height == 728);
  CHECK(grid(1080, 1920).width == 1316);
  CHECK(grid(1080, 1920).tokens(2) == 1222);
  // 20 x 30: round(0.71) = 1, round(1.07) = 1 -> 28 x 28 = 784 < 3136: beta = sqrt(3136 / 600) = 2.2862,
  // ceil(20 x beta / 28) = ceil(1.63) = 2 -> 56, ceil(30 x beta / 28) = ceil(2.45) = 3 -> 84; 4 x 6 patches
  CHECK(grid(20, 30).tokens(2) == 6);
  // Python's round is half to even: 70 / 28 = 2.5 rounds to 2 -> 56 x 56 = 3136 (not 84 x 84: 9 tokens)
  CHECK(grid(70, 70).height == 56);
  CHECK(grid(70, 70).tokens(2) == 4);
  // LLaMA-Factory's image_max_pixels 768 x 768 = 589824 bounds 1080 x 1920: beta = sqrt(2073600 / 589824) =
  // 1.875, floor(1080 / 1.875 / 28) = floor(20.57) = 20 -> 560, floor(1920 / 1.875 / 28) = floor(36.57) = 36
  // -> 1008: 40 x 72 patches, 720 tokens
  CHECK(grid(1080, 1920, kQwenMinPixels, 768 * 768).tokens(2) == 720);
  CHECK_THROWS_WITH(grid(10, 2500), Catch::Matchers::Contains("aspect ratio must be smaller than 200"));
}

TEST_CASE("qwen2_5_vl: get_window_index's windows, worked by hand", "[quick][graph]") {
  const ModelConfig m = stored("Qwen__Qwen2.5-VL-7B-Instruct.config.json");
  const ModelConfig::VisionPart::Clip& c = m.vision.clip;
  // window_size 112 / merge 2 / patch 14 = 4 merged tokens (8 x 8 = 64 patches) per window side
  // 448 x 448: 16 x 16 merged tokens, 4 x 4 whole windows of 64 patches
  const auto w448 = qwen2_5_vl_windows(c, qwen2_vl_image_grid(c, 448, 448, kQwenMinPixels, kQwenMaxPixels));
  REQUIRE(w448.size() == 1);
  CHECK(w448[0].chunks == 16);
  CHECK(w448[0].length == 64);
  // 644 x 644: 46 x 46 patches, 23 x 23 merged: 5 whole windows per side and one of 3 merged tokens: 25
  // windows of 64 patches, 5 of 4 x 3 merged (48 patches) at the right edge, 5 of 3 x 4 at the bottom, one
  // of 3 x 3 (36 patches) in the corner; 1600 + 240 + 240 + 36 = 2116 = 46 x 46
  const auto w644 = qwen2_5_vl_windows(c, qwen2_vl_image_grid(c, 644, 644, kQwenMinPixels, kQwenMaxPixels));
  REQUIRE(w644.size() == 4);
  CHECK(w644[0].chunks == 25);
  CHECK(w644[0].length == 64);
  CHECK(w644[1].chunks == 5);
  CHECK(w644[1].length == 48);
  CHECK(w644[2].chunks == 5);
  CHECK(w644[2].length == 48);
  CHECK(w644[3].chunks == 1);
  CHECK(w644[3].length == 36);
}

TEST_CASE("qwen2_vl: a tiny Qwen2-VL's vision bytes, worked by hand", "[quick][graph]") {
  const ModelConfig m = tiny_qwen2_vl();
  // a 56 x 56 image: 4 x 4 patches, 4 tokens
  REQUIRE(vision_tokens_per_image(m, VisionInputs{}) == 256);  // the 448 x 448 default
  TrainingOptions o = fp32_options(false);
  o.vision.image_size = 56;
  REQUIRE(vision_tokens_per_image(m, o.vision) == 4);
  SECTION("trained tower: one block's saved tensors") {
    const OpGraph g = build_training_steps(m, o);
    // pixel_values: 16 patches x (3 x 2 x 14 x 14 = 1176) fp32
    CHECK(test::sizes_named(g, "pixel_values") == std::vector<Bytes>{16 * 1176 * 4});
    // Block 0 on 16 patches of width 32, fp32 (N x E x 4 = 2048 bytes), SDPA's efficient kernel:
    //   norm1 LayerNorm: mean and rstd, 16 x 4 each                                    128
    //   norm1's output, saved by attn.qkv (linear saves its input)                   2048
    //   q, k, v: sdpa_attention_forward's contiguous copies, saved by the kernel      6144
    //   the kernel's output and logsumexp (1, 2 heads, 16 rounded to 32) fp32         2048 + 256
    //   torch.cat(attn_outputs): the copy attn.proj saves                             2048
    //   residual1 (x + proj), saved by norm2; norm2's mean and rstd                  2048 + 128
    //   norm2's output, saved by mlp.fc1                                             2048
    //   fc1's output (16 x 64 x 4) and QuickGELU's sigmoid, saved by the mul          4096 + 4096
    //   the mul's output, saved by fc2                                               4096
    //   residual2, the block's output (saved by the next block's norm1)              2048
    // apply_rotary_pos_emb_vision's fp32 products save only cos and sin (forward locals).
    CHECK(bytes_of(g, TensorCategory::kActivation, "visual.blocks.0.") ==
          128 + 2048 + 6144 + 2048 + 256 + 2048 + 2048 + 128 + 2048 + 4096 + 4096 + 4096 + 2048);
  }
  SECTION("frozen tower: only the merger saves") {
    o.vision.freeze_tower = true;
    const OpGraph g = build_training_steps(m, o);
    CHECK(bytes_of(g, TensorCategory::kActivation, "visual.blocks.0.") == 0);
    // the last block's output (ln_q saves its input for its weight's gradient), ln_q's mean and rstd, its
    // output viewed as (4, 128) saved by mlp.0, mlp.0's output saved by GELU, GELU's output saved by mlp.2
    CHECK(bytes_of(g, TensorCategory::kActivation, "visual.") == 2048 + 128 + 2048 + 2048 + 2048);
    CHECK(bytes_of(g, TensorCategory::kGradient, "model.visual.blocks.") == 0);
    // the merger's gradients: ln_q 2 x 32, mlp.0 128 x 128 + 128, mlp.2 64 x 128 + 64
    CHECK(bytes_of(g, TensorCategory::kGradient, "model.visual.merger.") ==
          (2 * 32 + 128 * 128 + 128 + 64 * 128 + 64) * 4);
  }
  SECTION("M-RoPE: the language model's (3, batch, seq) position ids") {
    const OpGraph g = build_training_steps(m, o);
    CHECK(test::sizes_named(g, "position_ids") == std::vector<Bytes>{3 * 1 * 16 * 8});
  }
}

TEST_CASE("qwen2_5_vl: window attention in the tiny model's blocks", "[quick][graph]") {
  const ModelConfig m = tiny_qwen2_vl("qwen2_5_vl");
  TrainingOptions o = fp32_options(false);
  o.vision.image_size = 56;    // 4 x 4 patches, 2 x 2 merged tokens: one window of window_size 56
  o.vision.image_width = 112;  // 4 x 8 patches: two windows of 2 x 2 merged tokens (16 patches each)
  o.seq = 16;
  const OpGraph g = build_training_steps(m, o);
  // block 0 is a window block: its kernel runs 2 windows of 16 patches (logsumexp rows 16 rounded to 32);
  // block 1 (fullatt_block_indexes [1]) one image of 32 patches
  CHECK(test::sizes_named(g, "visual.blocks.0.attn.chunks0.sdpa.logsumexp") ==
        std::vector<Bytes>{2 * 2 * 32 * 4});
  CHECK(test::sizes_named(g, "visual.blocks.1.attn.chunks0.sdpa.logsumexp") ==
        std::vector<Bytes>{1 * 2 * 32 * 4});
  // the hidden states reordered by window_index (a copy of 32 patches x 32 x 4) and back after the merger
  CHECK(test::sizes_named(g, "visual.window_index") == std::vector<Bytes>{32 * 32 * 4});
  CHECK(test::sizes_named(g, "visual.reverse_indices") == std::vector<Bytes>{8 * 64 * 4});
}

TEST_CASE("gemma3: Gemma-3's SigLIP tower and pooling projector, worked by hand", "[quick][graph]") {
  const ModelConfig m = tiny_gemma3();
  REQUIRE(m.vision.simulated());
  REQUIRE(m.vision.clip.tokens_per_image() == 4);
  // SigLIP: patch conv 32 x 3 x 14 x 14 + 32, 16 x 32 positions, 2 layers of 2 LayerNorms, 4 x (32 x 32 +
  // 32), fc1 32 -> 64 and fc2 64 -> 32 with biases, post_layernorm; the projector 32 x 64 + 32
  const std::int64_t layer = 4 * 32 + 4 * (32 * 32 + 32) + (32 * 64 + 64) + (64 * 32 + 32);
  CHECK(m.vision.tower_parameters == (32 * 3 * 14 * 14 + 32) + 16 * 32 + 2 * layer + 2 * 32);
  CHECK(listed_vision_parameters(m) == m.vision.total());
  SECTION("frozen tower: the projector's RMSNorm and matmul save") {
    const OpGraph g = build_training_steps(m, fp32_options(true));
    CHECK(bytes_of(g, TensorCategory::kActivation, "vision.") == 0);
    // Gemma3RMSNorm: normed * (1 + weight) saves normed (4 tokens x 32 fp32), and the matmul with
    // mm_input_projection_weight saves its input (the product: type_as is a no-op in fp32)
    CHECK(bytes_of(g, TensorCategory::kActivation, "multi_modal_projector.") == 4 * 32 * 4 + 4 * 32 * 4);
  }
  SECTION("trained tower: one SigLIP layer's saved tensors") {
    const OpGraph g = build_training_steps(m, fp32_options(false));
    // 16 patches of width 32, fp32 (2048 bytes), SDPA's efficient kernel:
    //   layer_norm1's mean and rstd; its output (saved by q/k/v_proj)               128 + 2048
    //   q, k, v contiguous copies; the kernel's output and logsumexp (rows 32)        6144 + 2048 + 256
    //   (the kernel writes (b, s, h, d): merging heads copies nothing; out_proj saves that output)
    //   residual1; layer_norm2's mean and rstd; its output (saved by fc1)            2048 + 128 + 2048
    //   fc1's output (saved by gelu_pytorch_tanh), gelu's output (saved by fc2)      4096 + 4096
    //   residual2                                                                    2048
    CHECK(bytes_of(g, TensorCategory::kActivation, "vision.layers.0.") ==
          128 + 2048 + 6144 + 2048 + 256 + 2048 + 128 + 2048 + 4096 + 4096 + 2048);
    // the projector: reshape's copy (1, 32, 4, 4) saved by avg_pool2d, RMSNorm's float input is the pooled
    // view (fp32: no copy), normed and the product as above
    CHECK(test::sizes_named(g, "multi_modal_projector.reshape") == std::vector<Bytes>{32 * 16 * 4});
    CHECK(test::sizes_named(g, "multi_modal_projector.avg_pool") == std::vector<Bytes>{32 * 4 * 4});
  }
}

TEST_CASE("qwen2_vl and gemma3: what the vision part refuses", "[quick][graph]") {
  TrainingOptions o = fp32_options(true);
  o.vision.image_size = 448;  // 256 tokens in a sequence of 16
  CHECK_THROWS_WITH(build_training_steps(tiny_qwen2_vl(), o),
                    "--images-per-sample 1: 256 image tokens (256 per image) do not fit in --seq 16 (the "
                    "language model's sequence, image tokens included)");
  o = fp32_options(true);
  o.vision.image_size = 112;
  CHECK_THROWS_WITH(build_training_steps(tiny_gemma3(), o),
                    Catch::Matchers::Contains("Input image size (112*112) doesn't match model (56*56)"));
  o = fp32_options(true);
  o.vision.image_size = 56;
  o.generate_tokens = 2;
  CHECK_THROWS_WITH(build_training_steps(tiny_qwen2_vl(), o),
                    "--generate with a vision-language model (qwen2_vl): not modelled (vramsim)");
  CHECK_THROWS_WITH(parse_image_size("12y4"),
                    "--image-size '12y4': expected pixels per side (0..65536) or HEIGHTxWIDTH");
  CHECK(parse_image_size("480x640") == std::pair<std::int64_t, std::int64_t>{480, 640});
  CHECK(parse_image_size("336") == std::pair<std::int64_t, std::int64_t>{336, 0});
  // config.json errors name the file and key
  nlohmann::json j = tiny_qwen2_vl_json();
  j["vision_config"]["hidden_size"] = 128;
  CHECK_THROWS_WITH(
      model_from_hf_config_json(j.dump(), "c.json"),
      "c.json: key 'vision_config.hidden_size': 128 is not the language model's hidden_size 64");
  j = tiny_qwen2_vl_json("qwen2_5_vl");
  j["vision_config"]["fullatt_block_indexes"] = {7};
  CHECK_THROWS_WITH(model_from_hf_config_json(j.dump(), "c.json"),
                    "c.json: key 'vision_config.fullatt_block_indexes': layer 7 is past the 2 blocks");
}

TEST_CASE("gemma3: gemma-3-4b-it's vision part simulated as counted (4.3B)", "[quick][graph]") {
  const ModelConfig m = stored("google__gemma-3-4b-it.config.json");
  REQUIRE(m.vision.simulated());
  CHECK(m.vision.clip.tower == ModelConfig::VisionPart::Tower::kSiglip);
  // the shapes the step creates add up to the count of test_hf_real_configs.cpp (416,866,032 + 1152 x 2560 +
  // 1152); 896 / 14 = 64 patches a side pooled to mm_tokens_per_image 256 = 16 x 16 (AvgPool2d kernel 4)
  CHECK(listed_vision_parameters(m) == 416'866'032 + 1152 * 2560 + 1152);
  CHECK(m.vision.clip.tokens_per_image() == 256);
  CHECK(m.vision.clip.patches_per_side() == 64);
}
