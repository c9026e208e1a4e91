// The GPU table's memory figures for predict/fit, behind a header that does not include
// sim/engine/gpu_table.h: its DType (compute precision) clashes with sim/graph/dtype.h's storage DType.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace vramsim {

struct GpuMemory {
  std::string name;            // canonical name, e.g. "H100-80GB"
  std::int64_t total_bytes;    // cudaMemGetInfo's total
  std::int64_t context_bytes;  // CUDA context estimate, outside the allocator
};

// Throws InputError listing the known GPUs when `name` matches none.
GpuMemory gpu_memory(std::string_view name);

}  // namespace vramsim
