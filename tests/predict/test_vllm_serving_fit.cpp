// fit's vLLM serving questions (sim/serving/vllm_serving_fit.h) and 0.21's CUDA-graph estimate in the KV
// budget: each expected value is worked by hand below from vLLM's source (file and function at each check);
// 85,045,477,376 B is an H100 80GB's cudaMemGetInfo total (sim/engine/gpu_table.cpp).
#include <catch2/catch.hpp>

#include <cmath>

#include "predict/serving_request.h"
#include "sim/core/error.h"
#include "sim/predict/gpu_memory.h"
#include "sim/predict/step_prediction.h"
#include "sim/serving/vllm_serving_fit.h"

using namespace vramsim;

namespace {

constexpr std::int64_t kH100Total = 85045477376;
constexpr std::int64_t kLlamaWeights =
    16094076928;                            // 8,030,261,248 x 2 B + cos_sin_cache 131,072 x 128 x 2 B
constexpr std::int64_t kCublas = 33554432;  // Hopper's cuBLAS workspace, through the allocator

}  // namespace

TEST_CASE("vllm serving fit: the largest max_model_len that starts is vLLM's estimate_max_model_len",
          "[quick][predict]") {
  RequestArgs a = test::served_on_h100();
  a.gpu_memory_utilization = 0.3;
  // Worker.determine_available_memory: floor(85,045,477,376 x 0.3) = 25,513,643,212 B requested, less the
  // weights, the sampler's 1,914,175,488 B (1,024 requests, test_vllm_v1_startup.cpp) and the cuBLAS
  // workspace: 7,471,836,364 B. kv_cache_utils.estimate_max_model_len: whole blocks of 32 layers x 65,536 B =
  // 2,097,152 B: 3,562 blocks of 16 tokens = 56,992 tokens, below max_position_embeddings (131,072).
  const ServingFitResult r = fit_vllm_serving(make_request(a), ServingQuestion::kMaxModelLen, 0.1);
  CHECK(r.available_bytes == 25513643212 - kLlamaWeights - 1914175488 - kCublas);
  CHECK(r.answer == 56992);
  // The default max_model_len (131,072) is refused with the same estimate in vLLM's words.
  CHECK_THAT(r.refusal, Catch::Contains("the estimated maximum model length is 56992"));
  // At 0.9 the whole trained context fits: the answer stops at max_position_embeddings.
  CHECK(fit_vllm_serving(make_request(test::served_on_h100()), ServingQuestion::kMaxModelLen, 0.1).answer ==
        131072);
}

TEST_CASE("vllm serving fit: the largest max_num_seqs at a context, the sampler growing with it",
          "[quick][predict]") {
  RequestArgs a = test::served_on_h100();
  a.max_model_len = 32768;
  // Up to 465 sequences the dummy forward (905,969,664 B) is above the sampler (67,108,864 + s x 1,803,776 B:
  // the sampled row 8,192 B, bf16 logits 256,512 B and three float32 copies 1,539,072 B per request), so the
  // available memory is 76,540,929,638 - 16,094,076,928 - 905,969,664 - 33,554,432 = 59,507,328,614 B: 28,375
  // blocks of 2,097,152 B. A 32,768-token request holds cdiv(32,768, 16) = 2,048 blocks: 13 fit (26,624), 14
  // do not (28,672).
  ServingFitResult r = fit_vllm_serving(make_request(a), ServingQuestion::kMaxNumSeqs, 0.1);
  CHECK(r.answer == 13);
  REQUIRE_FALSE(r.trials.empty());
  CHECK(r.trials.front().num_gpu_blocks == 28375);
  // 512-token requests (32 blocks each): past 465 sequences the sampler sets the peak, and the available
  // memory is 76,540,929,638 - 16,094,076,928 - 33,554,432 - 67,108,864 - 1,803,776 s = 60,346,189,414 -
  // 1,803,776 s. s requests fit while it is >= 32 s x 2,097,152: s <= 60,346,189,414 / 68,912,640 = 875.7.
  // s = 875: 58,767,885,414 B = 28,022 blocks >= 28,000; s = 876: 28,021 blocks < 28,032.
  a.max_model_len = 512;
  r = fit_vllm_serving(make_request(a), ServingQuestion::kMaxNumSeqs, 0.1);
  CHECK(r.answer == 875);
}

