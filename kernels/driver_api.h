// The CUDA driver API, reached through the runtime (cudaGetDriverEntryPointByVersion) instead of linking
// libcuda: a binary linked against libcuda.so.1 does not even start on a machine without the NVIDIA driver,
// and vramsim-gpu-probe / vramsim-replay must say "no CUDA device" there. cuda.h supplies the types only.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda_check.h"

namespace vramsim::gpu {

// A driver API function by symbol name, for the CUDA version this was compiled against. nullptr (and `error`
// set) when the driver lacks it.
template <typename Fn>
Fn driver_function(const char* symbol, std::string& error) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t status =
      cudaGetDriverEntryPointByVersion(symbol, &fn, CUDA_VERSION, cudaEnableDefault, &found);
  if (status != cudaSuccess || found != cudaDriverEntryPointSuccess || fn == nullptr) {
    error = std::string(symbol) + " is not available from the driver" +
            (status != cudaSuccess ? ": " + cuda_error_text(status) : std::string());
    return nullptr;
  }
  return reinterpret_cast<Fn>(fn);
}

// "CUDA_ERROR_OUT_OF_MEMORY (2)", or "CUresult 2" when the driver cannot name it.
inline std::string cu_result_text(CUresult r) {
  std::string ignored;
  const auto get_name = driver_function<decltype(&cuGetErrorName)>("cuGetErrorName", ignored);
  const char* name = nullptr;
  if (get_name != nullptr && get_name(r, &name) == CUDA_SUCCESS && name != nullptr) {
    return std::string(name) + " (" + std::to_string(static_cast<int>(r)) + ")";
  }
  return "CUresult " + std::to_string(static_cast<int>(r));
}

}  // namespace vramsim::gpu
