// The images of a vision-language model's samples. Part of TrainingOptions
// (sim/training/training_options.h); the CLI parses them in sim/training/training_options.cpp.
#pragma once

#include <cstdint>

namespace vramsim {

// The images of a vision-language model's samples (vision_tower.h): how many per sample, at what side in
// pixels (0: vision_config's image_size), and whether the vision tower is frozen (LLaVA's fine-tune scripts
// and LLaMA-Factory's freeze_vision_tower default: the tower's parameters get requires_grad_(False), the
// projector and the language model train). A text-only model ignores them.
struct VisionInputs {
  std::int64_t images_per_sample = 1;  // --images-per-sample
  std::int64_t image_size = 0;         // --image-size
  bool freeze_tower = true;            // --freeze-vision-tower
};

}  // namespace vramsim
