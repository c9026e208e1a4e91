#include "sim/vision/llava_next_anyres.h"

#include <cmath>
#include <limits>
#include <tuple>

#include <fmt/format.h>

#include "sim/core/error.h"

namespace vramsim {
namespace {

using Kind = GradRule::Kind;

// Python's int(round(x, 7)): round to seven decimals, then truncate toward zero
std::int64_t int_round7(double x) {
  return static_cast<std::int64_t>(std::trunc(std::nearbyint(x * 1e7) / 1e7));
}

// image_processing_utils.select_best_resolution(original_size=(height, width), possible_resolutions):
// the first pinpoint with the largest effective resolution, ties broken by the least waste
std::pair<std::int64_t, std::int64_t> select_best_resolution(
    const std::vector<std::pair<std::int64_t, std::int64_t>>& pinpoints, std::int64_t height,
    std::int64_t width) {
  std::pair<std::int64_t, std::int64_t> best{0, 0};
  std::int64_t max_effective = 0;
  double min_wasted = std::numeric_limits<double>::infinity();
  for (const auto& [h, w] : pinpoints) {
    const double scale = std::min(static_cast<double>(w) / static_cast<double>(width),
                                  static_cast<double>(h) / static_cast<double>(height));
    const auto down_w = static_cast<std::int64_t>(static_cast<double>(width) * scale);
    const auto down_h = static_cast<std::int64_t>(static_cast<double>(height) * scale);
    const std::int64_t effective = std::min(down_w * down_h, width * height);
    const auto wasted = static_cast<double>(w * h - effective);
    if (effective > max_effective || (effective == max_effective && wasted < min_wasted)) {
      max_effective = effective;
      min_wasted = wasted;
      best = {h, w};
    }
  }
  return best;
}

}  // namespace

AnyresGrid llava_next_anyres_grid(const ModelConfig::VisionPart::Clip& c, std::int64_t height,
                                  std::int64_t width) {
  if (height <= 0 || width <= 0 || c.grid_pinpoints.empty()) {
    throw InputError(
        fmt::format("--image-size {}x{}: llava_next needs an image of at least one pixel", height, width));
  }
  AnyresGrid g;
  std::tie(g.best_height, g.best_width) = select_best_resolution(c.grid_pinpoints, height, width);
  g.tiles_high = g.best_height / c.image_size;  // get_anyres_image_grid_shape: floor division
  g.tiles_wide = g.best_width / c.image_size;
  g.side = c.patches_per_side();
  // unpad_image on the (tiles_high * side) x (tiles_wide * side) feature grid
  const std::int64_t current_h = g.tiles_high * g.side, current_w = g.tiles_wide * g.side;
  const double original_aspect = static_cast<double>(width) / static_cast<double>(height);
  const double current_aspect = static_cast<double>(current_w) / static_cast<double>(current_h);
  g.rows = current_h;
  g.columns = current_w;
  if (original_aspect > current_aspect) {
    const double scale = static_cast<double>(current_w) / static_cast<double>(width);
    const std::int64_t new_height = int_round7(static_cast<double>(height) * scale);
    const std::int64_t padding = (current_h - new_height) / 2;  // Python's // of a non-negative number
    g.rows = current_h - 2 * padding;
  } else {
    const double scale = static_cast<double>(current_h) / static_cast<double>(height);
    const std::int64_t new_width = int_round7(static_cast<double>(width) * scale);
    const std::int64_t padding = (current_w - new_width) / 2;
    g.columns = current_w - 2 * padding;
  }
  return g;
}

VarId llava_next_flatten_pixels(EmitContext& ctx, VarId pixel_values) {
  EagerTape& t = ctx.ops.tape();
  const Shape& s = t.shape(pixel_values);  // (images, patches, channels, side, side)
  const VarId slices = t.view(pixel_values, {s[0] * s[1], s[2], s[3], s[4]}, "pixel_values.slices");
  const VarId flat = ctx.ops.contiguous("pixel_values.cat", slices);  // torch.cat(_pixel_values_list, dim=0)
  t.drop(slices);
  return flat;
}

VarId llava_next_pack_image_features(EmitContext& ctx, VarId projected, const AnyresGrid& grid,
                                     std::int64_t images) {
  TorchOps& ops = ctx.ops;
  EagerTape& t = ops.tape();
  const std::int64_t d = t.shape(projected)[2], side = grid.side;
  const VarId newline = ctx.params.vision.image_newline;
  std::vector<VarId> packed;
  for (std::int64_t i = 0; i < images; ++i) {
    const std::string n = fmt::format("pack_image_features.{}", i);
    // torch.split(...)[i][0] and [i][1:]: views; their backward (select/slice, split) makes a zero-filled
    // gradient of the image's features
    const VarId base = t.view(projected, {side * side, d}, n + ".base", GradRule{Kind::kAlloc});
    const VarId tile_view = t.view(projected, {d, grid.tiles_high, side, grid.tiles_wide, side},
                                   n + ".tiles_permute", GradRule{Kind::kAlloc});
    const VarId tiles_copy = ops.contiguous(n + ".tiles_contiguous", tile_view);  // permute(4,0,2,1,3)
    t.drop(tile_view);
    // flatten(1, 2).flatten(2, 3), then unpad_image's slice: views
    const VarId unpadded = t.view(tiles_copy, {d, grid.rows, grid.columns}, n + ".unpad_image");
    t.drop(tiles_copy);
    // image_newline[:, None, None].expand(d, rows, 1): a view of the parameter
    const VarId nl = t.view(newline, {d, grid.rows, 1}, n + ".image_newline_expand");
    const VarId with_newline = ops.cat_dim(n + ".cat_newline", unpadded, nl, 2);
    t.drop({unpadded, nl});
    const VarId rows = t.view(with_newline, {grid.rows * (grid.columns + 1), d}, n + ".flatten_transpose");
    t.drop(with_newline);
    packed.push_back(ops.cat_dim(n + ".cat_base", base, rows, 0));
    t.drop({base, rows});
  }
  t.drop(projected);
  // LlavaNextModel.forward: torch.cat(image_features, dim=0), one copy of every image's features
  OpCall c;
  c.name = "image_features.cat";
  c.kind = "cat";
  c.inputs = packed;
  c.outputs = {OutputSpec{"", {images * grid.tokens(), d}, t.dtype(packed.front())}};
  c.backward.grads.assign(packed.size(), GradRule{Kind::kPassThrough});  // narrow() views
  const VarId all = t.op1(c);
  for (const VarId v : packed) {
    t.drop(v);
  }
  const VarId out = t.view(all, {images, grid.tokens(), d}, "image_features.per_image");
  t.drop(all);
  return out;
}

}  // namespace vramsim
