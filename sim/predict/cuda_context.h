// The GPU memory a PyTorch process holds outside the caching allocator: the CUDA context (driver state, the
// per-context local-memory reservation) and the kernel images loaded into it. It depends on the GPU and on
// how CUDA loads modules: lazily (only kernels that run; PyTorch >= 1.13 sets CUDA_MODULE_LOADING=LAZY, and
// drivers of CUDA >= 12.2 default to it) or eagerly (every kernel of every library at context creation:
// CUDA < 11.7, PyTorch <= 1.12, or CUDA_MODULE_LOADING=EAGER).
//
// Every figure names its source; `measured` is false for estimates. NCCL (torch.distributed) adds its own
// buffers on top and is not included.
#pragma once

#include <string_view>

#include "sim/core/types.h"

namespace vramsim {

enum class ModuleLoading : std::uint8_t { kLazy, kEager };

struct CudaContextFigure {
  Bytes size_bytes = 0;
  bool measured = false;    // a published measurement (else an estimate, derived as `source` says)
  std::string_view source;  // where the figure comes from
};

// For a GPU table row's canonical name (gpu_table.h). Throws InputError for a name without a figure.
CudaContextFigure cuda_context(std::string_view canonical_gpu, ModuleLoading loading);

// "lazy" | "eager"; throws InputError naming `option` otherwise.
ModuleLoading parse_module_loading(std::string_view text, std::string_view option = "--module-loading");
std::string_view module_loading_name(ModuleLoading loading);

}  // namespace vramsim
