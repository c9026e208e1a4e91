// `fit` for SGLang serving (sim/serving/sglang_serving_fit.h): each expected value is worked by hand below
// from SGLang's model_runner.py (profile_max_num_token, init_memory_pool), tp_worker.py (max_req_len) and the
// pool of test_sglang_memory_pool.cpp: Llama-3.1-8B on an H100 at TP 1, total_gpu_memory 84,485,537,792 B,
// weights 16,094,076,928 B, available after loading 68,391,460,864 B, 131,072 B a token.
#include <catch2/catch.hpp>

#include "sim/core/error.h"
#include "sim/predict/step_prediction.h"
#include "sim/serving/sglang_serving_fit.h"

#include "predict/serving_request.h"

using namespace vramsim;

namespace {

RequestArgs sglang_at(double mem_fraction_static) {
  RequestArgs a = test::served_on_h100();
  a.serving_engine = "sglang";
  a.mem_fraction_static = mem_fraction_static;
  return a;
}

}  // namespace

TEST_CASE("sglang fit: the largest context length whose request fits the pool", "[quick][predict]") {
  // At 0.88 the pool holds 444,436 tokens: every request up to the model's 131,072 positions fits.
  SglangFitResult r = fit_sglang_serving(make_request(sglang_at(0.88)), SglangQuestion::kMaxModelLen);
  CHECK(r.pool.max_total_num_tokens == 444436);
  CHECK(r.answer == 131072);
  // At 0.2: rest = 68,391,460,864 - 0.8 x 84,485,537,792 = 803,030,630.4 B / 131,072 = 6,126.6 -> 6,126
  // tokens; max_req_len = min(context_len - 1, 6,125): a context length of 6,126 holds its longest request.
  r = fit_sglang_serving(make_request(sglang_at(0.2)), SglangQuestion::kMaxModelLen);
  CHECK(r.pool.max_total_num_tokens == 6126);
  CHECK(r.answer == 6126);
  // A pool SGLang refuses answers none.
  r = fit_sglang_serving(make_request(sglang_at(0.15)), SglangQuestion::kMaxModelLen);
  CHECK_FALSE(r.refusal.empty());
  CHECK(r.answer == 0);
}

TEST_CASE("sglang fit: requests of context_len the pool holds at once", "[quick][predict]") {
  // --max-model-len 8192 (SGLang's --context-length): 444,436 // 8,192 = 54 (max_running_requests: 444,436 /
  // 8,192 x 512 = 27,777 -> capped at 4096).
  RequestArgs a = sglang_at(0.88);
  a.max_model_len = 8192;
  SglangFitResult r = fit_sglang_serving(make_request(a), SglangQuestion::kMaxNumSeqs);
  CHECK(r.answer == 54);
  CHECK(r.pool.max_running_requests == 4096);
  // The model's 131,072: 444,436 // 131,072 = 3.
  r = fit_sglang_serving(make_request(sglang_at(0.88)), SglangQuestion::kMaxNumSeqs);
  CHECK(r.answer == 3);
}

TEST_CASE("sglang fit: the smallest mem_fraction_static for one context_len request", "[quick][predict]") {
  // rest >= 131,072 x 131,072 = 17,179,869,184 B: f >= 1 - (68,391,460,864 - 17,179,869,184) /
  // 84,485,537,792 = 0.393842 -> 0.3939 (the pool there: 131,109 tokens >= 131,072); SGLang 0.5's default
  // here is 0.834 (test_sglang_memory_pool.cpp).
  const SglangFitResult r =
      fit_sglang_serving(make_request(sglang_at(0.88)), SglangQuestion::kMemFractionStatic);
  CHECK(r.answer_fraction == Approx(0.3939).margin(1e-9));
  CHECK(r.default_fraction == 0.834);
  // vLLM's questions are vLLM's: gpu-memory-utilization is refused with SGLang.
  CHECK(parse_sglang_question("gpu-memory-utilization") == std::nullopt);
  // And SGLang's are refused without it.
  CHECK_THROWS_AS(fit_sglang_serving(make_request(test::served_on_h100()), SglangQuestion::kMaxModelLen),
                  InputError);
}

TEST_CASE("sglang fit: the tensor-parallel size whose pool holds one request", "[quick][predict]") {
  // Llama-3.1-70B in bf16 (141 GB of weights) on H100s with SGLang 0.5's default fraction per size: at TP 1
  // the weights alone pass the GPU, so SGLang refuses; at TP 2 each rank holds about 65.7 GiB of weights, and
  // 0.833 x 78.7 GiB = 65.6 GiB leaves no pool: refused too; TP 4 (0.823) holds it.
  RequestArgs a = test::served_on_h100("llama-3.1-70b");
  a.serving_engine = "sglang";
  const SglangTpPlan plan = plan_sglang_tensor_parallel(a);
  REQUIRE(plan.rows.size() == 4);
  CHECK(plan.rows[0].mem_fraction_static == 0.834);
  CHECK(plan.rows[1].mem_fraction_static == 0.833);
  CHECK(plan.rows[2].mem_fraction_static == 0.823);
  CHECK(plan.rows[3].mem_fraction_static == 0.817);
  CHECK_FALSE(plan.rows[0].refusal.empty());
  CHECK_FALSE(plan.rows[1].holds_one_request);
  CHECK(plan.rows[2].holds_one_request);
  CHECK(plan.smallest_tp_that_holds == 4);
}
