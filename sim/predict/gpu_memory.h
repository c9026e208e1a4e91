// The GPU table's memory figures for predict/fit: name, total and CUDA context, in the integer bytes the
// reports use.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace vramsim {

struct GpuMemory {
  std::string name;            // canonical name, e.g. "H100-80GB"
  std::int64_t total_bytes;    // cudaMemGetInfo's total
  std::int64_t context_bytes;  // CUDA context estimate, outside the allocator
  int compute_capability;      // major * 10 + minor
};

// Throws InputError listing the known GPUs when `name` matches none.
GpuMemory gpu_memory(std::string_view name);

}  // namespace vramsim