TEST_CASE("vllm serving fit: the gpu_memory_utilization that leaves a stated headroom", "[quick][predict]") {
  // vLLM fills total x utilization with weights, activations, non-torch memory and the KV cache; the CUDA
  // context and what is allocated before its snapshot come on top. 10 % free: utilization <= (0.9 x total -
  // context - before) / total, to four decimals (floor).
  const GpuMemory h100 = device_memory("h100-80gb", 0);
  const double context = static_cast<double>(h100.context_bytes);
  const double total = static_cast<double>(kH100Total);
  ServingFitResult r =
      fit_vllm_serving(make_request(test::served_on_h100()), ServingQuestion::kGpuMemoryUtilization, 0.1);
  CHECK(r.answer_utilization == Approx(std::floor((0.9 * total - context) / total * 1e4) / 1e4).margin(1e-9));
  // TP 2 on H100: what vLLM 0.19 allocates before its snapshot too: custom all-reduce 2 x 8 MiB
  // (custom_all_reduce.py), the 64 MiB symmetric-memory buffer (symm_mem.py), pynccl's ring 24 x 12 MiB (10
  // MiB received + 2 MiB sent a channel, NCCL p2p.cc): 16,777,216 + 67,108,864 + 301,989,888 = 385,875,968 B.
  RequestArgs a = test::served_on_h100();
  a.tp = 2;
  a.world_size = 2;
  r = fit_vllm_serving(make_request(a), ServingQuestion::kGpuMemoryUtilization, 0.1);
  CHECK(r.answer_utilization ==
        Approx(std::floor((0.9 * total - context - 385875968.0) / total * 1e4) / 1e4).margin(1e-9));
  // 70 % free leaves less than one 131,072-token request needs: no answer.
  CHECK(fit_vllm_serving(make_request(test::served_on_h100()), ServingQuestion::kGpuMemoryUtilization, 0.7)
            .answer_utilization == 0.0);
  // Not a serving request: an error naming the flags.
  RequestArgs training;
  training.model = "llama-3.1-8b";
  training.gpu = "h100-80gb";
  CHECK_THROWS_WITH(fit_vllm_serving(make_request(training), ServingQuestion::kMaxModelLen, 0.1),
                    Catch::StartsWith("--vary max-model-len / max-num-seqs / gpu-memory-utilization"));
}

TEST_CASE("vllm v1: 0.21's CUDA-graph estimate comes out of the KV cache, with its equivalence line",
          "[quick][predict]") {
  // A public vLLM 0.21+ start-up log (find_string id 61222544093, 2026-08-23): "Free memory on device
  // (112.26/119.63 GiB)", "Estimated CUDA graph memory: 1.94 GiB total", "The current
  // --gpu-memory-utilization=0.9200 is equivalent to --gpu-memory-utilization=0.9038 without CUDA graph
  // memory profiling. To maintain the same effective KV cache size as before, increase
  // --gpu-memory-utilization to 0.9362": 0.92 -/+ 1.94 / 119.63 (gpu_worker.py).
  RequestArgs a = test::served_on_h100();
  a.gpu.clear();
  a.capacity = "119.63GiB";
  a.max_model_len = 8192;
  a.gpu_memory_utilization = 0.92;
  const Prediction without = predict(make_request(a));
  a.vllm_cudagraph_memory = "1.94GiB";
  const Prediction with = predict(make_request(a));
  const Prediction::Generation::Paged::V1& v = *with.generation->paged->v1;
  CHECK(std::round(v.utilization_without_graphs * 1e4) / 1e4 == Approx(0.9038).margin(1e-9));
  CHECK(std::round(v.utilization_to_keep_cache * 1e4) / 1e4 == Approx(0.9362).margin(1e-9));
  // Worker.determine_available_memory subtracts the estimate: the available memory drops by 1.94 GiB
  // (1.94 x 2^30 = 2,083,059,138.56 B, read to the nearest byte: 2,083,059,139 B).
  CHECK(without.generation->paged->available_bytes - with.generation->paged->available_bytes == 2083059139);
  // The estimate is V1's alone.
  a.vllm_version = "v0";
  CHECK_THROWS_WITH(make_request(a), Catch::Contains("--vllm-cudagraph-memory"));
}

