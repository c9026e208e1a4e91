// LLaVA-NeXT (model_type llava_next) as transformers builds and runs it: the image tokens of "anyres" tiling
// worked by hand from select_best_resolution (image_processing_utils.py), get_anyres_image_grid_shape,
// image_size_to_num_patches and unpad_image (models/llava_next/modeling_llava_next.py) and
// LlavaNextProcessor._get_number_of_features (processing_llava_next.py); the parameters of
// llava-hf/llava-v1.6-mistral-7b-hf counted by hand; and the bytes a tiny LLaVA-NeXT's step allocates for
// its tiles, worked by hand from the code each tensor comes from.
#include <catch2/catch.hpp>

#include <string>

#include <nlohmann/json.hpp>

#include "graph/graph_test_util.h"
#include "graph/vision_test_util.h"
#include "sim/core/error.h"
#include "sim/models/model_config.h"
#include "sim/models/transformer_builder.h"
#include "sim/vision/llava_next_anyres.h"
#include "sim/vision/vision_tower.h"

using namespace vramsim;

namespace {

// A LLaVA-NeXT small enough to count every tensor: tiny_llava's shapes (test_vision_tower.cpp: a llama of
// width 64, 2 layers; CLIP of width 32, 3 layers, 2 heads, MLP 64, 28-pixel tiles of 14-pixel patches, so 2 x
// 2 features per tile and 5 positions with CLS) and pinpoints 28 x 56, 56 x 28, 56 x 56.
nlohmann::json tiny_llava_next_json() {
  nlohmann::json j = test::tiny_llava_json();
  j["model_type"] = "llava_next";
  j["image_grid_pinpoints"] = {{28, 56}, {56, 28}, {56, 56}};
  return j;
}

ModelConfig tiny_llava_next() {
  return model_from_hf_config_json(tiny_llava_next_json().dump(), "tiny.json");
}

Bytes bytes_of(const OpGraph& g, TensorCategory category, const std::string& prefix) {
  return test::bytes_with_prefix(g, category, prefix);
}

}  // namespace

TEST_CASE("llava_next: image tokens per --image-size, worked by hand from the anyres code",
          "[quick][graph]") {
  const ModelConfig m = test::stored_hf_config("llava-hf__llava-v1.6-mistral-7b-hf.config.json");
  REQUIRE(m.vision.wrapper_model_type == "llava_next");
  const auto& c = m.vision.clip;
  REQUIRE(c.grid_pinpoints.size() == 5);  // (h, w): 336x672, 672x336, 672x672, 1008x336, 336x1008
  VisionInputs v;
  SECTION("672 x 672: the 672 x 672 pinpoint, 2 x 2 tiles, nothing unpadded") {
    // select_best_resolution: 672x672 keeps all 451,584 pixels (scale 1); every other pinpoint scales by 0.5
    // to 336x336 = 112,896. 2 x 2 tiles + the base image = 5 patches. Features 48 x 48 (2 x 24 per side);
    // aspect 1 == 1, so unpad_image's width branch: new_width int(round(672 * 48 / 672, 7)) = 48, padding 0.
    // Tokens: base 24 x 24 = 576, then 48 rows of 48 + 1 newline = 2352: 2928.
    const AnyresGrid g = llava_next_anyres_grid(c, 672, 672);
    CHECK(g.best_height == 672);
    CHECK(g.best_width == 672);
    CHECK(g.patches() == 5);
    CHECK(g.tokens() == 24 * 24 + 48 * (48 + 1));
    CHECK(g.tokens() == 2928);
  }
  SECTION("480 x 640 (COCO): the 672 x 672 pinpoint, rows unpadded") {
    // 336x672: scale min(672/640, 336/480) = 0.7 -> int(640 * 0.7) x int(480 * 0.7) = 448 x 336 = 150,528;
    // 672x336: scale 0.525 -> 336 x 252 = 84,672; 672x672: scale 1.05 -> 672 x 504 = 338,688, capped at the
    // image's 640 x 480 = 307,200; 1008x336 and 336x1008 as 672x336 and 336x672. Best: 672x672, 5 patches.
    // unpad_image: aspect 640/480 = 1.333 > 48/48 = 1: new_height int(round(480 * 48 / 640, 7)) = 36,
    // padding (48 - 36) // 2 = 6, rows 48 - 12 = 36. Tokens 576 + 36 x (48 + 1) = 2340.
    const AnyresGrid g = llava_next_anyres_grid(c, 480, 640);
    CHECK(g.best_height == 672);
    CHECK(g.rows == 36);
    CHECK(g.columns == 48);
    CHECK(g.tokens() == 576 + 36 * 49);
    CHECK(g.tokens() == 2340);
    v.image_size = 480;
    v.image_width = 640;
    CHECK(vision_tokens_per_image(m, v) == 2340);
  }
  SECTION("336 x 336 (the default): 336 x 672 wins the tie, 1 x 2 tiles, columns unpadded") {
    // 336x672 and 672x336 both keep 336 x 336 = 112,896 pixels and waste 112,896; the first one stays (a
    // tie is not "less"); 672x672 keeps as many but wastes 338,688. 1 x 2 tiles + base = 3 patches. Features
    // 24 x 48; aspect 1 < 2: new_width int(round(336 * 24 / 336, 7)) = 24, padding (48 - 24) // 2 = 12,
    // columns 24. Tokens 576 + 24 x 25 = 1176.
    const AnyresGrid g = llava_next_anyres_grid(c, 336, 336);
    CHECK(g.best_height == 336);
    CHECK(g.best_width == 672);
    CHECK(g.patches() == 3);
    CHECK(g.tokens() == 1176);
    CHECK(vision_tokens_per_image(m, v) == 1176);  // --image-size not given: vision_config.image_size
  }
  SECTION("1080 x 1920: Python's round and floor division in unpad_image") {
    // 336x672: scale min(672/1920, 336/1080) = 0.3111 -> int(597.33) x int(336.0) = 597 x 336 = 200,592;
    // 672x672: scale 0.35 -> 672 x 378 = 254,016 (largest); the others less. unpad_image: 1920/1080 > 1:
    // new_height int(round(1080 * 48 / 1920, 7)) = int(27.0) = 27, padding (48 - 27) // 2 = 10, rows 28.
    // Tokens 576 + 28 x 49 = 1948.
    const AnyresGrid g = llava_next_anyres_grid(c, 1080, 1920);
    CHECK(g.rows == 28);
    CHECK(g.tokens() == 1948);
  }
}

