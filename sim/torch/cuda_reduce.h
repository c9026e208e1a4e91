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

// How a tensor's dimensions lie in memory. einsum(weight, x, "o i, ... i -> ... o") (weight first) runs one
// bmm of weight x x^T and returns its result permuted back: the last dimension is the outermost in memory
// (strides (s, 1, b*s) for a (b, s, o) output). Elementwise ops pass the layout on (TensorIterator keeps
// the first operand's strides), and a reduction over such a last dimension is not over the fastest-moving
// one, which is what decides whether Reduce.cuh stages partial results in global memory.
enum class MemoryOrder : std::uint8_t { kContiguous, kLastDimOutermost };

// A reduction of a tensor of shape `input`, laid out as `order` says, to `output` (1 where a dimension is
// reduced; leading dimensions missing from `output` are reduced too), as at::sum_to / sum(dims) / max(dim)
// make it. `dtype` is the input's; floats accumulate in fp32 (acc_type), integers and bool in int64;
// `acc_bytes` overrides the accumulator's size (max/min with indices: thrust::pair<float, int64_t>, 16).
ReduceStaging cuda_reduce_staging(const std::vector<std::int64_t>& input,
                                  const std::vector<std::int64_t>& output, DType dtype,
                                  const CudaDevice& device, MemoryOrder order = MemoryOrder::kContiguous,
                                  Bytes acc_bytes = 0);

}  // namespace vramsim
