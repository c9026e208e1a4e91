// SGLang's KV pool at start-up (sim/inference/sglang_memory_pool.h, sim/serving/sglang_sizing.h): each
// expected value is worked by hand below from SGLang 0.4.x's python/sglang/srt/model_executor/
// model_runner.py (profile_max_num_token, init_memory_pool) and server_args.py (ServerArgs.__post_init__),
// and SGLang 0.5.3+'s server_args.py (ServerArgs._handle_gpu_memory_settings, sgl-project/sglang PR #10975).
// A public SGLang log is compared in docs/serving.md with its error, not asserted here.
#include <catch2/catch.hpp>

#include "predict/serving_request.h"
#include "sim/core/error.h"
#include "sim/inference/sglang_memory_pool.h"
#include "sim/predict/step_prediction.h"

using namespace vramsim;

namespace {

RequestArgs sglang_llama31_8b_h100() {
  RequestArgs a = test::served_on_h100();
  a.serving_engine = "sglang";
  return a;
}

}  // namespace

TEST_CASE("sglang: mem_fraction_static's default by tensor-parallel size", "[quick][predict]") {
  // ServerArgs.__post_init__: tp >= 16: 0.79, >= 8: 0.81, >= 4: 0.85, >= 2: 0.87, else 0.88.
  CHECK(sglang_default_mem_fraction_static(1) == 0.88);
  CHECK(sglang_default_mem_fraction_static(2) == 0.87);
  CHECK(sglang_default_mem_fraction_static(3) == 0.87);
  CHECK(sglang_default_mem_fraction_static(4) == 0.85);
  CHECK(sglang_default_mem_fraction_static(8) == 0.81);
  CHECK(sglang_default_mem_fraction_static(16) == 0.79);
}

TEST_CASE("sglang 0.5: mem_fraction_static from the GPU's memory (_handle_gpu_memory_settings)",
          "[quick][predict]") {
  // reserved_mem (MiB) = 512 + max(chunked_prefill_size, 2048) x 1.5 + cuda_graph_max_bs x 2 + tp x pp / 8 x
  // 1024; mem_fraction_static = round((gpu_mem - reserved_mem) / gpu_mem, 3).
  // An H100 (81,105.6875 MiB, the < 90 GiB branch: chunked_prefill_size 8192, cuda_graph_max_bs 256 below
  // TP 4): 512 + 12,288 + 512 + 128 = 13,440 MiB; 67,665.6875 / 81,105.6875 = 0.83429 -> 0.834.
  constexpr double kH100 = 85045477376.0 / 1048576.0;
  SglangGpuMemorySettings s = sglang_gpu_memory_settings(kH100, 1, 1);
  CHECK(s.chunked_prefill_size == 8192);
  CHECK(s.cuda_graph_max_bs == 256);
  CHECK(s.reserved_mem_mib == 13440.0);
  CHECK(s.mem_fraction_static == 0.834);
  // TP 2: + 128 MiB: 13,568; 67,537.6875 / 81,105.6875 = 0.83271 -> 0.833.
  CHECK(sglang_gpu_memory_settings(kH100, 2, 1).mem_fraction_static == 0.833);
  // TP 4: cuda_graph_max_bs 512: 512 + 12,288 + 1,024 + 512 = 14,336; 0.82324 -> 0.823.
  s = sglang_gpu_memory_settings(kH100, 4, 1);
  CHECK(s.cuda_graph_max_bs == 512);
  CHECK(s.reserved_mem_mib == 14336.0);
  CHECK(s.mem_fraction_static == 0.823);
  // TP 8: 512 + 12,288 + 1,024 + 1,024 = 14,848; 66,257.6875 / 81,105.6875 = 0.81693 -> 0.817.
  CHECK(sglang_gpu_memory_settings(kH100, 8, 1).mem_fraction_static == 0.817);
  // 40 GiB (40,960 MiB, the < 60 GiB branch: 4096 and 32): 512 + 6,144 + 64 + 128 = 6,848; 34,112 / 40,960 =
  // 0.83281 -> 0.833. 24 GiB (< 35 GiB: 2048 and 24): 512 + 3,072 + 48 + 128 = 3,760; 20,816 / 24,576 =
  // 0.84701
  // -> 0.847. 16 GiB (< 20 GiB: 2048 and 8): 512 + 3,072 + 16 + 128 = 3,728; 12,656 / 16,384 = 0.77246 ->
  // 0.772.
  s = sglang_gpu_memory_settings(40960.0, 1, 1);
  CHECK(s.chunked_prefill_size == 4096);
  CHECK(s.mem_fraction_static == 0.833);
  CHECK(sglang_gpu_memory_settings(24576.0, 1, 1).mem_fraction_static == 0.847);
  CHECK(sglang_gpu_memory_settings(16384.0, 1, 1).mem_fraction_static == 0.772);
  // 180,000 MiB (B200 branch: 16384 and 512 at any TP): 512 + 24,576 + 1,024 + 128 = 26,240; 153,760 /
  // 180,000 = 0.85422 -> 0.854.
  s = sglang_gpu_memory_settings(180000.0, 1, 1);
  CHECK(s.chunked_prefill_size == 16384);
  CHECK(s.cuda_graph_max_bs == 512);
  CHECK(s.mem_fraction_static == 0.854);
}

