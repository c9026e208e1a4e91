// Hugging Face config.json -> ModelConfig for the vision-language wrappers (gemma3, llava, llava_next,
// qwen2_vl, qwen2_5_vl, mllama): the language model from text_config by its own model_type's reader
// (hf_config.cpp), the vision tower's shape and parameter count from vision_config, each after transformers'
// configuration_<model_type>.py, whose class defaults fill the optional keys.
#include <algorithm>
#include <cmath>
#include <functional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "sim/core/checked.h"
#include "sim/core/error.h"
#include "sim/hub/hf_config_json.h"
#include "sim/models/model_config.h"

namespace vramsim::hf_config {
namespace {

// The products and sums of a vision tower's parameter count, with overflow checks (sim/core/checked.h): an
// overflow is the config's error, named at its vision_config.
auto vision_count_ops(const JsonReader& v) {
  const auto mul = [&v](std::int64_t a, std::int64_t b) {
    const auto x = checked_mul(a, b);
    if (!x) {
      v.fail("vision_config", "the vision tower's parameter count overflows");
    }
    return *x;
  };
  const auto add = [&v](std::initializer_list<std::int64_t> xs) {
    std::int64_t sum = 0;
    for (std::int64_t x : xs) {
      const auto y = checked_add(sum, x);
      if (!y) {
        v.fail("vision_config", "the vision tower's parameter count overflows");
      }
      sum = *y;
    }
    return sum;
  };
  return std::pair{mul, add};
}

// The parameters SiglipVisionModel registers for a SiglipVisionConfig (transformers'
// models/siglip/modeling_siglip.py, SiglipVisionTransformer; the config's class defaults for missing keys):
// SiglipVisionEmbeddings (patch_embedding Conv2d(num_channels, hidden, patch, stride patch) with bias,
// position_embedding of (image_size / patch_size)^2 positions), num_hidden_layers SiglipEncoderLayers
// (layer_norm1, q/k/v/out_proj with biases, layer_norm2, fc1 / fc2 with biases), post_layernorm, and with
// vision_use_head the SiglipMultiheadAttentionPoolingHead (probe, nn.MultiheadAttention's in_proj and
// out_proj, layernorm, an MLP).
std::int64_t siglip_vision_parameters(const JsonReader& v) {
  const std::int64_t h = v.integer_or("hidden_size", 768);
  const std::int64_t ff = v.integer_or("intermediate_size", 3072);
  const std::int64_t layers = v.integer_or("num_hidden_layers", 12, kMaxLayers);
  const std::int64_t channels = v.integer_or("num_channels", 3, 64);
  const std::int64_t image = v.integer_or("image_size", 224);
  const std::int64_t patch = v.integer_or("patch_size", 16);
  if (image % patch != 0) {
    v.fail("vision_config.image_size", fmt::format("{} is not a multiple of patch_size {}", image, patch));
  }
  const auto [mul, add] = vision_count_ops(v);
  const std::int64_t side = image / patch;
  const std::int64_t linear = add({mul(h, h), h});
  const std::int64_t mlp = add({mul(h, ff), ff, mul(ff, h), h});
  const std::int64_t layer = add({2 * h, mul(4, linear), 2 * h, mlp});
  std::int64_t total =
      add({mul(mul(h, channels), mul(patch, patch)), h, mul(mul(side, side), h), mul(layers, layer), 2 * h});
  if (v.boolean_or("vision_use_head", true)) {
    total = add({total, h, add({mul(3 * h, h), 3 * h}), linear, 2 * h, mlp});
  }
  return total;
}

}  // namespace

// Gemma3Config (Gemma3ForConditionalGeneration): the language model is text_config's, and it is what is
// simulated. The vision part transformers also builds is counted, not simulated: the SigLIP tower of
// vision_config (SiglipVisionConfig's defaults when the key is absent, as Gemma3Config does) and
// Gemma3MultiModalProjector (mm_input_projection_weight [vision hidden, text hidden], mm_soft_emb_norm of
// the vision hidden size).
ModelConfig gemma3(const JsonReader& r) {
  ModelConfig m = gemma3_text(r.child("text_config"));
  m.model_type = "gemma3_text";
  m.vision.wrapper_model_type = "gemma3";
  const JsonReader v = r.child_or_empty("vision_config");
  const std::string vision_type = v.string_or("model_type", "siglip_vision_model");
  if (vision_type != "siglip_vision_model") {
    v.fail("vision_config.model_type",
           fmt::format("'{}' is not modelled (siglip_vision_model is)", vision_type));
  }
  const std::int64_t vision_hidden = v.integer_or("hidden_size", 768);
  m.vision.model_type = vision_type;
  m.vision.tower_parameters = siglip_vision_parameters(v);
  m.vision.projector_parameters = vision_hidden * m.d_model + vision_hidden;
  // The tower as gemma3_vision.h runs it (SiglipVisionConfig's defaults for missing keys)
  ModelConfig::VisionPart::Clip c;
  c.tower = ModelConfig::VisionPart::Tower::kSiglip;
  c.hidden = vision_hidden;
  c.intermediate = v.integer_or("intermediate_size", 3072);
  c.layers = v.integer_or("num_hidden_layers", 12, kMaxLayers);
  c.heads = v.integer_or("num_attention_heads", 12);
  c.channels = v.integer_or("num_channels", 3, 64);
  c.image_size = v.integer_or("image_size", 224);
  c.patch_size = v.integer_or("patch_size", 16);
  c.feature_layer = -1;  // last_hidden_state
  c.drop_cls = false;    // SigLIP has no CLS token
  c.pooling_head = v.boolean_or("vision_use_head", true);
  const std::string act = v.string_or("hidden_act", "gelu_pytorch_tanh");
  if (act != "gelu_pytorch_tanh") {
    v.fail("vision_config.hidden_act", fmt::format("'{}' is not modelled (gelu_pytorch_tanh is)", act));
  }
  if (c.hidden % c.heads != 0) {
    v.fail("vision_config.num_attention_heads",
           fmt::format("{} heads do not split hidden_size {}", c.heads, c.hidden));
  }
  // Gemma3MultiModalProjector: AvgPool2d(kernel = patches per side / sqrt(mm_tokens_per_image))
  c.pooled_tokens = r.integer_or("mm_tokens_per_image", 256);
  const auto side = static_cast<std::int64_t>(std::llround(std::sqrt(static_cast<double>(c.pooled_tokens))));
  if (side * side != c.pooled_tokens || side > c.patches_per_side() || c.patches_per_side() % side != 0) {
    // AvgPool2d(kernel_size = patches_per_image // tokens_per_side) cannot pool this grid: transformers
    // builds the model (counted above) but its forward fails; the vision part stays counted, not simulated
    return m;
  }
  m.vision.clip = c;
  return m;
}

namespace {

// CLIPVisionConfig (transformers' models/clip/configuration_clip.py; class defaults for missing keys, as
// LlavaConfig builds it from a vision_config dict): the CLIPVisionModel vision_tower.py simulates.
ModelConfig::VisionPart::Clip clip_vision(const JsonReader& v) {
  ModelConfig::VisionPart::Clip c;
  c.hidden = v.integer_or("hidden_size", 768);
  c.intermediate = v.integer_or("intermediate_size", 3072);
  c.layers = v.integer_or("num_hidden_layers", 12, kMaxLayers);
  c.heads = v.integer_or("num_attention_heads", 12);
  c.channels = v.integer_or("num_channels", 3, 64);
  c.image_size = v.integer_or("image_size", 224);
  c.patch_size = v.integer_or("patch_size", 32);
  if (c.image_size % c.patch_size != 0) {
    v.fail("vision_config.image_size",
           fmt::format("{} is not a multiple of patch_size {}", c.image_size, c.patch_size));
  }
  if (c.hidden % c.heads != 0 || (c.hidden / c.heads) % 2 != 0) {
    v.fail("vision_config.num_attention_heads",
           fmt::format("{} heads do not split hidden_size {} into even head sizes", c.heads, c.hidden));
  }
  const std::string act = v.string_or("hidden_act", "quick_gelu");
  if (act != "quick_gelu") {
    v.fail("vision_config.hidden_act", fmt::format("'{}' is not modelled (quick_gelu is)", act));
  }
  return c;
}

// The parameters CLIPVisionModel registers (modeling_clip.py, CLIPVisionTransformer): CLIPVisionEmbeddings
// (class_embedding [h], patch_embedding Conv2d(channels, h, patch, stride patch, bias=False),
// position_embedding of (image_size / patch_size)^2 + 1 positions), pre_layrnorm, num_hidden_layers
// CLIPEncoderLayers (k/v/q/out_proj with biases, layer_norm1, fc1 / fc2 with biases, layer_norm2),
// post_layernorm. Counted with overflow checks (sim/core/checked.h).
std::int64_t clip_vision_parameters(const ModelConfig::VisionPart::Clip& c, const JsonReader& v) {
  const auto [mul, add] = vision_count_ops(v);
  const std::int64_t h = c.hidden, ff = c.intermediate;
  const std::int64_t positions = add({mul(c.patches_per_side(), c.patches_per_side()), 1});
  const std::int64_t embeddings =
      add({h, mul(mul(h, c.channels), mul(c.patch_size, c.patch_size)), mul(positions, h)});
  const std::int64_t layer =
      add({mul(4, add({mul(h, h), h})), 2 * h, add({mul(h, ff), ff}), add({mul(ff, h), h}), 2 * h});
  return add({embeddings, 2 * h, mul(c.layers, layer), 2 * h});
}

}  // namespace

// LlavaConfig (LlavaForConditionalGeneration, transformers' models/llava): the language model of
// text_config (model_type "llama" when absent; a llama or mistral text_config takes LlamaConfig's or
// MistralConfig's class defaults for the shape keys it leaves out, as CONFIG_MAPPING[type](**text_config)
// does), the CLIP vision tower of vision_config, and LlavaMultiModalProjector (linear_1 vision hidden -> text
// hidden, projector_hidden_act, linear_2 text hidden -> text hidden, biases with multimodal_projector_bias).
// All three are simulated (vision_tower.h).
ModelConfig llava(const JsonReader& r) {
  nlohmann::json text = r.object_or_empty("text_config");
  if (!text.contains("model_type")) {
    text["model_type"] = "llama";
  }
  nlohmann::json defaults = nlohmann::json::object();
  if (text["model_type"] == "llama") {
    // LlamaConfig.__init__'s defaults (configuration_llama.py)
    defaults = {{"vocab_size", 32000},     {"hidden_size", 4096},       {"intermediate_size", 11008},
                {"num_hidden_layers", 32}, {"num_attention_heads", 32}, {"max_position_embeddings", 2048}};
  } else if (text["model_type"] == "mistral") {
    // MistralConfig.__init__'s defaults (configuration_mistral.py): llava-v1.6-mistral-7b-hf's text_config
    // leaves the shapes to them
    defaults = {{"vocab_size", 32000},
                {"hidden_size", 4096},
                {"intermediate_size", 14336},
                {"num_hidden_layers", 32},
                {"num_attention_heads", 32},
                {"num_key_value_heads", 8},
                {"max_position_embeddings", 4096 * 32}};
  }
  for (const auto& [key, value] : defaults.items()) {
    if (!text.contains(key) || text.at(key).is_null()) {
      text[key] = value;
    }
  }
  ModelConfig m = text_model(text, r.source());
  m.vision.wrapper_model_type = "llava";
  const JsonReader v = r.child_or_empty("vision_config");
  // LlavaConfig's own vision defaults when vision_config is absent: CLIP ViT-L/14 at 336 pixels
  ModelConfig::VisionPart::Clip clip;
  if (r.has("vision_config")) {
    const std::string vision_type = v.string_or("model_type", "clip_vision_model");
    if (vision_type != "clip_vision_model") {
      v.fail("vision_config.model_type",
             fmt::format("'{}' is not modelled (clip_vision_model is)", vision_type));
    }
    clip = clip_vision(v);
  } else {
    clip.hidden = 1024;
    clip.intermediate = 4096;
    clip.layers = 24;
    clip.heads = 16;
    clip.image_size = 336;
    clip.patch_size = 14;
  }
  // hidden_states has num_hidden_layers + 1 entries (the embeddings, then each layer's output)
  clip.feature_layer = r.signed_integer_or("vision_feature_layer", -2, clip.layers + 1);
  if (clip.feature_layer > clip.layers) {
    r.fail("vision_feature_layer", fmt::format("{} is past the {} hidden states of the vision tower",
                                               clip.feature_layer, clip.layers + 1));
  }
  const std::string strategy = r.string_or("vision_feature_select_strategy", "default");
  if (strategy != "default" && strategy != "full") {
    r.fail("vision_feature_select_strategy", fmt::format("'{}' is not 'default' or 'full'", strategy));
  }
  clip.drop_cls = strategy == "default";
  clip.projector_bias = r.boolean_or("multimodal_projector_bias", true);
  const std::string act = r.string_or("projector_hidden_act", "gelu");
  if (act != "gelu") {
    r.fail("projector_hidden_act", fmt::format("'{}' is not modelled (gelu is)", act));
  }
  m.vision.model_type = "clip_vision_model";
  m.vision.clip = clip;
  m.vision.tower_parameters = clip_vision_parameters(clip, v);
  const std::int64_t bias = clip.projector_bias ? 1 : 0;
  m.vision.projector_parameters =
      clip.hidden * m.d_model + bias * m.d_model + m.d_model * m.d_model + bias * m.d_model;
  return m;
}

// LlavaNextConfig (LlavaNextForConditionalGeneration, transformers' models/llava_next): LlavaConfig's
// language model, CLIP tower and projector, plus image_grid_pinpoints (LlavaNextConfig's default: 336 x 672,
// 672 x 336, 672 x 672, 1008 x 336, 336 x 1008) and LlavaNextModel.image_newline, one vector of the text
// hidden size (counted with the projector). Simulated with "anyres" tiling (llava_next_anyres.h).
ModelConfig llava_next(const JsonReader& r) {
  ModelConfig m = llava(r);
  m.vision.wrapper_model_type = "llava_next";
  ModelConfig::VisionPart::Clip& c = m.vision.clip;
  c.grid_pinpoints = r.integer_pairs_or("image_grid_pinpoints",
                                        {{336, 672}, {672, 336}, {672, 672}, {1008, 336}, {336, 1008}});
  for (const auto& [h, w] : c.grid_pinpoints) {
    if (h % c.image_size != 0 || w % c.image_size != 0) {
      // pack_image_features views each tile's features as (h / image_size, w / image_size, side, side, -1)
      r.fail("image_grid_pinpoints",
             fmt::format("{}x{} is not a multiple of vision_config.image_size {}", h, w, c.image_size));
    }
  }
  if (!c.drop_cls) {
    // pack_image_features' view(num_patch_height, num_patch_width, side, side, -1) of 577 tokens per tile
    r.fail("vision_feature_select_strategy", "'full' is not modelled for llava_next (vramsim)");
  }
  m.vision.projector_parameters += m.d_model;  // image_newline
  return m;
}

namespace {

// Qwen2VLVisionConfig / Qwen2_5_VLVisionConfig (transformers' models/qwen2_vl/configuration_qwen2_vl.py and
// models/qwen2_5_vl/configuration_qwen2_5_vl.py; the class defaults for missing keys). 2.5-VL names the tower
// width hidden_size and the output out_hidden_size; 2-VL names them embed_dim and hidden_size.
ModelConfig::VisionPart::Clip qwen_vl_vision(const JsonReader& v, bool v2_5, std::int64_t text_hidden) {
  using Tower = ModelConfig::VisionPart::Tower;
  ModelConfig::VisionPart::Clip c;
  c.tower = v2_5 ? Tower::kQwen25Vl : Tower::kQwen2Vl;
  c.layers = v.integer_or("depth", 32, kMaxLayers);
  c.heads = v.integer_or("num_heads", 16);
  c.channels = v.integer_or("in_channels", v.integer_or("in_chans", 3, 64), 64);
  c.patch_size = v.integer_or("patch_size", 14, 4096);
  c.temporal_patch_size = v.integer_or("temporal_patch_size", 2, 64);
  c.spatial_merge_size = v.integer_or("spatial_merge_size", 2, 64);
  std::int64_t out = 0;
  if (v2_5) {
    c.hidden = v.integer_or("hidden_size", 3584);
    c.intermediate = v.integer_or("intermediate_size", 3420);
    out = v.integer_or("out_hidden_size", 3584);
    c.window_size = v.integer_or("window_size", 112, 1 << 20);
    c.full_attention_layers = v.has("fullatt_block_indexes") ? v.integers_or_empty("fullatt_block_indexes")
                                                             : std::vector<std::int64_t>{7, 15, 23, 31};
    const std::string act = v.string_or("hidden_act", "silu");
    if (act != "silu") {
      v.fail("vision_config.hidden_act", fmt::format("'{}' is not modelled (silu is)", act));
    }
    if (c.window_size % (c.spatial_merge_size * c.patch_size) != 0) {
      v.fail("vision_config.window_size",
             fmt::format("{} is not a multiple of spatial_merge_size x patch_size", c.window_size));
    }
  } else {
    c.hidden = v.integer_or("embed_dim", 1280);
    const double ratio = v.number_or("mlp_ratio", 4.0);
    if (ratio <= 0.0 || ratio > 64.0) {
      v.fail("vision_config.mlp_ratio", "must be in (0, 64]");
    }
    c.intermediate = static_cast<std::int64_t>(static_cast<double>(c.hidden) * ratio);  // int(dim * ratio)
    out = v.integer_or("hidden_size", 3584);
    const std::string act = v.string_or("hidden_act", "quick_gelu");
    if (act != "quick_gelu") {
      v.fail("vision_config.hidden_act", fmt::format("'{}' is not modelled (quick_gelu is)", act));
    }
  }
  if (out != text_hidden) {
    v.fail(v2_5 ? "vision_config.out_hidden_size" : "vision_config.hidden_size",
           fmt::format("{} is not the language model's hidden_size {}", out, text_hidden));
  }
  if (c.hidden % c.heads != 0 || (c.hidden / c.heads) % 4 != 0) {
    v.fail("vision_config.num_heads",
           fmt::format("{} heads do not split {} into head sizes that are multiples of 4 (2D rotary)",
                       c.heads, c.hidden));
  }
  for (const std::int64_t l : c.full_attention_layers) {
    if (l >= c.layers) {
      v.fail("vision_config.fullatt_block_indexes",
             fmt::format("layer {} is past the {} blocks", l, c.layers));
    }
  }
  c.drop_cls = true;
  return c;
}

// The parameters Qwen2VisionTransformerPretrainedModel / Qwen2_5_VisionTransformerPretrainedModel register
// (modeling_qwen2_vl.py / modeling_qwen2_5_vl.py): PatchEmbed's Conv3d(in_channels, width, kernel
// (temporal_patch_size, patch_size, patch_size), bias=False), depth blocks (norm1 / norm2 LayerNorms with
// biases, or 2.5-VL's RMSNorms; attn.qkv width -> 3 width and attn.proj with biases; VisionMlp fc1 / fc2, or
// 2.5-VL's gate_proj / up_proj / down_proj, all with biases). The PatchMerger (ln_q over the width, mlp.0
// width m^2 -> width m^2 and mlp.2 width m^2 -> the language model's width, with biases) is the projector.
std::pair<std::int64_t, std::int64_t> qwen_vl_vision_parameters(const ModelConfig::VisionPart::Clip& c,
                                                                std::int64_t text_hidden,
                                                                const JsonReader& v) {
  const auto [mul, add] = vision_count_ops(v);
  const bool v2_5 = c.tower == ModelConfig::VisionPart::Tower::kQwen25Vl;
  const std::int64_t h = c.hidden, ff = c.intermediate;
  const std::int64_t patch =
      mul(mul(h, c.channels), mul(c.temporal_patch_size, mul(c.patch_size, c.patch_size)));
  const std::int64_t norms = v2_5 ? 2 * h : 4 * h;
  const std::int64_t attention = add({mul(h, 3 * h), 3 * h, mul(h, h), h});
  const std::int64_t mlp = v2_5 ? add({mul(3, mul(h, ff)), 2 * ff, h}) : add({mul(h, ff), ff, mul(ff, h), h});
  const std::int64_t block = add({norms, attention, mlp});
  const std::int64_t merged = mul(h, mul(c.spatial_merge_size, c.spatial_merge_size));
  const std::int64_t merger =
      add({v2_5 ? h : 2 * h, mul(merged, merged), merged, mul(merged, text_hidden), text_hidden});
  return {add({patch, mul(c.layers, block)}), merger};
}

// Qwen2VLConfig / Qwen2_5_VLConfig (Qwen2VLForConditionalGeneration / Qwen2_5_VLForConditionalGeneration):
// the vision transformer, its PatchMerger and the language model, all simulated (qwen2_vl_vision.h). The
// language model is text_config when there is one (transformers >= 4.52 writes it), else the top-level keys
// (the checkpoints' own files, written by 4.41.2), read as qwen2: Qwen2VLTextConfig and Qwen2_5_VLTextConfig
// have Qwen2Config's keys. Its rotary embedding is M-RoPE (rope_scaling type "mrope",
// Qwen2VLRotaryEmbedding).
ModelConfig qwen_vl(const JsonReader& r, bool v2_5) {
  nlohmann::json text = r.has("text_config") ? r.object_or_empty("text_config") : r.root();
  text.erase("vision_config");
  text.erase("rope_scaling");  // mrope_section: M-RoPE's split of the rotary dimensions (position ids only)
  text["model_type"] = "qwen2";
  ModelConfig m = text_model(text, r.source());
  m.vision.wrapper_model_type = v2_5 ? "qwen2_5_vl" : "qwen2_vl";
  m.vision.mrope = true;
  const JsonReader v = r.child_or_empty("vision_config");
  const ModelConfig::VisionPart::Clip c = qwen_vl_vision(v, v2_5, m.d_model);
  m.vision.model_type = v2_5 ? "qwen2_5_vl_vision" : "qwen2_vl_vision";
  m.vision.clip = c;
  const auto [tower, merger] = qwen_vl_vision_parameters(c, m.d_model, v);
  m.vision.tower_parameters = tower;
  m.vision.projector_parameters = merger;
  return m;
}
}  // namespace

ModelConfig qwen2_vl(const JsonReader& r) { return qwen_vl(r, false); }

ModelConfig qwen2_5_vl(const JsonReader& r) { return qwen_vl(r, true); }

namespace {

// ---- mllama (Llama 3.2 Vision) ----------------------------------------------------------------------------

// transformers' models/mllama (added in v4.45.0): configuration_mllama.py (MllamaVisionConfig,
// MllamaTextConfig, MllamaConfig; the stored copy at 032b32ab) and modeling_mllama.py (MllamaVisionModel,
// MllamaTextModel, MllamaForConditionalGeneration).

// MllamaVisionModel's parameters for a vision_config (MllamaVisionConfig's defaults for missing keys):
// patch_embedding Conv2d(num_channels, hidden, patch, bias=False); class_embedding (hidden);
// gated_positional_embedding: gate (1), embedding (patches + 1, hidden), tile_embedding (aspect ratios + 1,
// max_num_tiles x (patches + 1) x hidden); pre_ and post_tile_positional_embedding: embedding (aspect ratios
// + 1, max_num_tiles x hidden) and a gate (1) each; layernorm_pre and layernorm_post (weight and bias);
// transformer of num_hidden_layers MllamaVisionEncoderLayers (q/k/v/o_proj without bias, fc1 / fc2 with
// bias, input_layernorm and post_attention_layernorm) and global_transformer of num_global_layers gated
// ones (+ gate_attn and gate_ffn, one element each).
std::int64_t mllama_vision_parameters(const JsonReader& v, ModelConfig::VisionPart::Mllama& shape) {
  const std::int64_t h = v.integer_or("hidden_size", 1280);
  const std::int64_t ff = v.integer_or("intermediate_size", 5120);
  const std::int64_t layers = v.integer_or("num_hidden_layers", 32, kMaxLayers);
  const std::int64_t global = v.integer_or("num_global_layers", 8, kMaxLayers);
  const std::int64_t channels = v.integer_or("num_channels", 3, 64);
  const std::int64_t image = v.integer_or("image_size", 448);
  const std::int64_t patch = v.integer_or("patch_size", 14);
  const std::int64_t tiles = v.integer_or("max_num_tiles", 4, 64);
  const std::int64_t heads = v.integer_or("attention_heads", v.integer_or("num_attention_heads", 16));
  if (image % patch != 0) {
    v.fail("vision_config.image_size", fmt::format("{} is not a multiple of patch_size {}", image, patch));
  }
  if (h % heads != 0) {
    v.fail("vision_config.attention_heads", fmt::format("{} does not divide hidden_size {}", heads, h));
  }
  // MllamaVisionConfig.__init__ raises ValueError("max_num_tiles must be 4 for default supported aspect
  // ratios") when the list is absent; max_aspect_ratio_id is the list's length
  const std::vector<std::pair<std::int64_t, std::int64_t>> ratios =
      v.integer_pairs_or("supported_aspect_ratios", {});
  if (ratios.empty() && tiles != 4) {
    v.fail("vision_config.max_num_tiles", "must be 4 for the default supported_aspect_ratios");
  }
  const std::int64_t aspect_rows = (ratios.empty() ? 8 : static_cast<std::int64_t>(ratios.size())) + 1;
  const std::int64_t output_dim = v.integer_or("vision_output_dim", 7680);
  std::vector<std::int64_t> intermediate = v.integers_or_empty("intermediate_layers_indices");
  if (!v.has("intermediate_layers_indices")) {
    intermediate = {3, 7, 15, 23, 30};  // MllamaVisionConfig's default
  }
  for (const std::int64_t i : intermediate) {
    if (i < 0 || i > layers) {  // encoder_states holds num_hidden_layers + 1 states
      v.fail("vision_config.intermediate_layers_indices",
             fmt::format("{} is not a hidden state of {} layers", i, layers));
    }
  }
  // MllamaVisionModel.forward concatenates the last state with the intermediate ones: multi_modal_projector's
  // Linear(vision_output_dim, ...) takes hidden_size x (1 + len(intermediate_layers_indices)) features
  if (output_dim != h * (1 + static_cast<std::int64_t>(intermediate.size()))) {
    v.fail("vision_output_dim", fmt::format("{} is not hidden_size {} x (1 + {} intermediate layers)",
                                            output_dim, h, intermediate.size()));
  }
  shape = {.hidden = h,
           .intermediate = ff,
           .layers = layers,
           .global_layers = global,
           .channels = channels,
           .image_size = image,
           .patch_size = patch,
           .max_num_tiles = tiles,
           .aspect_ratios = aspect_rows - 1,
           .output_dim = output_dim,
           .heads = heads,
           .intermediate_layers = intermediate};
  const auto [mul, add] = vision_count_ops(v);
  const std::int64_t positions = add({mul(image / patch, image / patch), 1});
  const std::int64_t layer =
      add({mul(4, mul(h, h)), mul(h, ff), ff, mul(ff, h), h, 4 * h});  // attention, MLP, two LayerNorms
  const std::int64_t tile_embedding = add({mul(mul(aspect_rows, tiles), h), 1});
  return add({mul(mul(h, channels), mul(patch, patch)), h, 1, mul(positions, h),
              mul(mul(aspect_rows, tiles), mul(positions, h)), tile_embedding, tile_embedding, 2 * h, 2 * h,
              mul(layers, layer), mul(global, add({layer, 2}))});
}

}  // namespace

// MllamaConfig (MllamaForConditionalGeneration): MllamaTextConfig's defaults for text_config's missing keys
// (the 11B model's shapes: 40 layers of which cross_attention_layers [3, 8, ..., 38] are
// MllamaCrossAttentionDecoderLayers). The language model here is embed_tokens of vocab_size + 8 rows, the
// self-attention layers (LlamaDecoderLayer's shapes), norm, lm_head of vocab_size; counted as the vision part
// and run on a batch with images (mllama_vision.h; a text-only batch skips them): MllamaVisionModel, the
// multi_modal_projector Linear(vision_output_dim, hidden, bias) and the cross-attention layers (cross_attn's
// q/k/v/o_proj, q_norm and k_norm of head_dim, input_layernorm, cross_attn_attn_gate, the MLP,
// post_attention_layernorm, cross_attn_mlp_gate).
ModelConfig mllama(const JsonReader& r) {
  const JsonReader t = r.child_or_empty("text_config");
  const std::int64_t layers = t.integer_or("num_hidden_layers", 40, kMaxLayers);
  std::vector<std::int64_t> cross = t.integers_or_empty("cross_attention_layers");
  if (!t.has("cross_attention_layers")) {
    cross = {3, 8, 13, 18, 23, 28, 33, 38};
  }
  std::sort(cross.begin(), cross.end());
  if (std::adjacent_find(cross.begin(), cross.end()) != cross.end() ||
      (!cross.empty() && cross.back() >= layers)) {
    t.fail("text_config.cross_attention_layers",
           fmt::format("must be distinct layer indices below num_hidden_layers {}", layers));
  }
  ModelConfig m;
  m.family = ModelFamily::kLlama;
  m.vocab_size = t.integer_or("vocab_size", 128256);
  m.extra_embedding_rows = 8;
  m.d_model = t.integer_or("hidden_size", 4096);
  m.n_layers = layers - static_cast<std::int64_t>(cross.size());
  m.n_heads = t.integer_or("num_attention_heads", 32);
  m.n_kv_heads = t.integer_or("num_key_value_heads", 8);
  m.head_dim = m.d_model / m.n_heads;  // MllamaTextSelfAttention: hidden_size // num_attention_heads
  m.d_ff = t.integer_or("intermediate_size", 14336);
  m.max_positions = t.integer_or("max_position_embeddings", 131072);
  m.tied_embeddings = t.boolean_or("tie_word_embeddings", false);
  m.dropout.attention = t.probability_or("dropout", 0.0);
  m.gated_activation = gated_activation(t, "hidden_act", "silu");
  if (m.n_layers == 0) {
    t.fail("text_config.cross_attention_layers", "leaves no self-attention layer");
  }
  m.model_type = "mllama_text_model";
  m.vision.wrapper_model_type = "mllama";
  const JsonReader v = r.child_or_empty("vision_config");
  m.vision.model_type = v.string_or("model_type", "mllama_vision_model");
  if (m.vision.model_type != "mllama_vision_model") {
    v.fail("vision_config.model_type",
           fmt::format("'{}' is not modelled (mllama_vision_model is)", m.vision.model_type));
  }
  m.vision.tower_parameters = mllama_vision_parameters(v, m.vision.mllama);
  const auto [mul, add] = vision_count_ops(v);
  const std::int64_t d = m.d_model;
  m.vision.projector_parameters = add({mul(m.vision.mllama.output_dim, d), d});
  const std::int64_t cross_layer = add({mul(d, m.q_dim()), mul(2, mul(d, m.kv_dim())), mul(m.q_dim(), d),
                                        2 * m.head_dim, d, 1, mul(3, mul(d, m.d_ff)), d, 1});
  m.vision.cross_attention_parameters = mul(static_cast<std::int64_t>(cross.size()), cross_layer);
  m.vision.cross_attention_layers = cross;
  return m;
}

}  // namespace vramsim::hf_config
