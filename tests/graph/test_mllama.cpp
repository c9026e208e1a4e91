// Llama 3.2 Vision (model_type mllama, transformers' MllamaForConditionalGeneration) as vramsim reads it:
// the parameters of the real checkpoints worked by hand from modeling_mllama.py (MllamaVisionModel,
// MllamaTextModel's self- and cross-attention decoder layers, multi_modal_projector) and checked against
// NVIDIA's published count for Llama-3.2-11B-Vision-Instruct; the image path's bytes in a tiny mllama worked
// by hand from modeling_mllama.py at befb7955722e (MllamaVisionModel.forward, _prepare_cross_attention_mask,
// MllamaTextCrossSdpaAttention); a text-only batch (the tower, the projector and the cross-attention layers
// in memory but not run); the config.json errors.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "graph/graph_test_util.h"
#include "graph/vision_test_util.h"
#include "sim/core/error.h"
#include "sim/models/model_config.h"
#include "sim/models/transformer_builder.h"
#include "sim/predict/step_prediction.h"
#include "sim/vision/mllama_vision.h"
#include "test_paths.h"

using namespace vramsim;

namespace {

ModelConfig stored(const std::string& file) { return test::stored_hf_config(file); }

// Llama-3.2-11B-Vision-Instruct, one bf16 step of batch 1 x 64 on `gpu`.
RequestArgs eleven_b_request(const std::string& gpu) {
  RequestArgs a;
  a.model = (test::source_dir() / "tests" / "data" / "hf_configs" /
             "meta-llama__Llama-3.2-11B-Vision-Instruct.config.json")
                .string();
  a.batch = 1;
  a.seq = 64;
  a.steps = 1;
  a.gpu = gpu;
  a.precision = "bf16";
  return a;
}

// MllamaVisionModel with MllamaVisionConfig's shapes of both released checkpoints (hidden 1280, MLP 5120,
// 14-pixel patches of 560-pixel tiles, 4 tiles, 8 aspect ratios, 32 + 8 layers), term by term:
std::int64_t vision_tower_by_hand() {
  const std::int64_t patches = (560 / 14) * (560 / 14) + 1;  // 1600 patches and the class token: 1601
  const std::int64_t patch_embedding = 1280 * 3 * 14 * 14;   // Conv2d(3, 1280, 14, bias=False)
  const std::int64_t class_embedding = 1280;
  // MllamaPrecomputedPositionEmbedding: gate, embedding (1601, 1280), tile_embedding (9, 4, 1601, 1280)
  const std::int64_t gated_positions = 1 + patches * 1280 + 9 * 4 * patches * 1280;
  // MllamaPrecomputedAspectRatioEmbedding (is_gated): embedding (9, 4, 1, 1280) and gate, pre and post
  const std::int64_t tile_positions = 2 * (9 * 4 * 1280 + 1);
  const std::int64_t layernorms = 2 * (1280 + 1280);  // ln_pre, ln_post
  // MllamaVisionEncoderLayer: q/k/v/o_proj 1280 x 1280 without bias, fc1 1280 -> 5120 and fc2 5120 -> 1280
  // with biases, input_layernorm and post_attention_layernorm (weight and bias)
  const std::int64_t layer = 4 * 1280 * 1280 + (1280 * 5120 + 5120) + (5120 * 1280 + 1280) + 4 * 1280;
  CHECK(layer == 19'672'320);
  // the global transformer's layers are gated: + gate_attn and gate_ffn
  return patch_embedding + class_embedding + gated_positions + tile_positions + layernorms + 32 * layer +
         8 * (layer + 2);
}

// One MllamaCrossAttentionDecoderLayer: cross_attn q_proj d x (heads * 128), k_proj and v_proj d x (kv *
// 128), o_proj, q_norm and k_norm of head_dim 128; input_layernorm, cross_attn_attn_gate (1), the MLP
// (gate/up/down), post_attention_layernorm, cross_attn_mlp_gate (1).
std::int64_t cross_layer_by_hand(std::int64_t d, std::int64_t heads, std::int64_t kv, std::int64_t ff) {
  return d * heads * 128 + 2 * d * kv * 128 + heads * 128 * d + 2 * 128 + d + 1 + 3 * d * ff + d + 1;
}

// A Llama 3.2 Vision small enough to count every tensor: the language model of width 64, 4 heads of 16, 2
// key/value heads, MLP 128, 3 layers of which layer 1 is a cross-attention layer, vocabulary 256; the tower
// of width 32, 2 heads, MLP 64, 4 local layers and 1 global one, 28-pixel tiles of 14-pixel patches
// (2 x 2 = 4 patches and the class token: 5), 2 tiles, the inputs of layers 1 and 3 kept
// (vision_output_dim 32 x 3 = 96).
ModelConfig tiny_mllama() {
  const nlohmann::json j = {{"model_type", "mllama"},
                            {"text_config",
                             {{"hidden_size", 64},
                              {"intermediate_size", 128},
                              {"num_hidden_layers", 3},
                              {"num_attention_heads", 4},
                              {"num_key_value_heads", 2},
                              {"cross_attention_layers", {1}},
                              {"vocab_size", 256}}},
                            {"vision_config",
                             {{"hidden_size", 32},
                              {"intermediate_size", 64},
                              {"num_hidden_layers", 4},
                              {"num_global_layers", 1},
                              {"attention_heads", 2},
                              {"image_size", 28},
                              {"patch_size", 14},
                              {"max_num_tiles", 2},
                              {"supported_aspect_ratios", {{1, 1}, {1, 2}, {2, 1}}},
                              {"intermediate_layers_indices", {1, 3}},
                              {"vision_output_dim", 96}}}};
  return model_from_hf_config_json(j.dump(), "tiny_mllama.json");
}

Bytes bytes_of(const OpGraph& g, TensorCategory category, const std::string& prefix) {
  return test::bytes_with_prefix(g, category, prefix);
}

nlohmann::json eleven_b_json() {
  std::ifstream in(test::source_dir() / "tests" / "data" / "hf_configs" /
                   "meta-llama__Llama-3.2-11B-Vision-Instruct.config.json");
  return nlohmann::json::parse(in);
}

}  // namespace

