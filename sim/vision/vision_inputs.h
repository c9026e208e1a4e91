// The images of a vision-language model's samples. Part of TrainingOptions
// (sim/training/training_options.h); the CLI parses them in sim/training/training_options.cpp.
#pragma once

#include <cstdint>

namespace vramsim {

// The images of a vision-language model's samples (vision_tower.h): how many per sample, at what size in
// pixels (0: vision_config's image_size; qwen2_vl's dynamic resolution takes any height x width), and whether
// the vision tower is frozen (LLaVA's fine-tune scripts and LLaMA-Factory's freeze_vision_tower default: the
// tower's parameters get requires_grad_(False), the projector and the language model train). A text-only
// model ignores them.
struct VisionInputs {
  std::int64_t images_per_sample = 1;  // --images-per-sample
  std::int64_t image_size = 0;         // --image-size N or HxW: the height (0: the model's default)
  std::int64_t image_width = 0;        // --image-size HxW: the width (0: square, image_size)
  // Qwen2VLImageProcessor's min_pixels / max_pixels bounds of smart_resize (0: the class defaults,
  // 56 * 56 and 28 * 28 * 1280): --image-min-pixels, --image-max-pixels
  std::int64_t min_pixels = 0;
  std::int64_t max_pixels = 0;
  bool freeze_tower = true;  // --freeze-vision-tower
};

}  // namespace vramsim
