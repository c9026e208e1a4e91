// Follows setReduceConfig / ReduceConfig in aten/src/ATen/native/cuda/Reduce.cuh (PyTorch 2.x), for the
// sum kernels (vt0 = 4, input vectors of 4): the iterator's dimensions, the block shape, then whether the
// inputs of one output are split across blocks (global reduction).
#include "sim/torch/cuda_reduce.h"

#include <algorithm>

#include <fmt/format.h>

#include "sim/core/assert.h"
#include "sim/core/error.h"

namespace vramsim {
namespace {

constexpr std::int64_t kMaxReduceThreads = 512;  // max_reduce_threads() for every non-complex dtype
constexpr std::int64_t kInputVecSize =
    4;  // = vt0 for sum, so setReduceConfig's `vt0 >= input_vec_size` holds
constexpr std::int64_t kWarpSize = 32;
constexpr std::int64_t kMinValuesPerThread = 16;
constexpr std::int64_t kMaxValuesPerThread = 256;

std::int64_t div_up(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// floor(log2(n)) as a power of two, at least 1 (Reduce.cuh last_pow2).
std::int64_t last_pow2(std::int64_t n) {
  std::int64_t p = 1;
  while (p * 2 <= n) {
    p *= 2;
  }
  return p;
}

// One dimension of the TensorIterator after size-1 dimensions are dropped and neighbours of the same kind
// are coalesced (a contiguous input coalesces them all).
struct IterDim {
  std::int64_t size = 1;
  std::int64_t stride = 1;  // elements
  bool reduced = false;
};

}  // namespace

ReduceStaging cuda_reduce_staging(const std::vector<std::int64_t>& input_shape,
                                  const std::vector<std::int64_t>& output_shape, DType dtype,
                                  const CudaDevice& device, MemoryOrder order, Bytes acc_override) {
  SIM_ASSERT(output_shape.size() <= input_shape.size());
  // In memory order, outermost first: the same rank for both, the missing leading dimensions reduced.
  std::vector<std::int64_t> input = input_shape;
  std::vector<std::int64_t> output(input_shape.size() - output_shape.size(), 1);
  output.insert(output.end(), output_shape.begin(), output_shape.end());
  if (order == MemoryOrder::kLastDimOutermost && input.size() > 1) {
    std::rotate(input.rbegin(), input.rbegin() + 1, input.rend());
    std::rotate(output.rbegin(), output.rbegin() + 1, output.rend());
  }
  // Innermost first, as TensorIterator orders them (strides ascending).
  std::vector<IterDim> dims;
  std::int64_t stride = 1;
  for (std::size_t k = input.size(); k-- > 0;) {
    const std::int64_t size = input[k];
    const bool reduced = output[k] == 1;
    if (size != 1) {
      if (!dims.empty() && dims.back().reduced == reduced &&
          dims.back().stride * dims.back().size == stride) {
        dims.back().size *= size;
      } else {
        dims.push_back(IterDim{size, stride, reduced});
      }
    }
    stride *= size;
  }
  std::int64_t num_outputs = 1;
  std::int64_t inputs_per_output = 1;
  std::int64_t num_reduce_dims = 0;
  for (const IterDim& d : dims) {
    (d.reduced ? inputs_per_output : num_outputs) *= d.size;
    num_reduce_dims += d.reduced ? 1 : 0;
  }
  if (inputs_per_output == 1 || num_outputs == 0) {
    return {};  // nothing is reduced: TensorIterator copies (sum_to returns the tensor itself)
  }
  const bool reduce_all = num_reduce_dims == static_cast<std::int64_t>(dims.size());
  // The reduced dimensions go first; the fastest-moving one decides the layout of the block.
  const bool on_fastest = reduce_all || dims.front().reduced;
  std::int64_t dim0 = on_fastest ? inputs_per_output : num_outputs;
  const std::int64_t dim1 = on_fastest ? num_outputs : inputs_per_output;
  std::int64_t output_vec_size = 1;
  if (on_fastest) {
    if (dim0 > 128 && num_reduce_dims == 1) {
      dim0 /= kInputVecSize;  // vectorize along the input
    }
  } else {
    // Vectorize along the output: the widest of 4, 2, 1 dividing the output's inner size and every other
    // input stride (caching-allocator blocks are 512-byte aligned, so the base address never limits it).
    output_vec_size = 4;
    const auto fit = [&](std::int64_t n) {
      while (n % output_vec_size != 0) {
        output_vec_size /= 2;
      }
    };
    std::size_t output_index = 0;
    while (dims[output_index].reduced) {
      ++output_index;
    }
    fit(dims[output_index].size);
    for (std::size_t k = 0; k < dims.size(); ++k) {
      if (k != output_index) {
        fit(dims[k].stride);
      }
    }
    dim0 /= output_vec_size;
  }
  // set_block_dimension
  const std::int64_t max_threads = kMaxReduceThreads / output_vec_size;
  const std::int64_t dim0_pow2 = dim0 < max_threads ? last_pow2(dim0) : max_threads;
  const std::int64_t dim1_pow2 = dim1 < max_threads ? last_pow2(dim1) : max_threads;
  std::int64_t block_width = std::min(dim0_pow2, kWarpSize);
  const std::int64_t block_height = std::min(dim1_pow2, max_threads / block_width);
  block_width = std::min(dim0_pow2, max_threads / block_height);
  const std::int64_t num_threads = block_width * block_height;

  std::int64_t step_input = 1;
  std::int64_t step_output = 1;
  (on_fastest ? step_input : step_output) *= block_width;  // lanes split the input, or the outputs
  const auto values_per_thread = [&] { return div_up(inputs_per_output, step_input); };
  const bool split_across_warps = values_per_thread() >= std::min(block_height * 16, kMaxValuesPerThread);
  (split_across_warps ? step_input : step_output) *= block_height;

  const std::int64_t blocks_per_sm = device.max_threads_per_sm / num_threads;
  const std::int64_t target_grid_size = device.sm_count * blocks_per_sm;
  const std::int64_t grid_x = div_up(num_outputs / output_vec_size, step_output);
  if (!split_across_warps || values_per_thread() < kMaxValuesPerThread || grid_x > target_grid_size) {
    return {};
  }
  const std::int64_t ctas_per_output =
      std::max(std::min(div_up(target_grid_size, grid_x), div_up(values_per_thread(), kMinValuesPerThread)),
               div_up(values_per_thread(), kMaxValuesPerThread));
  if (ctas_per_output <= 1) {
    return {};
  }
  const Bytes acc_bytes = acc_override > 0 ? acc_override : is_floating(dtype) ? 4 : 8;
  // !should_block_x_reduce(): every lane keeps its own partial result.
  const Bytes per_output = on_fastest ? 1 : static_cast<Bytes>(block_width * output_vec_size);
  Bytes buffer = 0;
  if (__builtin_mul_overflow(acc_bytes * per_output, static_cast<Bytes>(num_outputs), &buffer) ||
      __builtin_mul_overflow(buffer, static_cast<Bytes>(ctas_per_output), &buffer)) {
    throw InputError(
        fmt::format("a reduction of {} values to {} outputs needs more than 2^64 bytes of staging",
                    inputs_per_output, num_outputs));
  }
  return ReduceStaging{buffer, static_cast<Bytes>(4 * grid_x)};
}

}  // namespace vramsim
