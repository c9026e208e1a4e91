// The global-reduction staging buffers of PyTorch's CUDA sum kernels (Reduce.cuh setReduceConfig), worked
// by hand below, and checked against what MAGMA27's recording (shared/traces/real, an H100, 132 SMs x 2048
// threads) shows for the gradient of every RMSNorm weight: a 3,072-byte sum output followed by a
// 50,331,648-byte and a 24-byte allocation.
#include <catch2/catch.hpp>

#include "sim/graph/cuda_reduce.h"

using namespace vramsim;

TEST_CASE("cuda reduce: a norm weight's gradient (sum over 32 x 256 tokens of 768 columns) on an H100") {
  // Not on the fastest dimension: dim0 = 768 outputs / output_vec_size 4 = 192, dim1 = 8192 inputs.
  // Block: max 512 / 4 = 128 threads; width min(128, 32) = 32, height min(128, 128 / 32) = 4.
  // Lanes split outputs (step_output 32); values_per_thread 8192 >= min(4 * 16, 256): warps split inputs
  // (step_input 4, values_per_thread 2048). grid.x = ceil(192 / 32) = 6; target grid 132 x (2048 / 128) =
  // 2112; ctas_per_output = max(min(ceil(2112 / 6) = 352, ceil(2048 / 16) = 128), ceil(2048 / 256) = 8) =
  // 128. Buffer 4 B x 768 x 128 x (32 x 4) = 50,331,648; semaphores 4 B x 6 = 24.
  const ReduceStaging s = cuda_reduce_staging({32, 256, 768}, {768}, DType::kFloat32, CudaDevice{132, 2048});
  CHECK(s.buffer_bytes == 50'331'648);
  CHECK(s.semaphore_bytes == 24);
}

TEST_CASE("cuda reduce: reductions that stay inside one block allocate nothing") {
  // rms = x.pow(2).mean(-1): 768 inputs per output on the fastest dimension, 8192 outputs: values_per_thread
  // after lanes (32) and warps (16) split is ceil(768 / 512) = 2 < 256, no global reduction.
  CHECK(cuda_reduce_staging({32, 256, 768}, {32, 256, 1}, DType::kFloat32, CudaDevice{}).buffer_bytes == 0);
  // Nothing reduced: no kernel.
  CHECK(cuda_reduce_staging({4, 8}, {4, 8}, DType::kFloat32, CudaDevice{}).buffer_bytes == 0);
}

TEST_CASE("cuda reduce: the staging buffer follows the GPU's SM count") {
  // Same sum on an A100 (108 SMs x 2048): target grid 108 x 16 = 1728, ctas = max(min(288, 128), 8) = 128:
  // the same buffer (bounded by values per thread, not by the SMs).
  CHECK(cuda_reduce_staging({32, 256, 768}, {768}, DType::kFloat32, CudaDevice{108, 2048}).buffer_bytes ==
        50'331'648);
  // A T4 (40 SMs x 1024): target 40 x 8 = 320, ctas = max(min(ceil(320 / 6) = 54, 128), 8) = 54:
  // 4 x 768 x 54 x 128 = 21,233,664.
  CHECK(cuda_reduce_staging({32, 256, 768}, {768}, DType::kFloat32, CudaDevice{40, 1024}).buffer_bytes ==
        21'233'664);
}
