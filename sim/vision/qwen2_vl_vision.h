// Qwen2-VL's and Qwen2.5-VL's vision part, run the way transformers runs it (models/qwen2_vl/
// modeling_qwen2_vl.py: Qwen2VisionTransformerPretrainedModel, Qwen2VLVisionBlock, VisionAttention,
// PatchMerger; models/qwen2_5_vl/modeling_qwen2_5_vl.py: Qwen2_5_VisionTransformerPretrainedModel with
// get_window_index and fullatt_block_indexes, Qwen2_5_VLVisionBlock, Qwen2_5_VLPatchMerger), and the image
// processor's dynamic resolution (models/qwen2_vl/image_processing_qwen2_vl.py, smart_resize).
//
// An image of height x width pixels is resized by smart_resize to multiples of patch_size x
// spatial_merge_size (28) with min_pixels <= h x w <= max_pixels, cut into (h / 14) x (w / 14) patches of
// temporal_patch_size x 14 x 14 pixels (an image is repeated to fill the two frames), and becomes
// (h / 14) x (w / 14) / 4 tokens of the language model after the PatchMerger. Every patch of every image in
// the micro-batch is one row of pixel_values; the tower runs them as one sequence with attention inside each
// image (cu_seqlens), or inside each window of 112 x 112 pixels in 2.5-VL's window-attention blocks.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/models/transformer_parts.h"

namespace vramsim {

// One image after Qwen2VLImageProcessor: its resized size in pixels and its patch grid (grid_thw).
struct QwenImageGrid {
  std::int64_t height = 0, width = 0;  // after smart_resize
  std::int64_t grid_t = 1, grid_h = 0, grid_w = 0;
  std::int64_t patches() const { return grid_t * grid_h * grid_w; }
  // Tokens in the language model's sequence: patches / spatial_merge_size^2 (Qwen2VLProcessor expands each
  // <|image_pad|> into this many).
  std::int64_t tokens(std::int64_t merge) const { return patches() / (merge * merge); }
};

// Qwen2VLImageProcessor's defaults for smart_resize's bounds (image_processing_qwen2_vl.py).
inline constexpr std::int64_t kQwenMinPixels = 56 * 56;
inline constexpr std::int64_t kQwenMaxPixels = 28 * 28 * 1280;
// The image size vramsim assumes when --image-size is not given (Qwen2-VL has no fixed size): 448 x 448,
// 256 tokens. An assumption, not a library default: name the real size.
inline constexpr std::int64_t kQwenDefaultImageSide = 448;

// smart_resize(height, width, factor = patch_size * merge, min_pixels, max_pixels) with Python's round
// (half to even), floor and ceil, then the grid (1, h / patch, w / patch). Throws InputError as
// smart_resize raises ValueError for an aspect ratio over 200.
QwenImageGrid qwen2_vl_image_grid(const ModelConfig::VisionPart::Clip& c, std::int64_t height,
                                  std::int64_t width, std::int64_t min_pixels, std::int64_t max_pixels);

// The parameters of the vision transformer and its PatchMerger in model.parameters() order
// ("model.visual.": Qwen2VLModel registers visual before language_model).
void qwen2_vl_vision_parameter_shapes(const ModelConfig& model, std::vector<ParameterShape>& out);

// Qwen2VLModel.get_image_features on ctx.pixel_values (patches x channels * temporal * patch^2, fp32):
// pixel_values.type(visual.dtype), the tower, the merger; (images, tokens per image, d_model). `grid` is
// every image's.
VarId qwen2_vl_image_features(EmitContext& ctx, const VisionParams& p, const QwenImageGrid& grid);

// The window-attention blocks' chunks for one image: (windows, patches per window) groups, at most four
// (whole windows, and the partial ones at the right edge, the bottom edge and the corner), as
// get_window_index cuts the merged grid into windows of window_size / patch / merge merged tokens per side.
struct AttentionChunks {
  std::int64_t chunks = 0;
  std::int64_t length = 0;
};
std::vector<AttentionChunks> qwen2_5_vl_windows(const ModelConfig::VisionPart::Clip& c,
                                                const QwenImageGrid& grid);

}  // namespace vramsim
