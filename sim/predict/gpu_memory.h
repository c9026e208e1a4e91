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

// The device a prediction runs on: the named GPU, or (`gpu` empty) `capacity_bytes` of memory with no CUDA
// context and no name (--capacity). Throws InputError for an unknown GPU or a zero capacity.
GpuMemory device_memory(std::string_view gpu, std::uint64_t capacity_bytes);

}  // namespace vramsim
