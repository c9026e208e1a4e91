// vLLM's paged KV cache (sim/inference/vllm_paged_cache.h): the sizing arithmetic and the cache on the tape,
// every expected value worked by hand from vLLM's formulas; and transformers' left-padded batches of
// prompts of different lengths.
#include <catch2/catch.hpp>

#include "graph_test_util.h"
#include "sim/core/error.h"
#include "sim/models/transformer_builder.h"
#include "sim/inference/vllm_paged_cache.h"

using namespace vramsim;

namespace {

// tiny_model: 2 layers, 4 key/value heads of head_dim 16, vocab 1000; batch 2, prompt 8, 4 new tokens, bf16.
TrainingOptions paged_generation(std::int64_t num_blocks) {
  TrainingOptions o;
  o.batch = 2;
  o.seq = 8;
  o.generate_tokens = 4;
  o.kv_cache = "paged";
  o.block_size = 16;
  o.num_gpu_blocks = num_blocks;
  o.inference = true;
  o.precision = Precision::kBf16;
  o.cublas_workspace_bytes = 0;
  return o;
}

using test::sizes_named;

}  // namespace

TEST_CASE("vllm paged cache: block bytes are 2 x layers x block_size x kv_heads x head_dim x dtype bytes",
          "[quick][graph]") {
  // TinyLlama-1.1B: 22 layers, 4 KV heads, head_dim 64, bf16: 2 x 22 x 16 x 4 x 64 x 2 = 360,448 B per block,
  // 22,528 B per token.
  CHECK(vllm_cache_block_bytes(22, 4, 64, 16, DType::kBFloat16) == 360448);
  // Llama-3-8B: 32 layers, 8 KV heads, head_dim 128: 2 x 32 x 16 x 8 x 128 x 2 = 2,097,152 B (2 MiB).
  CHECK(vllm_cache_block_bytes(32, 8, 128, 16, DType::kBFloat16) == 2097152);
  // Llama-2-7B: 32 KV heads: 2 x 32 x 16 x 32 x 128 x 2 = 8,388,608 B (8 MiB); block_size 32 doubles it.
  CHECK(vllm_cache_block_bytes(32, 32, 128, 16, DType::kBFloat16) == 8388608);
  CHECK(vllm_cache_block_bytes(32, 32, 128, 32, DType::kBFloat16) == 16777216);
  // fp32 caches twice the bf16 bytes
  CHECK(vllm_cache_block_bytes(22, 4, 64, 16, DType::kFloat32) == 720896);
}

TEST_CASE("vllm paged cache: blocks = floor((total x utilization - peak - non-torch) / block bytes)",
          "[quick][graph]") {
  // 80 GiB x 0.9 = 72 GiB; minus 20 GiB + 1 MiB of weights, activations and context = 52 GiB - 1 MiB; in 2
  // MiB blocks (Llama-3-8B): 26,624 - 0.5 -> 26,623.
  CHECK(vllm_num_gpu_blocks(80 * kGiB, 0.9, 20 * kGiB + kMiB, 2097152) == 26623);
  // 24 GiB x 0.9 = 21.6 GiB; minus 13 GiB = 8.6 GiB = 9,234,179,686.4 B; / 8 MiB (Llama-2-7B) = 1,100.8 ->
  // 1,100.
  CHECK(vllm_num_gpu_blocks(24 * kGiB, 0.9, 13 * kGiB, 8388608) == 1100);
  // nothing left: 0 blocks (vLLM then refuses to start), never negative
  CHECK(vllm_num_gpu_blocks(24 * kGiB, 0.5, 13 * kGiB, 8388608) == 0);
  // a sequence holds ceil(tokens / block_size) blocks
  CHECK(vllm_blocks_for_tokens(4096, 16) == 256);
  CHECK(vllm_blocks_for_tokens(4097, 16) == 257);
  CHECK(vllm_blocks_for_tokens(1, 16) == 1);
  CHECK(vllm_blocks_for_tokens(32768, 16) == 2048);
}

