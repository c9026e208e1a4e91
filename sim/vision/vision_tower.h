// A vision-language model's vision part, run the way transformers' LlavaForConditionalGeneration runs it
// (models/llava/modeling_llava.py, LlavaModel.get_image_features / get_placeholder_mask / forward;
// models/clip/modeling_clip.py, CLIPVisionTransformer): the images go through the CLIP vision tower with
// output_hidden_states=True, the hidden state vision_feature_layer selects (without its CLS token under the
// "default" strategy) goes through LlavaMultiModalProjector (linear_1, GELU, linear_2), and the features
// are scattered into the embeddings of the image tokens (inputs_embeds.masked_scatter) before the language
// model runs. `--seq` is the language model's sequence with the image tokens in it (LlavaProcessor expands
// each <image> into tokens_per_image tokens), so batch x images_per_sample x tokens_per_image of them must
// fit.
//
// The tower is frozen by default, as LLaVA's fine-tune scripts (scripts/v1_5/finetune.sh: the vision tower's
// requires_grad_(False), its forward under torch.no_grad()) and LLaMA-Factory (freeze_vision_tower: true)
// leave it: it then saves nothing for backward; the projector and the language model train.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "sim/models/transformer_parts.h"

namespace vramsim {

// The parameters CLIPVisionModel and LlavaMultiModalProjector register (SiglipVisionModel and
// Gemma3MultiModalProjector for gemma3, the vision transformer and PatchMerger for qwen2_vl; mllama's tower,
// cross-attention layers and projector, mllama_parameters.h), in model.parameters() order (LlavaModel
// registers vision_tower, multi_modal_projector, then language_model). Empty for a model whose vision part
// is neither simulated nor in memory.
void llava_vision_parameter_shapes(const ModelConfig& model, std::vector<ParameterShape>& out);

// Creates the vision part's parameters (and CLIPVisionEmbeddings' position_ids buffer) on the tape in
// `dtype`. The tower is frozen when vision.freeze_tower is set; both tower and projector are frozen when
// `base_frozen` (a PEFT method: get_peft_model freezes every parameter that is not an adapter).
// `resident_numel` as in create_parameters (a data-parallel shard).
VisionParams create_vision_parameters(EagerTape& tape, const ModelConfig& model, DType dtype,
                                      const VisionInputs& vision, bool base_frozen,
                                      const std::function<std::int64_t(std::int64_t)>& resident_numel = {});

// Images in one micro-batch: batch x images_per_sample.
std::int64_t images_in_micro_batch(const TrainingOptions& options);

// --image-size: "N" (a square side; 0: the model's default) or "HxW". Returns (height, width), width 0 for
// "N". Throws InputError naming the flag.
std::pair<std::int64_t, std::int64_t> parse_image_size(const std::string& text);

// Tokens one image becomes in the language model's sequence: fixed for llava and gemma3, smart_resize's for
// qwen2_vl (qwen2_vl_vision.h).
std::int64_t vision_tokens_per_image(const ModelConfig& model, const VisionInputs& vision);

// The image processor's pixel_values of one micro-batch (fp32): (images, channels, side, side), or qwen2_vl's
// (patches, channels x temporal_patch_size x patch_size^2).
Shape pixel_values_shape(const ModelConfig& model, const TrainingOptions& options);

// Throws InputError for requests the simulated vision part cannot run: an image size CLIP's fixed position
// embeddings refuse, more image tokens than --seq holds, and the techniques not modelled with it (also with
// mllama's vision part: mllama_vision.h).
void check_vision_options(const ModelConfig& model, const TrainingOptions& options);

// LlavaModel.forward after embed_tokens: runs the tower and projector on ctx.pixel_values and returns
// inputs_embeds.masked_scatter(special_image_mask, image_features). Takes over the caller's reference to
// `inputs_embeds`.
VarId merge_image_features(EmitContext& ctx, VarId inputs_embeds);

}  // namespace vramsim
