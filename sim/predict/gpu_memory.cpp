#include "sim/predict/gpu_memory.h"

#include "sim/engine/gpu_table.h"

namespace vramsim {

GpuMemory gpu_memory(std::string_view name) {
  const GpuSpec& g = find_gpu(name);
  return {std::string(g.name), static_cast<std::int64_t>(g.total_memory_bytes),
          static_cast<std::int64_t>(g.cuda_context_bytes), g.compute_capability};
}

}  // namespace vramsim
