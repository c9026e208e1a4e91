// predict --generate with --kv-cache paged: vLLM's profile run sizes the block pool, the report answers the
// serving question. Expected values are worked by hand from vLLM's formulas (vllm_paged_cache.h); the one
// figure only the simulation knows, the profile run's peak, is bounded by hand.
#include <catch2/catch.hpp>

#include "sim/core/error.h"
#include "sim/predict/step_prediction.h"

using namespace vramsim;

namespace {

// TinyLlama-1.1B (22 layers, 4 KV heads of head_dim 64, trained context 2048) in bf16 on 24 GiB without a
// CUDA context (--capacity): 4 prompts of 1000 tokens, 25 new tokens.
RequestArgs tinyllama_paged() {
  RequestArgs a;
  a.model = "tinyllama-1.1b";
  a.capacity = "24GiB";
  a.batch = 4;
  a.seq = 1000;
  a.generate = 25;
  a.kv_cache = "paged";
  a.precision = "bf16";
  a.vllm_version = "v0";  // the V0 engine's profile run (the V1 start-up: test_vllm_v1_startup.cpp)
  return a;
}

// Parameters of TinyLlama-1.1B: embeddings and lm_head 32000 x 2048 = 65,536,000 each; per layer q and o
// 2048 x 2048 = 4,194,304 each, k and v 2048 x 256 = 524,288 each, gate/up/down 3 x 2048 x 5632 = 34,603,008,
// two norms 4,096: 44,044,288; x 22 = 968,974,336; final norm 2,048: 1,100,048,384 in all, 2,200,096,768 B in
// bf16.
constexpr std::int64_t kTinyLlamaWeightBytes = 2200096768;

}  // namespace

TEST_CASE("vllm paged: tinyllama on 24 GiB, blocks from the profile run and sequences from the blocks",
          "[quick][predict]") {
  const Prediction p = predict(make_request(tinyllama_paged()));
  REQUIRE(p.generation);
  REQUIRE(p.generation->paged);
  const Prediction::Generation::Paged& v = *p.generation->paged;
  // 2 x 22 x 16 x 4 x 64 x 2 B = 360,448 B per block; / 16 = 22,528 B per token.
  CHECK(v.block_bytes == 360448);
  CHECK(p.generation->kv_bytes_per_token == 22528);
  // vLLM's defaults: max_model_len = the trained context 2048; max_num_batched_tokens = max(2048, 2048).
  CHECK(v.max_model_len == 2048);
  CHECK(v.max_num_batched_tokens == 2048);
  CHECK(v.max_num_seqs == 256);
  CHECK(v.non_torch_bytes == 0);  // --capacity: no CUDA context
  // The profile run holds the weights and at most a few hundred MiB of activations for 256 x 8 tokens.
  CHECK(v.profile_peak_allocated_bytes > kTinyLlamaWeightBytes);
  CHECK(v.profile_peak_allocated_bytes < kTinyLlamaWeightBytes + 512 * 1024 * 1024);
  // 24 GiB x 0.9 = 23,192,823,398.4 B; the blocks are what is left after the profile peak.
  const double budget = 25769803776.0 * 0.9 - static_cast<double>(v.profile_peak_allocated_bytes);
  CHECK(v.num_gpu_blocks == static_cast<std::int64_t>(budget / 360448.0));
  // Bounds by hand: with no activations (23,192,823,398.4 - 2,200,096,768) / 360,448 = 58,240.7; with 512 MiB
  // of them (... - 536,870,912) / 360,448 = 56,751.2.
  CHECK(v.num_gpu_blocks <= 58240);
  CHECK(v.num_gpu_blocks >= 56751);
  // One tensor per layer: the whole pool, num_gpu_blocks x 360,448 B.
  CHECK(p.generation->kv_cache_bytes == v.num_gpu_blocks * 360448);
  // 1000 + 25 - 1 = 1024 cached positions: 64 blocks each; the batch of 4 needs 256.
  CHECK(v.blocks_per_sequence == 64);
  CHECK(v.batch_blocks == 256);
  CHECK(v.concurrent_sequences == v.num_gpu_blocks / 64);
  CHECK(v.concurrent_sequences >= 886);  // 56,751 / 64 = 886.7
  // The pool and the weights are live at the peak, and the run fits in the 10 % vLLM leaves.
  CHECK(p.peak_allocated_bytes > kTinyLlamaWeightBytes + p.generation->kv_cache_bytes);
  CHECK(p.num_ooms == 0);
  CHECK(p.fits);
}

TEST_CASE("vllm paged: a larger profile batch leaves fewer blocks, utilization scales the budget",
          "[quick][predict]") {
  const Prediction base = predict(make_request(tinyllama_paged()));
  RequestArgs a = tinyllama_paged();
  a.max_num_batched_tokens = 8192;  // 256 x 32 dummy tokens: more activation at the profile peak
  const Prediction more = predict(make_request(a));
  CHECK(more.generation->paged->profile_peak_allocated_bytes >
        base.generation->paged->profile_peak_allocated_bytes);
  CHECK(more.generation->paged->num_gpu_blocks < base.generation->paged->num_gpu_blocks);
  a = tinyllama_paged();
  a.gpu_memory_utilization = 0.5;
  const Prediction half = predict(make_request(a));
  // Same profile run; 0.4 x 24 GiB = 10,307,921,510.4 B less budget = 28,597.5 blocks fewer (28,597 or
  // 28,598).
  const std::int64_t fewer = base.generation->paged->num_gpu_blocks - half.generation->paged->num_gpu_blocks;
  CHECK(half.generation->paged->profile_peak_allocated_bytes ==
        base.generation->paged->profile_peak_allocated_bytes);
  CHECK(fewer >= 28597);
  CHECK(fewer <= 28598);
}