TEST_CASE("vllm serving fit: the smallest tensor-parallel size that starts Llama-3.1-70B",
          "[quick][predict]") {
  // Llama-3.1-70B in bf16: 70,553,706,496 parameters x 2 B = 141,107,412,992 B, above the H100's requested
  // 76,540,929,638 B at TP 1. At TP 2 a rank holds at least half of it, 70,553,706,496 B, leaving under
  // 5,987,223,142 B, less than one 131,072-token request needs: 131,072 x 80 layers x 2 x 4 KV heads x 128 x
  // 2 B = 21,474,836,480 B (check_enough_kv_cache_memory refuses). At TP 4 a rank holds about a quarter
  // (35.3 GB) plus the sampler (1.9 GB), leaving some 39 GB, and the request needs half as much per token
  // (2 KV heads a rank): 10,737,418,240 B: it starts.
  RequestArgs a = test::served_on_h100();
  a.model = "llama-3.1-70b";
  const ServingTpPlan p = plan_vllm_tensor_parallel(a);
  REQUIRE(p.rows.size() == 4);
  CHECK(p.rows[0].weights_bytes >= 141107412992);
  CHECK_FALSE(p.rows[0].refusal.empty());
  CHECK(p.rows[1].available_bytes < 5987223142);
  CHECK_FALSE(p.rows[1].refusal.empty());
  CHECK(p.rows[2].refusal.empty());
  CHECK(p.smallest_tp_that_starts == 4);
  // Qwen2.5-7B's 28 query heads do not split over 8 ranks (vLLM refuses too): that size carries the error.
  a.model = "qwen2.5-7b";
  const ServingTpPlan q = plan_vllm_tensor_parallel(a);
  CHECK_THAT(q.rows[3].error, Catch::Contains("does not divide the 28 attention heads"));
  CHECK(q.smallest_tp_that_starts == 1);
}

TEST_CASE("vllm v1: W4A16 weights (GPTQ / AWQ, 4-bit, group 128) in Marlin's layout", "[quick][predict]") {
  // Llama-3.1-8B's decoder linears per layer, in x out: q and o 4,096 x 4,096, k and v 4,096 x 1,024, gate
  // and up 4,096 x 14,336, down 14,336 x 4,096: 218,103,808 weights, x 32 layers = 6,979,321,856 (n).
  // gptq_marlin.py GPTQMarlinLinearMethod.create_weights + MarlinLinearKernel.process_weights_after_loading:
  // qweight int32 [in / 8, out] = n / 2 = 3,489,660,928 B; scales bf16 [in / 128, out] = n / 64 =
  // 109,051,904 B; g_idx and qzeros emptied (desc_act off, symmetric). The rest in bf16: embed_tokens and
  // lm_head 2 x 128,256 x 4,096 x 2 = 2,101,346,304 B, the norms 266,240 x 2 = 532,480 B, RoPE's
  // cos_sin_cache 33,554,432 B. In all 5,734,146,048 B.
  RequestArgs a = test::served_on_h100();
  a.quantization = "gptq";
  const Prediction gptq = predict(make_request(a));
  CHECK(gptq.generation->paged->v1->weights_bytes == 5734146048);
  // awq_marlin.py: AWQ keeps its zero points, int32 [in / 128, out / 8] = n / 256 = 27,262,976 B more.
  a.quantization = "awq";
  const Prediction awq = predict(make_request(a));
  CHECK(awq.generation->paged->v1->weights_bytes == 5734146048 + 27262976);
  a.quantization = "int3";
  CHECK_THROWS_WITH(make_request(a), Catch::StartsWith("--quantization: 'int3' is not modelled"));
}
