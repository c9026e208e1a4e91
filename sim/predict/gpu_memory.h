// The GPU table's memory figures for predict/fit: name, total and CUDA context, in the integer bytes the
// reports use.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "sim/predict/cuda_context.h"

namespace vramsim {

struct GpuMemory {
  std::string name;            // canonical name, e.g. "H100-80GB"
  std::int64_t total_bytes;    // cudaMemGetInfo's total
  std::int64_t context_bytes;  // CUDA context, outside the allocator
  int compute_capability;      // major * 10 + minor
  std::string context_source;  // where context_bytes comes from (cuda_context.h; "--cuda-context" when given)
};

// What the user says about the process's CUDA context: how modules load (--module-loading), or a size they
// measured (--cuda-context, e.g. nvidia-smi's process memory minus torch.cuda.memory_reserved()).
struct ContextOptions {
  ModuleLoading module_loading = ModuleLoading::kLazy;
  std::optional<std::int64_t> context_bytes;
};

// Throws InputError listing the known GPUs when `name` matches none.
GpuMemory gpu_memory(std::string_view name, const ContextOptions& context = {});

// The cuBLAS workspace PyTorch gives each cuBLAS handle (one per thread that runs matmuls) and stream,
// through the caching allocator (aten/src/ATen/cuda/CublasHandlePool.cpp, parseChosenWorkspaceSize): with
// CUBLAS_WORKSPACE_CONFIG (`config`, non-empty) the sum of SIZE KiB x COUNT over its ":SIZE:COUNT" pairs
// (none parsed: PyTorch warns and keeps the default); else 4096 KiB x 2 + 16 KiB x 8 = 8 MiB + 128 KiB, and
// 32 MiB on compute capability 9.x to 12.x (Hopper, Blackwell). `compute_capability` is major * 10 + minor.
// Throws InputError naming --cublas-workspace-config when the sum is absurd (over 64 GiB).
std::int64_t cublas_workspace_bytes(int compute_capability, std::string_view config);

// The device a prediction runs on: the named GPU, or (`gpu` empty) `capacity_bytes` of memory with no CUDA
// context and no name (--capacity). Throws InputError for an unknown GPU or a zero capacity.
GpuMemory device_memory(std::string_view gpu, std::uint64_t capacity_bytes,
                        const ContextOptions& context = {});

// What the caching allocator may reserve on `d`: its memory less the CUDA context, and no more than
// floor(per_process_memory_fraction x total) when the fraction (`fraction` > 0) is set:
// torch.cuda.set_per_process_memory_fraction takes that share of cudaMemGetInfo's total, context included,
// and the allocator fails a cudaMalloc that would reserve more (CUDACachingAllocator.cpp, alloc_block).
std::int64_t allocator_limit_bytes(const GpuMemory& d, double fraction);

// The --alloc-conf per_process_memory_fraction a prediction runs with, 0 when unset. PyTorch accepts 0 (every
// cudaMalloc then fails), which leaves a prediction nothing to run: InputError naming the device total.
double predicted_memory_fraction(std::optional<double> fraction, const GpuMemory& d);

}  // namespace vramsim
