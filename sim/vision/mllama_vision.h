// Llama 3.2 Vision's (model_type mllama) image path in the training step, as transformers runs it
// (models/mllama/modeling_mllama.py, read at commit befb7955722e: MllamaVisionModel.forward,
// MllamaForConditionalGeneration.forward, _prepare_cross_attention_mask, MllamaCrossAttentionDecoderLayer,
// MllamaTextCrossSdpaAttention; mllama_parameters.h lists the parameters).
//
// MllamaImageProcessor pads every image to max_num_tiles tiles of image_size^2 pixels (pack_images:
// pixel_values (batch, max_num_images, max_image_tiles, 3, 560, 560)), so the tower always runs max_num_tiles
// tiles per image whatever the image's size: (image_size / patch_size)^2 + 1 = 1601 patches a tile, padded to
// a multiple of 8 (1608), every tile of an image in one sequence (4 x 1608 = 6432 rows) under an additive
// aspect-ratio mask of (rows x rows). The local transformer keeps every layer's input (output_hidden_states
// =True) until the tower returns; the five intermediate_layers_indices states are stacked and concatenated
// with the global transformer's output into vision_output_dim (7680) features; multi_modal_projector makes
// cross_attention_states (images x tiles x 1601 vectors of the text hidden size a sample). The language
// model's cross-attention layers (text_config.cross_attention_layers) run between its self-attention layers
// on them, under the cross_attention_mask that _prepare_cross_attention_mask expands to (batch, 1, seq,
// images x tiles x 1601) in the model's dtype.
//
// Trained as torchtune's Llama 3.2 Vision recipes and LLaVA's scripts leave it: the tower frozen unless
// --freeze-vision-tower false, the projector and the cross-attention layers trained; a PEFT method freezes
// all three (get_peft_model). A frozen tower records no graph (no parameter needs a gradient and the pixels
// do not): it saves nothing for backward.
#pragma once

#include <cstdint>

#include "sim/models/transformer_parts.h"

namespace vramsim {

// Tokens a padded tile runs as in the tower: (image_size / patch_size)^2 + 1 rounded up to a multiple of 8
// (MllamaVisionModel.forward's num_padding_patches).
std::int64_t mllama_padded_tile_patches(const ModelConfig& model);

// The image processor's pixel_values of one micro-batch (fp32): (batch, images, max_num_tiles, channels,
// image_size, image_size).
Shape mllama_pixel_values_shape(const ModelConfig& model, const TrainingOptions& options);

// MllamaForConditionalGeneration.forward before the language model: the vision model and the projector on
// ctx.pixel_values, then _prepare_cross_attention_mask. Sets ctx.cross_attention_states,
// ctx.cross_attention_mask and ctx.full_text_row_masked_out_mask (forward locals, released by end_forward).
// Does nothing without pixel_values (a text-only batch).
void mllama_prepare_cross_attention(EmitContext& ctx);

// The MllamaCrossAttentionDecoderLayers that run before the self-attention layer `self_layer` (vramsim's
// index among the language model's self-attention layers; n_layers: after the last), each inside
// torch.utils.checkpoint under --checkpointing full. Returns x itself when none runs there (or the batch is
// text-only: MllamaTextModel.forward skips them); otherwise takes over the caller's reference to x.
VarId mllama_cross_attention_layers(EmitContext& ctx, int self_layer, VarId x);

}  // namespace vramsim
