// Llama 3.2 Vision (model_type mllama, transformers' MllamaForConditionalGeneration) as vramsim reads it:
// the parameters of the real checkpoints worked by hand from modeling_mllama.py (MllamaVisionModel,
// MllamaTextModel's self- and cross-attention decoder layers, multi_modal_projector) and checked against
// NVIDIA's published count for Llama-3.2-11B-Vision-Instruct; what is simulated (the step of a text-only
// batch, with the tower, the projector and the cross-attention layers in memory but not run); the
// config.json errors.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "graph/vision_test_util.h"
#include "sim/core/error.h"
#include "sim/models/model_config.h"
#include "sim/predict/step_prediction.h"
#include "test_paths.h"

using namespace vramsim;

namespace {

ModelConfig stored(const std::string& file) { return test::stored_hf_config(file); }

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
  RequestArgs a;
  a.model = (test::source_dir() / "tests" / "data" / "hf_configs" /
             "meta-llama__Llama-3.2-11B-Vision-Instruct.config.json")
                .string();
  a.batch = 1;
  a.seq = 64;
  a.steps = 1;
  a.gpu = "A100-80GB";
  a.precision = "bf16";
  const Prediction p = predict(make_request(a));
  CHECK(p.vision.total() == 2'639'926'819);  // 863,567,379 + 31,461,376 + 1,744,898,064
  CHECK(p.total_parameters == 10'670'220'835);
  // a text-only batch reaches neither the tower nor the cross-attention layers: no gradient, no state
  CHECK(p.trainable_parameters == 8'030'294'016);
  // every parameter is in memory, in bf16 (the peak is in the optimizer step, all of them live)
  CHECK(p.bill.parameters == 10'670'220'835 * 2);
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
