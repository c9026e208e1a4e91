// vLLM's V1 engine start-up (sim/inference/vllm_v1_startup.h, sim/serving/vllm_v1_sizing.h): each expected
// value is worked by hand below from vLLM's source (file and function named at each check). Public start-up
// logs are compared in docs/serving.md with their errors, not asserted here.
#include <catch2/catch.hpp>

#include <cmath>

#include "predict/serving_request.h"
#include "sim/core/error.h"
#include "sim/inference/vllm_v1_startup.h"
#include "sim/predict/step_prediction.h"
#include "sim/serving/non_torch_memory.h"

using namespace vramsim;

namespace {

using test::v1_paged_of;

constexpr std::int64_t kGiBi = std::int64_t{1} << 30;

}  // namespace

TEST_CASE("vllm v1: page size per layer is 2 x block x kv heads x head size x dtype bytes",
          "[quick][predict]") {
  // vllm/v1/kv_cache_interface.py AttentionSpec.page_size_bytes. Llama-3-8B: 8 KV heads of 128, block 16:
  // 2 x 16 x 8 x 128 x 2 B = 65,536 B (bf16); x 32 layers = 2 MiB a block, 128 KiB a token.
  CHECK(vllm_v1_page_size_bytes(16, 8, 128, 2) == 65536);
  // --kv-cache-dtype fp8: one byte (torch.uint8 storage): 32,768 B.
  CHECK(vllm_v1_page_size_bytes(16, 8, 128, 1) == 32768);
  // ModelConfig.get_num_kv_heads: max(1, 8 // tp); 8 heads over 16 ranks: each rank keeps one (replicated).
  CHECK(vllm_kv_heads_per_rank(8, 2) == 4);
  CHECK(vllm_kv_heads_per_rank(8, 8) == 1);
  CHECK(vllm_kv_heads_per_rank(8, 16) == 1);
  // pad_vocab_size(., 64) then split: 128,256 = 64 x 2004 -> 16,032 rows at tp 8; GPT-2's 50,257 -> 50,304.
  CHECK(vllm_vocab_rows_per_rank(128256, 8) == 16032);
  CHECK(vllm_vocab_rows_per_rank(50257, 1) == 50304);
}

TEST_CASE("vllm v1: blocks, tokens and concurrency as get_kv_cache_config computes them",
          "[quick][predict]") {
  // get_num_blocks: available // page_size // layers. 19.28 GiB = 20,701,742,366 B (floor) // 65,536 =
  // 315,883 // 32 = 9,871 blocks = 157,936 tokens.
  const auto available = static_cast<std::int64_t>(std::floor(19.28 * static_cast<double>(kGiBi)));
  CHECK(vllm_v1_num_blocks(available, 65536, 32) == 9871);
  CHECK(vllm_v1_num_blocks(0, 65536, 32) == 0);
  CHECK(vllm_v1_num_blocks(-5, 65536, 32) == 0);
  // get_max_concurrency_for_kv_cache_config: 9,871 / cdiv(131,072, 16) = 9,871 / 8,192 = 1.2049...
  CHECK(vllm_v1_max_concurrency(9871, 16, 131072) == Approx(9871.0 / 8192.0));
  // 9,916 blocks for 32,768-token requests: 9,916 / 2,048 = 4.84...
  CHECK(vllm_v1_max_concurrency(9916, 16, 32768) == Approx(4.841796875));
}

TEST_CASE("vllm v1: check_enough_kv_cache_memory and its estimated max_model_len", "[quick][predict]") {
  // 8,192 tokens x 32 layers x 65,536 B / 16 = 512 blocks x 2 MiB = exactly 1 GiB: it fits.
  CHECK(vllm_v1_check_enough_kv_cache_memory(kGiBi, 65536, 32, 16, 8192).refusal.empty());
  // 8,193 tokens need 513 blocks (1.0020 GiB): refused; 512 blocks serve 512 x 16 = 8,192 tokens.
  const VllmCacheCheck c = vllm_v1_check_enough_kv_cache_memory(kGiBi, 65536, 32, 16, 8193);
  CHECK(c.estimated_max_model_len == 8192);
  CHECK(c.refusal ==
        "To serve at least one request with the models's max seq len (8193), (1.00 GiB KV cache is needed, "
        "which is larger than the available KV cache memory (1.00 GiB). Based on the available memory, the "
        "estimated maximum model length is 8192. Try increasing `gpu_memory_utilization` or decreasing "
        "`max_model_len` when initializing the engine.");
  CHECK(vllm_v1_check_enough_kv_cache_memory(0, 65536, 32, 16, 8192).refusal ==
        "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
        "initializing the engine.");
}

