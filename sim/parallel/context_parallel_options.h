// Context parallelism's settings (torchtitan's context_parallel). Part of TrainingOptions
// (sim/training/training_options.h); the CLI parses them in sim/training/training_options.cpp.
#pragma once

#include <cstdint>

namespace vramsim {

// torch.distributed.tensor.experimental.context_parallel as torchtitan runs it (context_parallel.h): the
// sequence is split over `degree` ranks (load-balanced: each holds two chunks of seq / (2 x degree)), and
// F.scaled_dot_product_attention becomes ring attention whose key/value rotation is an all-gather (all
// the other ranks' chunks at once) or an all-to-all (one neighbour's chunk per step).
enum class CpRotate : std::uint8_t { kAllGather, kAllToAll };
struct ContextParallelOptions {
  int degree = 1;                          // --cp: context_parallel_degree
  CpRotate rotate = CpRotate::kAllGather;  // torchtitan's context_parallel_rotate_method (default allgather)
};

}  // namespace vramsim
