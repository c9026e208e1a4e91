#include "sim/predict/gpu_memory.h"

#include "sim/core/error.h"
#include "sim/engine/gpu_table.h"

namespace vramsim {

GpuMemory gpu_memory(std::string_view name) {
  const GpuSpec& g = find_gpu(name);
  return {std::string(g.name), static_cast<std::int64_t>(g.total_memory_bytes),
          static_cast<std::int64_t>(g.cuda_context_bytes), g.compute_capability};
}

GpuMemory device_memory(std::string_view gpu, std::uint64_t capacity_bytes) {
  if (!gpu.empty()) {
    return gpu_memory(gpu);
  }
  if (capacity_bytes == 0) {
    throw InputError("--capacity: must be positive (or name a GPU with --gpu)");
  }
  return {"", static_cast<std::int64_t>(capacity_bytes), 0, 0};
}

}  // namespace vramsim