TEST_CASE("vllm v1: the profile run's peak, the dummy forward and the sampler", "[quick][predict]") {
  // Llama-3.1-8B, 8,192 tokens, 1,024 requests, bf16 (GPUModelRunner.profile_run).
  VllmProfileShapes s;
  s.tokens = 8192;
  s.requests = 1024;
  s.hidden = 4096;
  s.q_heads = 32;
  s.kv_heads = 8;
  s.head_dim = 128;
  s.intermediate = 14336;
  s.vocab_rows = 128256;
  s.vocab = 128256;
  // LlamaMLP at down_proj: hidden and residual (2 x 4,096), gate_up (28,672), its activation (14,336) and the
  // output (4,096) = 55,296 columns x 8,192 tokens x 2 B = 905,969,664 B.
  // Sampler: hidden_states 8,192 x 4,096 x 2 = 67,108,864; their 1,024 sampled rows 8,388,608; bf16 logits
  // 1,024 x 128,256 x 2 = 262,668,288; float32 logits, probabilities and the exponential draw 3 x 1,024 x
  // 128,256 x 4 = 1,576,009,728: 1,914,175,488 B.
  VllmProfilePeak p = vllm_v1_profile_peak(s);
  CHECK(p.forward_bytes == 905969664);
  CHECK(p.sampler_bytes == 1914175488);
  CHECK(p.peak_bytes == 1914175488);
  // TP 2: the rank's 16 query heads, 4 KV heads, 7,168 intermediate columns, and the all-reduce's output
  // beside the partial sum: 2 x 4,096 + 14,336 + 7,168 + 4,096 + 4,096 = 37,888 columns = 620,756,992 B; the
  // lm_head's 64,128 rows a rank gather back to 128,256 columns: the sampler is unchanged.
  s.tp = 2;
  s.q_heads = 16;
  s.kv_heads = 4;
  s.intermediate = 7168;
  s.vocab_rows = 64128;
  p = vllm_v1_profile_peak(s);
  CHECK(p.forward_bytes == 620756992);
  CHECK(p.sampler_bytes == 1914175488);
}

TEST_CASE("vllm v1: predict prints Llama-3.1-8B's start-up on an H100", "[quick][predict]") {
  const Prediction p = predict(make_request(test::served_on_h100()));
  const Prediction::Generation::Paged& g = v1_paged_of(p);
  const Prediction::Generation::Paged::V1& v = *g.v1;
  // EngineArgs._set_default_args: an 80 GB H100 (not an A100) -> 8,192 tokens, 1,024 sequences.
  CHECK(g.max_num_batched_tokens == 8192);
  CHECK(g.max_num_seqs == 1024);
  CHECK(g.max_model_len == 131072);  // max_position_embeddings
  // Weights: 8,030,261,248 parameters x 2 B = 16,060,522,496 B plus get_rope's cos_sin_cache 131,072 x 128 x
  // 2 B = 33,554,432 B: 16,094,076,928 B.
  CHECK(v.weights_bytes == 16094076928);
  // Torch peak increase: the sampler's 1,914,175,488 B (above) + Hopper's 32 MiB cuBLAS workspace.
  CHECK(v.torch_peak_increase_bytes == 1914175488 + 33554432);
  CHECK(v.non_torch_increase_bytes == 0);  // TP 1: no communicator buffers
  // Requested: 85,045,477,376 B (cudaMemGetInfo's total) x 0.9 = 76,540,929,638 B (floor).
  CHECK(v.requested_bytes == 76540929638);
  const std::int64_t available = 76540929638 - 16094076928 - 1914175488 - 33554432;
  CHECK(g.available_bytes == available);
  CHECK(g.num_gpu_blocks == available / 65536 / 32);
  CHECK(v.kv_cache_tokens == g.num_gpu_blocks * 16);
  CHECK(g.block_bytes == 2 * 1024 * 1024);
  CHECK(g.refusal.empty());
  CHECK(p.generation->kv_cache_bytes == g.num_gpu_blocks * 2 * 1024 * 1024);
}