TEST_CASE("mllama: Llama-3.2-11B-Vision-Instruct's parameters by hand (10,670,220,835)", "[quick][graph]") {
  const ModelConfig m = stored("meta-llama__Llama-3.2-11B-Vision-Instruct.config.json");
  CHECK(m.vision.wrapper_model_type == "mllama");
  CHECK(m.vision.model_type == "mllama_vision_model");
  CHECK(m.model_type == "mllama_text_model");
  CHECK_FALSE(m.vision.simulated());
  // the language model a text-only batch runs: the 40 - 8 self-attention layers (LlamaDecoderLayer's shapes:
  // q 4096 x 4096, k and v 4096 x 1024, o 4096 x 4096, gate/up/down 3 x 4096 x 14336, two RMSNorms),
  // embed_tokens of vocab_size + 8 = 128264 rows, the final norm, lm_head of 128256 rows
  CHECK(m.n_layers == 32);
  const std::int64_t self_layer = 4096 * 4096 + 2 * 4096 * 1024 + 4096 * 4096 + 3 * 4096 * 14336 + 2 * 4096;
  CHECK(self_layer == 218'112'000);
  CHECK(m.parameter_shapes().front().shape == std::vector<std::int64_t>{128264, 4096});
  CHECK(m.parameter_count() == 128264 * 4096 + 32 * self_layer + 4096 + 128256 * 4096);
  CHECK(m.parameter_count() == 8'030'294'016);  // Llama-3.1-8B's 8,030,261,248 + 8 x 4096
  // the cross-attention layers at [3, 8, 13, 18, 23, 28, 33, 38]
  CHECK(m.vision.cross_attention_layers == std::vector<std::int64_t>{3, 8, 13, 18, 23, 28, 33, 38});
  CHECK(cross_layer_by_hand(4096, 32, 8, 14336) == 218'112'258);
  CHECK(m.vision.cross_attention_parameters == 8 * cross_layer_by_hand(4096, 32, 8, 14336));
  CHECK(vision_tower_by_hand() == 863'567'379);
  CHECK(m.vision.tower_parameters == vision_tower_by_hand());
  // multi_modal_projector: Linear(vision_output_dim 7680, 4096) with bias
  CHECK(m.vision.projector_parameters == 7680 * 4096 + 4096);
  // NVIDIA's model card for meta/llama-3.2-11b-vision-instruct: "Parameters: 10,670,220,835"
  CHECK(m.parameter_count() + m.vision.total() == 10'670'220'835);
  // the tensors the step creates for them (mllama_parameters.h) hold the same count
  const auto [shapes, listed] = test::llava_vision_shapes(m);
  CHECK(listed == m.vision.total());
  CHECK(shapes.front().name == "model.vision_model.patch_embedding.weight");
  CHECK(shapes.back().name == "model.multi_modal_projector.bias");
}

TEST_CASE("mllama: Llama-3.2-90B-Vision's parameters by hand, from the class defaults", "[quick][graph]") {
  // the stored file names only what differs from MllamaTextConfig / MllamaVisionConfig's defaults: the
  // vision tower is the default one at image_size 560, vocab_size 128256 and 8 key/value heads
  const ModelConfig m = stored("gghfez__Llama-3.3-90B-Vision-merged.config.json");
  CHECK(m.n_layers == 100 - 20);
  const std::int64_t self_layer = 8192 * 8192 + 2 * 8192 * 1024 + 8192 * 8192 + 3 * 8192 * 28672 + 2 * 8192;
  CHECK(self_layer == 855'654'400);
  CHECK(m.parameter_count() == 128264 * 8192 + 80 * self_layer + 8192 + 128256 * 8192);
  CHECK(m.parameter_count() == 70'553'772'032);  // Llama-3.1-70B's 70,553,706,496 + 8 x 8192
  CHECK(m.vision.cross_attention_parameters == 20 * cross_layer_by_hand(8192, 64, 8, 28672));
  CHECK(m.vision.tower_parameters == vision_tower_by_hand());
  CHECK(m.vision.projector_parameters == 7680 * 8192 + 8192);
  // 88,593,355,323: Meta's model card rounds its own count to 88.8B (and the 11B's to 10.6B), so only the
  // hand sum is checked here
  CHECK(m.parameter_count() + m.vision.total() == 88'593'355'323);
}

TEST_CASE("mllama: predict runs a text-only batch with the vision part in memory", "[quick][graph]") {
  RequestArgs a = eleven_b_request("A100-80GB");
  a.images_per_sample = 0;
  const Prediction p = predict(make_request(a));
  CHECK(p.vision.total() == 2'639'926'819);  // 863,567,379 + 31,461,376 + 1,744,898,064
  CHECK(p.total_parameters == 10'670'220'835);
  // a text-only batch reaches neither the tower nor the cross-attention layers: no gradient, no state
  CHECK(p.trainable_parameters == 8'030'294'016);
  // every parameter is in memory, in bf16 (the peak is in the optimizer step, all of them live)
  CHECK(p.bill.parameters == 10'670'220'835 * 2);
}

TEST_CASE("mllama: predict with images trains the projector and the cross-attention layers",
          "[quick][graph]") {
  RequestArgs a = eleven_b_request("H200");
  // (560 / 14)^2 + 1 = 1601 patches a tile, padded to 1608 (MllamaVisionModel.forward)
  CHECK(mllama_padded_tile_patches(stored("meta-llama__Llama-3.2-11B-Vision-Instruct.config.json")) == 1608);
  // one image (the default): the language model, the projector and the 8 cross-attention layers train, the
  // tower is frozen (--freeze-vision-tower's default)
  Prediction p = predict(make_request(a));
  CHECK(p.trainable_parameters == 8'030'294'016 + 31'461'376 + 1'744'898'064);
  a.freeze_vision_tower = "false";
  p = predict(make_request(a));
  CHECK(p.trainable_parameters == 10'670'220'835);
}

TEST_CASE("mllama: a tiny Llama 3.2 Vision's image path, worked by hand", "[quick][graph]") {
  const ModelConfig m = tiny_mllama();
  TrainingOptions o = test::vision_fp32_options(true);  // batch 1 x 16 tokens, fp32, one image
  // MllamaVisionModel.forward: num_padding_patches = (8 - 5 % 8) % 8 = 3, so a tile runs as 8 rows and the
  // image's two tiles as one sequence of 16
  CHECK(mllama_padded_tile_patches(m) == 8);
  SECTION("the tensors of the image path") {
    const OpGraph g = build_training_steps(m, o);
    // pixel_values (1, 1, 2, 3, 28, 28) fp32: MllamaImageProcessor pads every image to max_num_tiles
    CHECK(test::sizes_named(g, "pixel_values") == std::vector<Bytes>{2 * 3 * 28 * 28 * 4});
    // F.pad to (1, 2, 8, 32); the aspect-ratio mask (1, 16, 1) @ (1, 1, 16), times finfo.min: (1, 16, 16)
    CHECK(test::sizes_named(g, "vision_model.pad") == std::vector<Bytes>{2 * 8 * 32 * 4});
    CHECK(test::sizes_named(g, "vision_model.aspect_ratio_mask.mul_min") == std::vector<Bytes>{16 * 16 * 4});
    // torch.stack of the two kept layer inputs (1, 16, 32) on a last dimension, then the padding sliced off
    // (2, 5, 64) and concatenated with the global output: (1, 2, 5, 96)
    CHECK(test::sizes_named(g, "vision_model.stack_intermediate") == std::vector<Bytes>{16 * 32 * 2 * 4});
    CHECK(test::sizes_named(g, "vision_model.cat_intermediate") == std::vector<Bytes>{2 * 5 * 96 * 4});
    // cross_attention_states: multi_modal_projector (96 -> 64) of 2 tiles x 5 patches
    CHECK(test::sizes_named(g, "multi_modal_projector") == std::vector<Bytes>{2 * 5 * 64 * 4});
    // _prepare_cross_attention_mask of (1, 16, 1, 2): repeat_interleave(5) int64 (1, 16, 1, 10), 1.0 - mask
    // fp32, the mask in the model's dtype
    CHECK(test::sizes_named(g, "cross_attention_mask.repeat_interleave") == std::vector<Bytes>{16 * 10 * 8});
    CHECK(test::sizes_named(g, "cross_attention_mask") == std::vector<Bytes>{16 * 10 * 4});
    CHECK(test::sizes_named(g, "full_text_row_masked_out_mask") == std::vector<Bytes>{16 * 4});
    // the cross-attention layer: k_proj of the 10 image vectors to 2 key/value heads of 16, repeat_kv to 4
    // heads (1, 4, 10, 16)
    const std::string n = "language_model.layers.1.cross_attn.";
    CHECK(test::sizes_named(g, n + "k_proj") == std::vector<Bytes>{10 * 32 * 4});
    CHECK(test::sizes_named(g, n + "repeat_k") == std::vector<Bytes>{4 * 10 * 16 * 4});
    CHECK(test::sizes_named(g, n + "repeat_v") == std::vector<Bytes>{4 * 10 * 16 * 4});
  }
  SECTION("frozen tower: it saves nothing; the projector saves its input, the cross-attention layer trains") {
    const OpGraph g = build_training_steps(m, o);
    // no tower parameter needs a gradient and the pixels do not: no graph in the tower
    CHECK(bytes_of(g, TensorCategory::kActivation, "vision_model.") == 2 * 5 * 96 * 4);
    CHECK(bytes_of(g, TensorCategory::kGradient, "model.vision_model.") == 0);
    // multi_modal_projector 96 x 64 + 64; the cross-attention layer: q 64 x 64, k and v 64 x 32, o 64 x 64,
    // q_norm and k_norm 16, two RMSNorms 64, MLP 3 x 64 x 128, two gates
    CHECK(bytes_of(g, TensorCategory::kGradient, "model.multi_modal_projector.") == (96 * 64 + 64) * 4);
    const Bytes cross = (64 * 64 + 2 * 64 * 32 + 64 * 64 + 2 * 16 + 2 * 64 + 3 * 64 * 128 + 2) * 4;
    CHECK(bytes_of(g, TensorCategory::kGradient, "model.language_model.layers.1.") == cross);
  }
  SECTION("trained tower: every tower parameter gets its gradient") {
    o.vision.freeze_tower = false;
    const OpGraph g = build_training_steps(m, o);
    CHECK(bytes_of(g, TensorCategory::kActivation, "vision_model.transformer.layers.0.") > 0);
    CHECK(bytes_of(g, TensorCategory::kGradient, "model.vision_model.") ==
          static_cast<Bytes>(m.vision.tower_parameters) * 4);
  }
  SECTION("--images-per-sample 0: a text-only batch runs none of it") {
    o.vision.images_per_sample = 0;
    const OpGraph g = build_training_steps(m, o);
    CHECK(test::sizes_named(g, "pixel_values").empty());
    CHECK(test::sizes_named(g, "multi_modal_projector").empty());
    CHECK(bytes_of(g, TensorCategory::kGradient, "model.multi_modal_projector.") == 0);
    CHECK(bytes_of(g, TensorCategory::kGradient, "model.language_model.layers.1.") == 0);
  }
}

TEST_CASE("mllama: config.json errors name the file and key", "[quick][graph]") {
  nlohmann::json j = eleven_b_json();
  j["text_config"]["cross_attention_layers"] = {3, 40};
  CHECK_THROWS_WITH(model_from_hf_config_json(j.dump(), "c.json"),
                    "c.json: key 'text_config.cross_attention_layers': must be distinct layer indices below "
                    "num_hidden_layers 40");
  j = eleven_b_json();
  j["vision_config"].erase("supported_aspect_ratios");
  j["vision_config"]["max_num_tiles"] = 6;
  CHECK_THROWS_WITH(model_from_hf_config_json(j.dump(), "c.json"),
                    "c.json: key 'vision_config.max_num_tiles': must be 4 for the default "
                    "supported_aspect_ratios");
  j = eleven_b_json();
  j["vision_config"]["image_size"] = 561;
  CHECK_THROWS_WITH(model_from_hf_config_json(j.dump(), "c.json"),
                    "c.json: key 'vision_config.image_size': 561 is not a multiple of patch_size 14");
  j = eleven_b_json();
  j["vision_config"]["model_type"] = "clip_vision_model";
  CHECK_THROWS_WITH(model_from_hf_config_json(j.dump(), "c.json"),
                    "c.json: key 'vision_config.model_type': 'clip_vision_model' is not modelled "
                    "(mllama_vision_model is)");
}