TEST_CASE("vllm paged: prompts of different lengths each hold their own blocks", "[quick][predict]") {
  RequestArgs a = tinyllama_paged();
  a.batch = 8;
  a.generate = 10;
  a.prompt_len = std::string("uniform:100..900");
  const Prediction p = predict(make_request(a));
  const std::vector<std::int64_t>& lens = p.generation->prompt_lens;
  REQUIRE(lens.size() == 8);
  std::int64_t longest = 0, blocks = 0;
  for (std::int64_t len : lens) {
    CHECK(len >= 100);
    CHECK(len <= 900);
    longest = std::max(longest, len);
    blocks += (len + 10 - 1 + 15) / 16;  // ceil((prompt + 10 - 1) / 16)
  }
  CHECK(p.generation->prompt_tokens == longest);
  CHECK(p.generation->paged->batch_blocks == blocks);
  CHECK(p.generation->paged->blocks_per_sequence == (longest + 9 + 15) / 16);
  // seed 0: the same lengths every time
  CHECK(parse_prompt_len("uniform:100..900", 8).per_sequence == lens);
  CHECK(parse_prompt_len("uniform:7..7", 3).per_sequence == std::vector<std::int64_t>{7, 7, 7});
  CHECK(parse_prompt_len("512", 3).longest == 512);
  CHECK(parse_prompt_len("512", 3).per_sequence.empty());
}

TEST_CASE("vllm paged: bad values are one-line errors naming the option", "[quick][predict]") {
  RequestArgs a = tinyllama_paged();
  a.block_size = 0;
  CHECK_THROWS_WITH(make_request(a), Catch::StartsWith("--block-size: must be in 1.."));
  a = tinyllama_paged();
  a.gpu_memory_utilization = 1.5;
  CHECK_THROWS_WITH(make_request(a), Catch::StartsWith("--gpu-memory-utilization: must be in (0, 1]"));
  a = tinyllama_paged();
  a.generate = 0;
  CHECK_THROWS_WITH(make_request(a), Catch::StartsWith("--kv-cache paged: needs --generate"));
  a = tinyllama_paged();
  a.kv_cache = "dynamic";
  a.block_size = 32;
  CHECK_THROWS_WITH(make_request(a), Catch::StartsWith("--gpu-memory-utilization / --block-size"));
  a = tinyllama_paged();
  a.max_num_seqs = -1;  // 0 is the engine's default
  CHECK_THROWS_WITH(make_request(a), Catch::StartsWith("--max-num-seqs: must be in 1.."));
  a = tinyllama_paged();
  a.prompt_len = std::string("uniform:9..3");
  CHECK_THROWS_WITH(make_request(a), Catch::StartsWith("--prompt-len: LO 9 is above HI 3"));
  a.prompt_len = std::string("uniform:abc");
  CHECK_THROWS_WITH(make_request(a), Catch::StartsWith("--prompt-len: expected uniform:LO..HI"));
  a.prompt_len = std::string("uniform:0..5");
  CHECK_THROWS_WITH(make_request(a), Catch::StartsWith("--prompt-len: lengths must be in 1.."));
  a.prompt_len = std::string("abc");
  CHECK_THROWS_WITH(make_request(a), Catch::StartsWith("--seq / --prompt-len: expected a length"));
  a.prompt_len = std::string("0");  // a plain length is checked as --seq always was
  CHECK_THROWS_WITH(make_request(a), Catch::StartsWith("--seq: must be in 1.."));
  // vLLM's own checks: a request longer than max_model_len (2048 for TinyLlama), a batch budget below it
  a = tinyllama_paged();
  a.seq = 2000;
  a.generate = 100;
  CHECK_THROWS_WITH(
      predict(make_request(a)),
      Catch::StartsWith("--max-model-len: prompt + new tokens (2100) exceed max_model_len 2048"));
  a = tinyllama_paged();
  a.max_num_batched_tokens = 1000;
  CHECK_THROWS_WITH(predict(make_request(a)),
                    Catch::StartsWith("--max-num-batched-tokens: 1000 is smaller than max_model_len 2048"));
  // fit varies the batch: drawn lengths belong to one batch
  a = tinyllama_paged();
  a.kv_cache = "dynamic";
  a.prompt_len = std::string("uniform:10..20");
  CHECK_THROWS_WITH(fit(make_request(a), FitVary::kBatch, 0.1), Catch::StartsWith("--prompt-len:"));
  CHECK_THROWS_WITH(fit(make_request(tinyllama_paged()), FitVary::kBatch, 0.1),
                    Catch::StartsWith("--kv-cache paged:"));
}