TEST_CASE("vllm v1: tensor parallelism, fp8 cache and fp8 weights", "[quick][predict]") {
  const Prediction one = predict(make_request(test::served_on_h100()));
  RequestArgs a = test::served_on_h100();
  a.tp = 2;
  a.world_size = 2;
  const Prediction two = predict(make_request(a));
  const Prediction::Generation::Paged& g2 = v1_paged_of(two);
  // Per rank at TP 2: embed and lm_head 64,128 x 4,096 each, 525,336,576 together; a layer's q 4,096 x 2,048
  // and o 2,048 x 4,096 (16,777,216), k and v 4,096 x 512 (4,194,304), gate/up/down 3 x 4,096 x 7,168
  // (88,080,384), two norms 8,192: 109,060,096 x 32 = 3,489,923,072; final norm 4,096: 4,015,263,744
  // parameters x 2 B = 8,030,527,488 B + the 33,554,432 B rotary cache (not split).
  CHECK(g2.v1->weights_bytes == 8030527488 + 33554432);
  // 4 KV heads a rank: 32,768 B a layer's page.
  CHECK(g2.v1->page_size_bytes == 32768);
  // Outside torch at TP 2 on H100 (vLLM 0.19): custom all-reduce 2 x min(8 MiB, 64 MiB) and the 64 MiB
  // symmetric-memory buffer before the snapshot; pynccl's ring (24 x 12 MiB (10 MiB received + 2 MiB sent a
  // channel, NCCL p2p.cc)) before it; torch's TP-group communicator's ring (24 x 12 MiB (10 MiB received + 2
  // MiB sent a channel, NCCL p2p.cc) = 301,989,888 B) after it, in the increase.
  REQUIRE(g2.v1->non_torch_lines.size() == 4);
  CHECK(g2.v1->non_torch_lines[0].size_bytes == 16 * 1024 * 1024);
  CHECK(g2.v1->non_torch_lines[1].size_bytes == 64 * 1024 * 1024);
  CHECK(g2.v1->non_torch_increase_bytes == 301989888);
  CHECK(g2.v1->before_snapshot_bytes == 16777216 + 67108864 + 301989888);
  // Half the weights and half the page: more than twice the tokens of TP 1 on each rank.
  CHECK(g2.v1->kv_cache_tokens > 2 * one.generation->paged->v1->kv_cache_tokens);

  a = test::served_on_h100();
  a.kv_cache_dtype = "fp8";
  const Prediction fp8 = predict(make_request(a));
  CHECK(fp8.generation->paged->v1->page_size_bytes == 32768);
  CHECK(fp8.generation->paged->num_gpu_blocks == one.generation->paged->available_bytes / 32768 / 32);
  CHECK(fp8.generation->kv_cache_bytes == fp8.generation->paged->num_gpu_blocks * 32768 * 32);

  a = test::served_on_h100();
  a.quantization = "fp8";
  const Prediction w8 = predict(make_request(a));
  // Fp8LinearMethod: the 32 layers' seven linear weights, 218,103,808 elements a layer, one byte each plus a
  // float32 scale: 32 x (218,103,808 + 28) B; embeddings, lm_head and norms stay bf16: 2 x 525,336,576 x 2
  // + (32 x 8,192 + 4,096) x 2 = 2,101,878,784 B; + the rotary cache.
  CHECK(w8.generation->paged->v1->weights_bytes ==
        32 * (std::int64_t{218103808} + 28) + 2101878784 + 33554432);
}

TEST_CASE("vllm v1: chunked prefill accepts max_model_len above the token budget, and the refusals",
          "[quick][predict]") {
  RequestArgs a = test::served_on_h100();
  a.max_num_batched_tokens = 2048;  // below max_model_len 131,072: V1's chunked prefill takes it
  const Prediction p = predict(make_request(a));
  CHECK(v1_paged_of(p).max_num_batched_tokens == 2048);
  CHECK(p.generation->paged->refusal.empty());
  // Utilization 0.22: requested 0.22 x 85,045,477,376 = 18,710,005,022 B; less 16,094,076,928 + 1,914,175,488
  // + 33,554,432 leaves 668,198,174 B = 318 blocks of 2 MiB (5,088 tokens), below 131,072: refused, with
  // vLLM's estimate 5,088.
  a = test::served_on_h100();
  a.gpu_memory_utilization = 0.22;
  const Prediction low = predict(make_request(a));
  CHECK(low.generation->paged->v1->estimated_max_model_len == 5088);
  CHECK(low.generation->paged->refusal.find("the estimated maximum model length is 5088") !=
        std::string::npos);
  CHECK_FALSE(low.fits);
  // SchedulerConfig._verify_args: the token budget must cover max_num_seqs.
  a = test::served_on_h100();
  a.max_num_batched_tokens = 512;
  CHECK_THROWS_WITH(
      predict(make_request(a)),
      Catch::StartsWith("--max-num-batched-tokens: max_num_batched_tokens (512) must be greater"));
  // ModelConfig: a max_model_len above max_position_embeddings.
  a = test::served_on_h100();
  a.max_model_len = 262144;
  CHECK_THROWS_WITH(predict(make_request(a)), Catch::StartsWith("--max-model-len: 262144 is greater than"));
  a = test::served_on_h100();
  a.kv_cache_dtype = "int4";
  CHECK_THROWS_WITH(make_request(a), Catch::StartsWith("--kv-cache-dtype: 'int4' is not"));
  a = test::served_on_h100();
  a.vllm_version = "v2";
  CHECK_THROWS_WITH(make_request(a), Catch::StartsWith("--vllm-version: 'v2' is not v1 or v0"));
  a = test::served_on_h100();
  a.vllm_version = "v0";
  a.kv_cache_dtype = "fp8";
  CHECK_THROWS_WITH(make_request(a), Catch::StartsWith("--kv-cache-dtype / --quantization"));
}

