// SIM_CUDA_CHECK(expr): run a CUDA runtime call and throw CudaError when it does not return cudaSuccess. The
// message names the call as written, where it is, and CUDA's own words for the error:
//   "kernels/gpu_probe.cu:120: cudaMalloc(&ptr, bytes) failed: out of memory (cudaErrorMemoryAllocation)"
// SIM_CUDA_CHECK_KERNEL() checks the launch that just happened (cudaGetLastError).
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace vramsim::gpu {

class CudaError : public std::runtime_error {
 public:
  CudaError(cudaError_t code, const std::string& message) : std::runtime_error(message), m_code(code) {}
  cudaError_t code() const { return m_code; }

 private:
  cudaError_t m_code;
};

inline std::string cuda_error_text(cudaError_t code) {
  return std::string(cudaGetErrorString(code)) + " (" + cudaGetErrorName(code) + ")";
}

[[noreturn]] inline void throw_cuda_error(cudaError_t code, const char* expr, const char* file, int line) {
  throw CudaError(code, std::string(file) + ":" + std::to_string(line) + ": " + expr +
                            " failed: " + cuda_error_text(code));
}

}  // namespace vramsim::gpu

#define SIM_CUDA_CHECK(expr)                                                               \
  do {                                                                                     \
    const cudaError_t sim_cuda_check_status_ = (expr);                                     \
    if (sim_cuda_check_status_ != cudaSuccess) {                                           \
      ::vramsim::gpu::throw_cuda_error(sim_cuda_check_status_, #expr, __FILE__, __LINE__); \
    }                                                                                      \
  } while (0)

#define SIM_CUDA_CHECK_KERNEL() SIM_CUDA_CHECK(cudaGetLastError())
