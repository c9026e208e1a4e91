// Llama 3.2 Vision's (model_type mllama) parameters outside the language model vramsim runs, as
// transformers registers them (models/mllama/modeling_mllama.py: MllamaVisionModel,
// MllamaCrossAttentionDecoderLayer, MllamaModel.multi_modal_projector).
//
// A batch with images runs them (mllama_vision.h). A text-only batch (--images-per-sample 0) does not:
// MllamaTextModel.forward skips a cross-attention layer that has no cross_attention_states and none cached,
// and no pixel_values means no vision forward. These parameters are then in memory, loaded with the model,
// but reached by nothing: they get no gradient, so AdamW (which skips a parameter whose grad is None) keeps
// no state for them.
#pragma once

#include <vector>

#include "sim/models/model_config.h"

namespace vramsim {

// The vision tower's, the cross-attention layers' and the projector's parameters, in that order (MllamaModel
// registers vision_model, language_model, multi_modal_projector; the cross-attention layers sit among the
// language model's, listed here before it). Empty unless model.vision.wrapper_model_type is "mllama".
void mllama_parameter_shapes(const ModelConfig& model, std::vector<ParameterShape>& out);

}  // namespace vramsim