TEST_CASE("vllm v1: a measured non-torch increase replaces the bill's", "[quick][predict]") {
  RequestArgs a = test::served_on_h100();
  a.vllm_non_torch_increase = "256MiB";
  const Prediction p = predict(make_request(a));
  const Prediction one = predict(make_request(test::served_on_h100()));
  CHECK(p.generation->paged->v1->non_torch_increase_bytes == 268435456);
  CHECK(p.generation->paged->v1->non_torch_measured);
  CHECK(one.generation->paged->available_bytes - p.generation->paged->available_bytes == 268435456);
}

TEST_CASE("non-torch memory: vLLM 0.19's communication buffers by TP size and GPU", "[quick][predict]") {
  CHECK(tensor_parallel_non_torch_lines(1, "h100").empty());
  // NCCL init.cc: Simple 1 << 22 + LL 8 x 512 x 8 x 16 = 524,288 + LL128 120 x 640 x 8 x 8 = 4,915,200 =
  // 9,633,792 B, rounded up to cuMem's 2 MiB granule: 10,485,760 B (NCCL issue #1685's ALLOC log).
  CHECK(nccl_connection_buffer_bytes() == 10485760);
  CHECK(nccl_ring_channels("h100") == 24);
  CHECK(nccl_ring_channels("a100") == 0);  // no public NCCL channel count used: not sized
  // TP 3: no custom all-reduce (_SUPPORTED_WORLD_SIZES) and no symmetric memory (not in its table); the
  // two NCCL rings remain.
  const std::vector<NonTorchLine> three = tensor_parallel_non_torch_lines(3, "h100");
  REQUIRE(three.size() == 2);
  CHECK(three[0].name == "NCCL ring (pynccl)");
  // TP 8 on H100: max_size = min(8 MiB, CUSTOM_ALL_REDUCE_MAX_SIZES["9.0"][8] = 256 KiB): 2 x 262,144 B;
  // SYMM_MEM_ALL_REDUCE_MAX_SIZES["9.0"][8] = 64 MiB; 24 channels x 10 MiB twice, one after the snapshot.
  const std::vector<NonTorchLine> eight = tensor_parallel_non_torch_lines(8, "h100");
  REQUIRE(eight.size() == 4);
  CHECK(eight[0].size_bytes == 524288);
  CHECK_FALSE(eight[0].after_snapshot);
  CHECK(eight[1].size_bytes == 67108864);
  CHECK(eight[2].size_bytes == 301989888);
  CHECK_FALSE(eight[2].after_snapshot);
  CHECK(eight[3].after_snapshot);
  CHECK(non_torch_increase_bytes(eight) == 301989888);
  // TP 4: min(8 MiB, 32 MiB) = 8 MiB each; symmetric memory 32 MiB.
  const std::vector<NonTorchLine> four = tensor_parallel_non_torch_lines(4, "h100");
  CHECK(four[0].size_bytes == 16777216);
  CHECK(four[1].size_bytes == 33554432);
  // A100 (8.0): no symmetric-memory table, so custom all-reduce keeps its default 8 MiB; no NCCL lines.
  const std::vector<NonTorchLine> a100 = tensor_parallel_non_torch_lines(2, "a100");
  REQUIRE(a100.size() == 1);
  CHECK(a100[0].size_bytes == 16777216);
  CHECK(non_torch_increase_bytes(a100) == 0);
}