TEST_CASE("llava_next: llava-v1.6-mistral-7b-hf's parameters counted by hand", "[quick][graph]") {
  const ModelConfig m = test::stored_hf_config("llava-hf__llava-v1.6-mistral-7b-hf.config.json");
  CHECK(m.model_type == "mistral");
  // MistralDecoderLayer: q/o 4096 x 4096, k/v 4096 x 1024 (8 KV heads of 128), gate/up/down 3 x 4096 x 14336,
  // two RMSNorms; untied embed_tokens and lm_head 32064 x 4096; the final norm
  const std::int64_t layer = 2 * 4096LL * 4096 + 2 * 4096LL * 1024 + 3 * 4096LL * 14336 + 2 * 4096;
  CHECK(m.parameter_count() == 32 * layer + 2 * 32064LL * 4096 + 4096);
  CHECK(m.parameter_count() == 7'242'256'384);
  CHECK(m.vision.tower_parameters ==
        303'507'456);  // the same CLIP ViT-L/14-336 as llava-1.5 (test_vision_tower.cpp)
  // LlavaNextMultiModalProjector 1024 -> 4096 -> 4096 with biases, and LlavaNextModel.image_newline (4096)
  CHECK(m.vision.projector_parameters == (1024 * 4096 + 4096) + (4096 * 4096 + 4096) + 4096);
  const auto [shapes, listed] = test::llava_vision_shapes(m);
  CHECK(listed == m.vision.total());
  // named_parameters() yields LlavaNextModel's own parameter before its submodules'
  CHECK(shapes.front().name == "model.image_newline");
  CHECK(m.parameter_count() + m.vision.total() == 7'566'747'648);
}

TEST_CASE("llava_next: a tiny LLaVA-NeXT's tiles, worked by hand", "[quick][graph]") {
  const ModelConfig m = tiny_llava_next();
  // a 28 x 28 image: 28x56 and 56x28 tie (784 pixels kept, 784 wasted), the first wins: 1 x 2 tiles + base =
  // 3 patches; features 2 x 4, unpadded to 2 x 2 (new_width int(round(28 * 2 / 28, 7)) = 2, padding 1);
  // tokens 2 x 2 + 2 x (2 + 1) = 10
  REQUIRE(vision_tokens_per_image(m, VisionInputs{}) == 10);
  TrainingOptions o = test::vision_fp32_options(true);
  SECTION("frozen tower: the pixels, the tiles as the tower's batch, the pack's copies") {
    const OpGraph g = build_training_steps(m, o);
    // LlavaNextImageProcessor's pixel_values (1 image, 3 patches, 3, 28, 28) fp32, and get_image_features'
    // torch.cat of pix_val[:num_patch]: one copy of the same size
    CHECK(test::sizes_named(g, "pixel_values") == std::vector<Bytes>{3 * 3 * 28 * 28 * 4});
    CHECK(test::sizes_named(g, "pixel_values.cat") == std::vector<Bytes>{3 * 3 * 28 * 28 * 4});
    // the 3 patches are 3 batch items: [3, 5, 32][:, 1:] is not contiguous, so linear_1's reshape copies
    // [3, 4, 32], the only thing the frozen tower's side keeps for backward
    CHECK(bytes_of(g, TensorCategory::kActivation, "vision.") == 3 * 4 * 32 * 4);
    // pack_image_features: the 2 tiles' features permuted and made contiguous, [64, 1, 2, 2, 2]; the cat
    // with image_newline, [64, 2, 2 + 1]; the cat with the base image's 4 features, [10, 64]; then forward's
    // torch.cat of all images, [10, 64]
    CHECK(test::sizes_named(g, "pack_image_features.0.tiles_contiguous") ==
          std::vector<Bytes>{2 * 4 * 64 * 4});
    CHECK(test::sizes_named(g, "pack_image_features.0.cat_newline") == std::vector<Bytes>{64 * 2 * 3 * 4});
    CHECK(test::sizes_named(g, "pack_image_features.0.cat_base") == std::vector<Bytes>{10 * 64 * 4});
    CHECK(test::sizes_named(g, "image_features.cat") == std::vector<Bytes>{10 * 64 * 4});
    // image_newline trains with the projector: a gradient of 64 fp32
    CHECK(bytes_of(g, TensorCategory::kGradient, "model.image_newline") == 64 * 4);
  }
  SECTION("trained tower: one layer's MLP saves for 3 tiles, not 1 image") {
    o.vision.freeze_tower = false;
    const OpGraph g = build_training_steps(m, o);
    // CLIPMLP of layer 0 on [3, 5, 32]: fc1's output h [3, 5, 64] (mul saves it), sigmoid's output [3, 5, 64]
    // (sigmoid's backward reads its result; mul saves it as its other input) and the product [3, 5, 64]
    // (fc2 saves its input); 1.702 * h is read by nothing backward. 3 x (3 x 5 x 64 x 4) bytes.
    CHECK(bytes_of(g, TensorCategory::kActivation, "vision.layers.0.mlp.") == 3 * (3 * 5 * 64 * 4));
  }
  SECTION("two images per sample: two packs, one cat") {
    o.vision.images_per_sample = 2;
    o.seq = 24;
    const OpGraph g = build_training_steps(m, o);
    CHECK(test::sizes_named(g, "pixel_values") == std::vector<Bytes>{2 * 3 * 3 * 28 * 28 * 4});
    CHECK(test::sizes_named(g, "pack_image_features.1.cat_base") == std::vector<Bytes>{10 * 64 * 4});
    CHECK(test::sizes_named(g, "image_features.cat") == std::vector<Bytes>{2 * 10 * 64 * 4});
  }
}

TEST_CASE("llava_next: what its config and options refuse", "[quick][graph]") {
  nlohmann::json j = tiny_llava_next_json();
  j["image_grid_pinpoints"] = {{28, 50}};
  CHECK_THROWS_WITH(model_from_hf_config_json(j.dump(), "tiny.json"),
                    Catch::Contains("image_grid_pinpoints") && Catch::Contains("28x50 is not a multiple"));
  j = tiny_llava_next_json();
  j["vision_feature_select_strategy"] = "full";
  CHECK_THROWS_WITH(model_from_hf_config_json(j.dump(), "tiny.json"),
                    Catch::Contains("'full' is not modelled"));
  // more image tokens than --seq holds: 10 per 28-pixel image
  TrainingOptions o = test::vision_fp32_options(true);
  o.seq = 9;
  CHECK_THROWS_WITH(check_vision_options(tiny_llava_next(), o), Catch::Contains("10 image tokens"));
}