TEST_CASE("vllm paged cache: one block tensor per layer, allocated once, written in place",
          "[quick][graph]") {
  // 10 blocks of 16 tokens: (2, 10, 16, 4, 16) bf16 = 2 x 10 x 16 x 4 x 16 x 2 = 40,960 B per layer; 2
  // layers: 81,920 B whatever the batch, prompt and new tokens.
  const OpGraph g = build_training_steps(test::tiny_model("llama-2-7b"), paged_generation(10));
  CHECK(g.kv_cache_bytes == 81920);
  CHECK(sizes_named(g, "layers.0.vllm_kv_cache") == std::vector<Bytes>{40960});
  CHECK(sizes_named(g, "layers.1.vllm_kv_cache") == std::vector<Bytes>{40960});
  // no torch.cat, no StaticCache zeros
  CHECK(sizes_named(g, "layers.0.kv_cache.cat_key").empty());
  CHECK(sizes_named(g, "layers.0.static_cache.key").empty());
  Bytes cache = 0;
  for (const Tensor& t : g.tensors()) {
    if (t.category == TensorCategory::kKvCache) {
      cache += t.size_bytes;
    }
  }
  CHECK(cache == 81920);  // the block tensors are the only cache tensors
  test::check_schedule_invariants(g, build_allocation_schedule(g));
  // The profile run's empty caches: nothing allocated.
  CHECK(build_training_steps(test::tiny_model("llama-2-7b"), paged_generation(0)).kv_cache_bytes == 0);
}

TEST_CASE("vllm paged cache: options are checked", "[quick][graph]") {
  TrainingOptions o = paged_generation(10);
  o.block_size = 0;
  CHECK_THROWS_WITH(validate(o), Catch::StartsWith("--block-size: must be in 1.."));
  o.block_size = 4096;
  CHECK_THROWS_WITH(validate(o), Catch::StartsWith("--block-size: must be in 1.."));
  o = paged_generation(10);
  o.generate_tokens = 0;
  o.inference = true;
  CHECK_THROWS_WITH(validate(o), Catch::StartsWith("--kv-cache paged: needs --generate"));
  o = paged_generation(10);
  o.prompt_lens = {3, 4, 5};  // three lengths, batch 2
  CHECK_THROWS_WITH(validate(o), Catch::StartsWith("--prompt-len:"));
}

TEST_CASE("generate: a left-padded batch is sized by its longest prompt and builds the padding mask",
          "[quick][graph]") {
  // Prompts of 5 and 8 tokens: transformers pads the batch to 8 (padding_side="left"), so the dynamic cache
  // holds 8 + 4 - 1 = 11 positions per sequence as for two 8-token prompts: 2 x 2 layers x 2 x 4 x 11 x 16 x
  // 2 B = 11,264 B.
  TrainingOptions o = paged_generation(0);
  o.kv_cache = "dynamic";
  o.attention = AttentionKind::kSdpa;
  o.compute_capability = 80;
  const OpGraph even = build_training_steps(test::tiny_model("llama-2-7b"), o);
  o.prompt_lens = {5, 8};
  const OpGraph padded = build_training_steps(test::tiny_model("llama-2-7b"), o);
  CHECK(padded.kv_cache_bytes == 11264);
  CHECK(even.kv_cache_bytes == 11264);
  // The 2D attention_mask has zeros, so the 4D mask is built at every forward: the prefill's (2, 1, 8, 8) and
  // the decode steps' (2, 1, 1, 9 | 10 | 11) in bf16 = 256, then 36, 40, 44 B; without padding, none.
  CHECK(sizes_named(padded, "causal_mask.clone") == std::vector<Bytes>{256, 36, 40, 44});
  // SDPA's _unmask_unattended rebinds the mask to a product of the same size: (mask == min) bools of 128,
  // then 18, 20, 22 B; the (2, 1, s, 1) row bools of 16, then 2 B.
  CHECK(sizes_named(padded, "causal_mask.unmask_unattended") == std::vector<Bytes>{256, 36, 40, 44});
  CHECK(sizes_named(padded, "causal_mask.unmask_eq") == std::vector<Bytes>{128, 18, 20, 22});
  CHECK(sizes_named(padded, "causal_mask.unmask_all") == std::vector<Bytes>{16, 2, 2, 2});
  CHECK(sizes_named(even, "causal_mask.clone").empty());
  test::check_schedule_invariants(padded, build_allocation_schedule(padded));
}