TEST_CASE("sglang: profile_max_num_token, the pool and max_running_requests", "[quick][predict]") {
  // Llama-3.1-8B on an H100 at TP 1: total_gpu_memory = 85,045,477,376 - the 534 MiB context =
  // 84,485,537,792 B; the weights 16,094,076,928 B leave 68,391,460,864 B. rest_memory = 68,391,460,864 -
  // 0.12 x 84,485,537,792 = 58,253,196,328.96 B. cell_size = 8 heads x 128 x 32 layers x 2 x 2 B = 131,072 B:
  // 444,436.6 -> 444,436 tokens. K size = (444,436 + 1) x 65,536 = 29,126,623,232 B (27.13 GB).
  // max_running_requests: 444,436 / 131,072 x 512 = 1,736 -> max(., 2048) = 2048.
  SglangPoolInputs in;
  in.total_gpu_memory_bytes = 84485537792;
  in.weights_bytes = 16094076928;
  in.mem_fraction_static = 0.88;
  in.kv_heads = 8;
  in.head_dim = 128;
  in.layers = 32;
  in.kv_dtype_bytes = 2;
  in.context_len = 131072;
  SglangPool p = sglang_profile_max_num_token(in);
  CHECK(p.cell_size_bytes == 131072);
  CHECK(p.available_after_load_bytes == 68391460864);
  CHECK(p.max_total_num_tokens == 444436);
  CHECK(p.k_size_bytes == 29126623232);
  CHECK(p.max_running_requests == 2048);
  CHECK(p.refusal.empty());
  // A short context_len raises the request count to its cap: 444,436 / 8,192 x 512 = 27,777 -> 4096.
  in.context_len = 8192;
  CHECK(sglang_profile_max_num_token(in).max_running_requests == 4096);
  // page_size 16: 444,436 // 16 x 16 = 444,432.
  in.page_size = 16;
  CHECK(sglang_profile_max_num_token(in).max_total_num_tokens == 444432);
  // mem_fraction_static 0.15: rest = 68,391,460,864 - 0.85 x 84,485,537,792 < 0: init_memory_pool refuses.
  in.page_size = 1;
  in.mem_fraction_static = 0.15;
  p = sglang_profile_max_num_token(in);
  CHECK(p.max_total_num_tokens < 0);
  CHECK(p.refusal == "Not enough memory. Please try to increase --mem-fraction-static.");
}

TEST_CASE("sglang: predict --serving-engine sglang sizes the pool and serves from it", "[quick][predict]") {
  RequestArgs v04 = sglang_llama31_8b_h100();
  v04.sglang_version = "0.4";
  const Prediction p = predict(make_request(v04));
  REQUIRE(p.generation);
  REQUIRE(p.generation->paged);
  REQUIRE(p.generation->paged->sglang);
  const Prediction::Generation::Paged& g = *p.generation->paged;
  CHECK(g.sglang->default_fraction);
  CHECK(g.sglang->mem_fraction_static == 0.88);
  CHECK(g.sglang->weights_bytes == 16094076928);
  CHECK(g.sglang->max_total_num_tokens == 444436);
  // The pool as one-token blocks for the served batch: its K and V rows of every layer.
  CHECK(g.num_gpu_blocks == 444437);
  CHECK(g.block_bytes == 131072);
  CHECK(p.generation->kv_cache_bytes == std::int64_t{444437} * 131072);
  CHECK(g.refusal.empty());
  // SGLang 0.5's default (the default --sglang-version): 0.834 on this H100 (worked above). rest_memory =
  // 68,391,460,864 - 0.166 x 84,485,537,792 = 54,366,861,590.5 B: 414,786.3 -> 414,786 tokens.
  const Prediction p05 = predict(make_request(sglang_llama31_8b_h100()));
  REQUIRE(p05.generation->paged->sglang);
  CHECK(p05.generation->paged->sglang->default_fraction);
  CHECK(p05.generation->paged->sglang->mem_fraction_static == 0.834);
  CHECK(p05.generation->paged->sglang->reserved_mem_mib == 13440.0);
  CHECK(p05.generation->paged->sglang->max_total_num_tokens == 414786);
  RequestArgs a = sglang_llama31_8b_h100();
  a.sglang_version = "0.3";
  CHECK_THROWS_WITH(make_request(a), "--sglang-version: '0.3' is not 0.5 or 0.4");
  a = sglang_llama31_8b_h100();
  a.mem_fraction_static = 0.15;
  const Prediction refused = predict(make_request(a));
  CHECK(refused.generation->paged->refusal ==
        "Not enough memory. Please try to increase --mem-fraction-static.");
  CHECK_FALSE(refused.fits);
  // vLLM's options are refused with SGLang, and SGLang's without it.
  a = sglang_llama31_8b_h100();
  a.gpu_memory_utilization = 0.8;
  CHECK_THROWS_AS(make_request(a), InputError);
  a = sglang_llama31_8b_h100();
  a.serving_engine = "vllm";
  a.mem_fraction_static = 0.8;
  CHECK_THROWS_WITH(
      make_request(a),
      "--mem-fraction-static: SGLang's fraction, in (0, 1) with --serving-engine sglang, got 0.8");
  a.serving_engine = "tgi";
  CHECK_THROWS_WITH(make_request(a), "--serving-engine: 'tgi' is not vllm or sglang");
}
