// CUB radix-sort temporary storage and the scratch of PyTorch's sort-based backward kernels, worked by hand
// from cub/device/dispatch/dispatch_radix_sort.cuh (InvokeOnesweep, Policy700/800/900, RegBoundScaling)
// and aten/src/ATen/native/cuda/{Indexing.cu, Embedding.cu, EmbeddingBackwardKernel.cu}.
#include <catch2/catch.hpp>

#include "sim/torch/cuda_sort.h"

using namespace vramsim;

namespace {

std::vector<Bytes> allocations(const ScratchScript& s) {
  std::vector<Bytes> out;
  for (const ScratchStep& step : s.steps()) {
    if (step.alloc_bytes > 0) {
      out.push_back(step.alloc_bytes);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("cuda sort: get_num_bits", "[quick][graph]") {
  CHECK(cub_num_bits(0) == 1);
  CHECK(cub_num_bits(1) == 1);
  CHECK(cub_num_bits(2) == 2);
  CHECK(cub_num_bits(255) == 8);
  CHECK(cub_num_bits(256) == 9);
  CHECK(cub_num_bits(9999) == 14);  // a 10,000-token vocabulary's largest row
}

TEST_CASE("cuda sort: SortPairs temporary storage, int64 keys and values", "[quick][graph]") {
  // 8,192 pairs of int64 (batch 32 x ctx 256 token positions), 14 key bits: 2 onesweep passes of 8 bits.
  // Every allocation is rounded up to 256 B and the blob gets 255 B of alignment slack.
  //   bins     = 1 portion x 2 passes x 256 digits x 8 B (64-bit OffsetT)   =  4,096
  //   keys/values second buffers (2 passes, no overwrite): 2 x 8,192 x 8 B = 131,072
  //   counters = 1 x 2 x 4 B = 8 -> 256
  // SM80 (Policy800 onesweep <384 threads, 21 items> scaled to 8-byte pairs: 10 items, 384 threads):
  //   tile 3,840 -> 3 blocks -> lookback 3 x 256 x 4 B = 3,072
  //   4,096 + 3,072 + 131,072 + 256 + 255 = 138,751: what MAGMA27's recording (traces/samples) requested
  CHECK(cub_radix_sort_pairs_temp_bytes(8192, 8, 8, 14, 80) == 138751);
  CHECK(cub_radix_sort_pairs_temp_bytes(8192, 8, 8, 14, 86) == 138751);  // Ada/Ampere consumer: same policy
  // SM90 (Policy900 OnesweepPolicyKey64 <384, 24> for 8-byte values: 12 items): tile 4,608 -> 2 blocks
  //   4,096 + 2,048 + 131,072 + 256 + 255 = 137,727
  CHECK(cub_radix_sort_pairs_temp_bytes(8192, 8, 8, 14, 90) == 137727);
  // SM70 (Policy700 <256, 23>: 11 items, 256 threads): tile 2,816 -> 3 blocks, as SM80
  CHECK(cub_radix_sort_pairs_temp_bytes(8192, 8, 8, 14, 70) == 138751);
  // One pass (8 bits): no second buffers. 1 x 1 x 256 x 8 = 2,048; 3,072; 4 -> 256; + 255 = 5,631
  CHECK(cub_radix_sort_pairs_temp_bytes(8192, 8, 8, 8, 80) == 5631);
  // 64 bits (embedding_dense_backward sorts all of them): 8 passes. bins 8 x 256 x 8 = 16,384;
  // counters 8 x 4 = 32 -> 256: 16,384 + 3,072 + 131,072 + 256 + 255 = 151,039
  CHECK(cub_radix_sort_pairs_temp_bytes(8192, 8, 8, 64, 80) == 151039);
}

TEST_CASE("cuda sort: a single tile asks for one byte", "[quick][graph]") {
  // SingleTilePolicy <256, 19> scaled to 8-byte pairs: 9 items x 256 threads = 2,304 items
  CHECK(cub_radix_sort_pairs_temp_bytes(2304, 8, 8, 14, 80) == 1);
  CHECK(cub_radix_sort_pairs_temp_bytes(2305, 8, 8, 14, 80) > 2305 * 16);
}

TEST_CASE("cuda sort: index_put_ with accumulate sorts the linear index", "[quick][graph]") {
  // weight[token_ids] backward for 8,192 ids into a 10,000-row table (MAGMA27's request order)
  const ScratchScript s = index_put_with_sort_scratch(8192, 10000, 80);
  CHECK(allocations(s) == std::vector<Bytes>{65536, 65536, 65536, 65536, 65536, 138751});
  // the remainder is freed once the linear index exists, and CUB's storage right after the sort
  REQUIRE(s.steps().size() == 8);
  CHECK(s.steps()[2].free_step == 0);
  CHECK(s.steps()[7].free_step == 6);
}

TEST_CASE("cuda sort: embedding_dense_backward", "[quick][graph]") {
  // 3,072 ids or fewer: embedding_backward_feature_kernel, no scratch
  const EmbeddingBackwardScratch small = embedding_dense_backward_scratch(3072, 768, DType::kFloat32, 90);
  CHECK(small.before_grad.steps().empty());
  CHECK(small.after_grad.steps().empty());
  // 8,192 ids of a 768-wide bf16 embedding: sorted, original positions, arange (8 x 8,192 B each) and the
  // 64-bit sort's storage (151,039 B on SM80, see above) before grad_weight; afterwards the per-segment
  // sums in fp32 (acc_type of bfloat16): 8,192 x 768 x 4 = 25,165,824 B.
  const EmbeddingBackwardScratch e = embedding_dense_backward_scratch(8192, 768, DType::kBFloat16, 80);
  CHECK(allocations(e.before_grad) == std::vector<Bytes>{65536, 65536, 65536, 151039});
  const std::vector<Bytes> after = allocations(e.after_grad);
  REQUIRE(after.size() == 10);
  CHECK(after.front() == 65536);  // segment_offsets
  CHECK(after[1] == 8);           // num_of_segments_tensor
  CHECK(after[2] == 65536);       // unique_by_key's keys_out
  CHECK(after.back() == 25165824);
}

TEST_CASE("cuda sort: index_put_ with a host index tensor and strided values", "[quick][graph]") {
  // logits.view(-1, 10000)[torch.arange(512), targets] backward on an H100 (Indexing.cu
  // computeLinearIndex, index_put_with_sort_kernel): the host arange's device copy (the linear index), the
  // device index's remainder and product (freed once added), the strided gradient made contiguous, sorted
  // and original positions, the range, and CUB's storage: 512 items fit one tile, 1 byte.
  const ScratchScript s = index_put_with_sort_scratch(512, 512 * 10000, 90, 1, 20'480'000);
  CHECK(allocations(s) == std::vector<Bytes>{4096, 4096, 4096, 20'480'000, 4096, 4096, 4096, 1});
  REQUIRE(s.steps().size() == 11);      // 8 allocations; frees of the remainder, the product, CUB's storage
  CHECK(s.steps()[3].free_step == 1);   // the remainder
  CHECK(s.steps()[4].free_step == 2);   // the product, added into the linear index
  CHECK(s.steps()[10].free_step == 9);  // CUB's storage, when the sort returns
}
