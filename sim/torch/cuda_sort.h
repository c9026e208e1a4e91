// What PyTorch's sort-based CUDA kernels allocate through the caching allocator besides their output: the
// backward of advanced indexing (index_put_ with accumulate, aten/src/ATen/native/cuda/Indexing.cu) and of
// nn.Embedding (embedding_dense_backward_cuda, Embedding.cu + EmbeddingBackwardKernel.cu). Both sort the
// indices with CUB's DeviceRadixSort::SortPairs, whose temporary storage PyTorch's CUB_WRAPPER takes from the
// caching allocator for the duration of the call.
//
// The kernels are described as scratch scripts: the allocations and frees in the order the C++ code makes
// them, so the allocator sees the same request sequence as on a GPU.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/core/types.h"
#include "sim/graph/dtype.h"

namespace vramsim {

// One step of a scratch script: allocate `alloc_bytes` (> 0), or free the allocation made at step
// `free_step` of the same script.
struct ScratchStep {
  Bytes alloc_bytes = 0;
  int free_step = -1;
};

// Builds a scratch script. Allocations the script does not free live until the kernel returns.
class ScratchScript {
 public:
  int alloc(Bytes size_bytes);  // returns the step's handle, for free()
  void free(int handle);
  const std::vector<ScratchStep>& steps() const { return m_steps; }

 private:
  std::vector<ScratchStep> m_steps;
};

// cub::DeviceRadixSort::SortPairs temporary storage (temp_storage_bytes) for `num_items` pairs, sorting bits
// [0, num_bits), on a device of `compute_capability` (major * 10 + minor), as CUB's DispatchRadixSort sizes
// it: a single-tile sort asks for 1 byte; otherwise the onesweep algorithm (every policy from SM70 on
// sorts keys of 4 bytes and more with it) keeps digit histograms, the look-back tile state and, with more
// than one pass, second key and value buffers (PyTorch's calls never allow overwriting the input).
// The offset type is 64-bit: PyTorch passes num_items as int64_t and CUB's choose_offset_t widens to it.
Bytes cub_radix_sort_pairs_temp_bytes(std::int64_t num_items, int key_bytes, int value_bytes, int num_bits,
                                      int compute_capability);

// at::cuda::cub::get_num_bits(max_key): the bits a radix sort of keys in [0, max_key] needs.
int cub_num_bits(std::int64_t max_key);

// index_put_(indices, values, accumulate=True) on CUDA, as the backward of x[index] runs it
// (index_put_with_sort_kernel): the linear index (remainder, then times the row stride), the sorted and
// original positions, an arange, and the radix sort's temporary storage.
// `num_indices`: elements of the index tensor; `rows`: x.size(0), or, where several leading dimensions are
// indexed, their product (the largest linear index + 1). `host_indices`: index tensors on the host before
// the device one (x[torch.arange(n), targets]): computeLinearIndex does their arithmetic on the CPU and
// copies each to the device, the first copy becoming the linear index the device index is added into.
// `values_copy_bytes`: the values (the incoming gradient) when they are not contiguous: the kernel makes them
// contiguous after the linear index, before sorting.
ScratchScript index_put_with_sort_scratch(std::int64_t num_indices, std::int64_t rows, int compute_capability,
                                          int host_indices = 0, Bytes values_copy_bytes = 0);

// embedding_dense_backward_cuda for more than 3,072 indices (fewer take a kernel with no scratch): before
// grad_weight is allocated, the sort (sorted and original positions, an arange, CUB's temporary storage);
// after it, embedding_backward_cuda_kernel's segment bookkeeping and the per-partial-segment sums
// (`num_indices` x `embedding_dim`, fp32 for 16-bit gradients).
struct EmbeddingBackwardScratch {
  ScratchScript before_grad;
  ScratchScript after_grad;
};
EmbeddingBackwardScratch embedding_dense_backward_scratch(std::int64_t num_indices,
                                                          std::int64_t embedding_dim, DType grad_dtype,
                                                          int compute_capability);

}  // namespace vramsim
