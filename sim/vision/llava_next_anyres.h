// LLaVA-NeXT's (LLaVA-1.6's) "anyres" images, as transformers tiles and packs them
// (models/llava_next/modeling_llava_next.py: get_anyres_image_grid_shape, image_size_to_num_patches,
// unpad_image, LlavaNextModel.get_image_features and pack_image_features; image_processing_utils.py:
// select_best_resolution; processing_llava_next.py: LlavaNextProcessor._get_number_of_features).
//
// An image of height x width pixels is resized into the best of image_grid_pinpoints (the resolution that
// keeps most of its pixels, then wastes least), cut into tiles of vision_config.image_size, and the whole
// image resized to one more tile (the base image): every tile goes through the CLIP tower as one batch item.
// The tiles' features are laid out as one grid, the padding the resize added is cut off again (unpad_image),
// one image_newline vector ends each row, and the base image's features come first: the image becomes
// side^2 + rows x (columns + 1) tokens of the language model (side = image_size / patch_size).
#pragma once

#include <cstdint>

#include "sim/models/transformer_parts.h"

namespace vramsim {

// One image after LlavaNextImageProcessor, and what pack_image_features makes of it.
struct AnyresGrid {
  std::int64_t best_height = 0, best_width = 0;  // select_best_resolution's pinpoint, pixels
  std::int64_t tiles_high = 0, tiles_wide = 0;   // get_anyres_image_grid_shape
  std::int64_t side = 0;                         // features per tile side: image_size / patch_size
  std::int64_t rows = 0, columns = 0;            // the tile grid's features after unpad_image
  // image_size_to_num_patches: the tiles and the base image, the tower's batch items for this image
  std::int64_t patches() const { return tiles_high * tiles_wide + 1; }
  // LlavaNextProcessor's image tokens: the base image's side^2 (CLS dropped), then rows of columns + 1
  // (image_newline)
  std::int64_t tokens() const { return side * side + rows * (columns + 1); }
};

// select_best_resolution, get_anyres_image_grid_shape and unpad_image's arithmetic (Python's float division,
// int() truncation and round(x, 7)) for an image of `height` x `width` pixels. Throws InputError for a size
// of zero.
AnyresGrid llava_next_anyres_grid(const ModelConfig::VisionPart::Clip& c, std::int64_t height,
                                  std::int64_t width);

// torch.cat of the pix_val[:num_patch] slices of the 5-D pixel_values (images, patches, channels, side,
// side): a copy, fp32, before the tower.
VarId llava_next_flatten_pixels(EmitContext& ctx, VarId pixel_values);

// pack_image_features and LlavaNextModel.forward's torch.cat on the projector's output (images x patches,
// side^2, d_model): per image the tiles' permute(...).contiguous() copy, unpad_image's slice, the cat with
// image_newline, the cat with the base image; then one cat of all images. Returns (images, tokens, d_model),
// a view of that cat (merge_image_features does not copy it again). Takes over `projected`.
VarId llava_next_pack_image_features(EmitContext& ctx, VarId projected, const AnyresGrid& grid,
                                     std::int64_t images);

}  // namespace vramsim
