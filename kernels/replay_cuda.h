// The CUDA half of vramsim-replay: a real IReplayDevice (cudaMalloc / cudaFree and the VMM calls, for
// backends cuda-malloc and model) and the async-pool backend. Host-only declarations: no CUDA header here, so
// replay_main.cpp and the host library stay plain C++.
#pragma once

#include "kernels/replay/replay_backend.h"

namespace vramsim::hw {

// make_device (replay_cuda_device.cu) and make_async_pool (replay_cuda_async_pool.cu). Both throw
// NoCudaDevice when cudaGetDeviceCount fails or finds no device (or not enough of them), and
// vramsim::gpu::CudaError when a later CUDA call fails.
CudaHooks cuda_hooks();

}  // namespace vramsim::hw
