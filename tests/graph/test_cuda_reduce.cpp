// The global-reduction staging buffers of PyTorch's CUDA sum kernels (Reduce.cuh setReduceConfig), worked
// by hand below, and checked against what MAGMA27's recording (shared/traces/real, an H100, 132 SMs x 2048
// threads) shows for the gradient of every RMSNorm weight: a 3,072-byte sum output followed by a
// 50,331,648-byte and a 24-byte allocation.
#include <catch2/catch.hpp>

#include "sim/torch/cuda_reduce.h"

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

TEST_CASE("cuda reduce: over a last dimension that is outermost in memory (einsum(weight, x) outputs)") {
  // Logits (4, 128, 10000) laid out vocabulary-outermost: in memory order (10000, 512), the reduction is not
  // on the fastest dimension. dim0 = 512 outputs / output_vec_size 4 = 128, dim1 = 10000. Block: max 128
  // threads; width min(128, 32) = 32, height min(128, 128 / 32) = 4. Lanes split outputs (step_output 32);
  // 10000 >= min(4 * 16, 256): warps split inputs (step_input 4, values_per_thread 2500). grid.x =
  // ceil(128 / 32) = 4; target grid 132 x 16 = 2112; ctas_per_output = max(min(ceil(2112 / 4) = 528,
  // ceil(2500 / 16) = 157), ceil(2500 / 256) = 10) = 157. Sum: 4 B x 512 x 157 x (32 x 4) = 41,156,608,
  // semaphores 4 B x 4 = 16 -- the sizes kkaitlyn111_memory_files/memory_ctx128_fullstep.pickle records
  // for the loss's sum (requests 2,065 and 2,066). Max with indices accumulates 16-byte pairs:
  // 164,626,432 (request 2,060).
  const std::vector<std::int64_t> logits{4, 128, 10000};
  const std::vector<std::int64_t> per_token{4, 128, 1};
  const CudaDevice h100{132, 2048};
  const ReduceStaging sum =
      cuda_reduce_staging(logits, per_token, DType::kFloat32, h100, MemoryOrder::kLastDimOutermost);
  CHECK(sum.buffer_bytes == 41'156'608);
  CHECK(sum.semaphore_bytes == 16);
  CHECK(cuda_reduce_staging(logits, per_token, DType::kFloat32, h100, MemoryOrder::kLastDimOutermost, 16)
            .buffer_bytes == 164'626'432);
  // The same tensor laid out contiguously: 10000 inputs per output on the fastest dimension, 512 outputs;
  // no global reduction.
  CHECK(cuda_reduce_staging(logits, per_token, DType::kFloat32, h100).buffer_bytes == 0);
  // An RMSNorm's sum over d = 2560 of such a gradient: values_per_thread 2560 / 4 = 640, ctas =
  // max(min(528, 40), 3) = 40: 4 x 512 x 40 x 128 = 10,485,760 (request 2,100 of the same recording).
  CHECK(cuda_reduce_staging({4, 128, 2560}, per_token, DType::kFloat32, h100, MemoryOrder::kLastDimOutermost)
            .buffer_bytes == 10'485'760);
}
