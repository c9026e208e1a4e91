#include "sim/vision/mllama_parameters.h"

#include <string>
#include <utility>

#include <fmt/format.h>

namespace vramsim {

namespace {

void push(std::vector<ParameterShape>& out, std::string name, std::vector<std::int64_t> shape) {
  out.push_back(ParameterShape{std::move(name), std::move(shape), -1});
}

// MllamaVisionEncoderLayer: self_attn (q/k/v/o_proj without bias), mlp (fc1, fc2 with bias),
// input_layernorm, post_attention_layernorm (LayerNorms), and when gated gate_attn, gate_ffn.
void encoder_layer(std::vector<ParameterShape>& out, const std::string& p,
                   const ModelConfig::VisionPart::Mllama& v, bool gated) {
  for (const char* proj : {"q_proj", "k_proj", "v_proj", "o_proj"}) {
    push(out, p + "self_attn." + proj + ".weight", {v.hidden, v.hidden});
  }
  push(out, p + "mlp.fc1.weight", {v.intermediate, v.hidden});
  push(out, p + "mlp.fc1.bias", {v.intermediate});
  push(out, p + "mlp.fc2.weight", {v.hidden, v.intermediate});
  push(out, p + "mlp.fc2.bias", {v.hidden});
  for (const char* norm : {"input_layernorm", "post_attention_layernorm"}) {
    push(out, p + norm + ".weight", {v.hidden});
    push(out, p + norm + ".bias", {v.hidden});
  }
  if (gated) {
    push(out, p + "gate_attn", {1});
    push(out, p + "gate_ffn", {1});
  }
}

// MllamaVisionModel.__init__'s order: patch_embedding (Conv2d without bias), class_embedding,
// gated_positional_embedding (gate, embedding, tile_embedding: nn.Embedding(aspect ratios + 1, tiles x
// patches x hidden)), pre_ and post_tile_positional_embedding (embedding: nn.Embedding(aspect ratios + 1,
// tiles x hidden), gate), layernorm_pre, layernorm_post, transformer, global_transformer.
void vision_model(std::vector<ParameterShape>& out, const ModelConfig::VisionPart::Mllama& v) {
  const std::string p = "model.vision_model.";
  const std::int64_t side = v.image_size / v.patch_size;
  const std::int64_t patches = side * side + 1;   // and the class token
  const std::int64_t rows = v.aspect_ratios + 1;  // max_aspect_ratio_id + 1
  push(out, p + "patch_embedding.weight", {v.hidden, v.channels, v.patch_size, v.patch_size});
  push(out, p + "class_embedding", {v.hidden});
  push(out, p + "gated_positional_embedding.gate", {1});
  push(out, p + "gated_positional_embedding.embedding", {patches, v.hidden});
  push(out, p + "gated_positional_embedding.tile_embedding.weight",
       {rows, v.max_num_tiles * patches * v.hidden});
  for (const char* tile : {"pre_tile_positional_embedding.", "post_tile_positional_embedding."}) {
    push(out, p + tile + "embedding.weight", {rows, v.max_num_tiles * v.hidden});
    push(out, p + tile + "gate", {1});
  }
  for (const char* norm : {"layernorm_pre", "layernorm_post"}) {
    push(out, p + norm + ".weight", {v.hidden});
    push(out, p + norm + ".bias", {v.hidden});
  }
  for (std::int64_t l = 0; l < v.layers; ++l) {
    encoder_layer(out, fmt::format("{}transformer.layers.{}.", p, l), v, false);
  }
  for (std::int64_t l = 0; l < v.global_layers; ++l) {
    encoder_layer(out, fmt::format("{}global_transformer.layers.{}.", p, l), v, true);
  }
}

// MllamaCrossAttentionDecoderLayer: cross_attn (q_proj, k_proj, v_proj, q_norm and k_norm of head_dim,
// o_proj), input_layernorm, cross_attn_attn_gate, mlp (gate/up/down_proj), post_attention_layernorm,
// cross_attn_mlp_gate.
void cross_attention_layer(std::vector<ParameterShape>& out, const ModelConfig& m, std::int64_t layer) {
  const std::string p = fmt::format("model.language_model.layers.{}.", layer);
  const std::int64_t d = m.d_model;
  push(out, p + "cross_attn.q_proj.weight", {m.q_dim(), d});
  push(out, p + "cross_attn.k_proj.weight", {m.kv_dim(), d});
  push(out, p + "cross_attn.v_proj.weight", {m.kv_dim(), d});
  push(out, p + "cross_attn.q_norm.weight", {m.head_dim});
  push(out, p + "cross_attn.k_norm.weight", {m.head_dim});
  push(out, p + "cross_attn.o_proj.weight", {d, m.q_dim()});
  push(out, p + "input_layernorm.weight", {d});
  push(out, p + "cross_attn_attn_gate", {1});
  push(out, p + "mlp.gate_proj.weight", {m.d_ff, d});
  push(out, p + "mlp.up_proj.weight", {m.d_ff, d});
  push(out, p + "mlp.down_proj.weight", {d, m.d_ff});
  push(out, p + "post_attention_layernorm.weight", {d});
  push(out, p + "cross_attn_mlp_gate", {1});
}

}  // namespace

void mllama_parameter_shapes(const ModelConfig& model, std::vector<ParameterShape>& out) {
  if (model.vision.wrapper_model_type != "mllama") {
    return;
  }
  const ModelConfig::VisionPart::Mllama& v = model.vision.mllama;
  vision_model(out, v);
  for (const std::int64_t l : model.vision.cross_attention_layers) {
    cross_attention_layer(out, model, l);
  }
  push(out, "model.multi_modal_projector.weight", {model.d_model, v.output_dim});
  push(out, "model.multi_modal_projector.bias", {model.d_model});
}

}  // namespace vramsim
