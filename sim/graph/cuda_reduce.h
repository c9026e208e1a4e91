// What PyTorch's CUDA reduction kernels (sum, mean, ... in aten/src/ATen/native/cuda/Reduce.cuh) allocate
// through the caching allocator besides their output.
//
// gpu_reduce_kernel picks a launch configuration (setReduceConfig) from the reduction's shape and the
// device's SM count and threads per SM. When few outputs each reduce many inputs (the gradient of a bias or
// of a norm weight: a sum over every token), it splits each output's inputs across thread blocks and
// combines their partial results through global memory: a staging buffer of
//   sizeof(acc) x outputs x blocks per output (x block.x x output vector width when the reduction is not
//   on the fastest-moving dimension)
// and one int semaphore per block column, allocated in that order after the output and freed when the
// kernel has been launched.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/core/types.h"
#include "sim/graph/dtype.h"

namespace vramsim {

// The device properties the launch configuration reads (cudaDeviceProp).
struct CudaDevice {
  int sm_count = 132;             // multiProcessorCount (H100 SXM5)
  int max_threads_per_sm = 2048;  // maxThreadsPerMultiProcessor
  int compute_capability = 90;    // major * 10 + minor: selects CUB's tuning policies
};

struct ReduceStaging {
  Bytes buffer_bytes = 0;     // partial results of the blocks (0: no global reduction)
  Bytes semaphore_bytes = 0;  // one int per block column
};

// A reduction of a contiguous tensor of shape `input` to `output` (same rank; 1 where a dimension is
// reduced, leading dimensions missing from `output` are reduced too), as at::sum_to / sum(dims) make it.
// `dtype` is the input's; floats accumulate in fp32 (acc_type), integers and bool in int64.
ReduceStaging cuda_reduce_staging(const std::vector<std::int64_t>& input,
                                  const std::vector<std::int64_t>& output, DType dtype,
                                  const CudaDevice& device);

}  // namespace vramsim
