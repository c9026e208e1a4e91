// `vramsim predict` / `fit` as a library: hand-derivable bills, verdicts, the fit search and option errors.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>
#include <string>

#include "run_cli.h"
#include "sim/core/error.h"
#include "sim/graph/tensor_lifetime.h"
#include "sim/models/transformer_builder.h"
#include "sim/predict/step_prediction.h"

using namespace vramsim;

namespace {

constexpr std::int64_t kGpt2Params = 124'439'808;  // tied embeddings; the graph allocates no buffers

RequestArgs gpt2_args(std::int64_t batch, std::int64_t seq) {
  RequestArgs a;
  a.model = "gpt2";
  a.gpu = "h100";
  a.batch = batch;
  a.seq = seq;
  a.precision = "fp32";
  a.optimizer = "adamw";
  a.steps = 2;
  return a;
}

using test::run_cli;

}  // namespace

TEST_CASE("predict: gpt2 fp32 AdamW bill is parameters, gradients and two fp32 moments", "[quick][predict]") {
  const PredictRequest r = make_request(gpt2_args(1, 128));
  REQUIRE(r.model.parameter_count() == kGpt2Params);
  const Prediction p = predict(r);

  // Every parameter tensor the graph allocates is a model parameter (no registered buffers), fp32.
  CHECK(p.bill.parameters == 4 * kGpt2Params);
  CHECK(p.peak_allocated_bytes >= p.bill.parameters);
  CHECK(p.peak_reserved_bytes >= p.peak_allocated_bytes);
  CHECK(p.bill.allocator_overhead == p.peak_reserved_bytes - p.peak_allocated_bytes);
  CHECK(p.num_ooms == 0);
  CHECK(p.fits);
  CHECK(p.headroom_bytes == p.total_bytes - p.cuda_context_bytes - p.peak_reserved_bytes);
  CHECK(p.bill.cuda_context == p.cuda_context_bytes);
  CHECK(p.cuda_context_bytes > 0);

  // Per-step peaks are the allocator model's, within each step: their maximum is the run's peak.
  REQUIRE(p.steps.size() == 2);
  CHECK(std::max(p.steps[0].peak_allocated_bytes, p.steps[1].peak_allocated_bytes) == p.peak_allocated_bytes);
  CHECK(p.peak_allocated_needed_bytes == p.peak_allocated_bytes);  // it fits: nothing was refused
  CHECK(std::max(p.steps[0].peak_reserved_bytes, p.steps[1].peak_reserved_bytes) == p.peak_reserved_bytes);
  CHECK(p.steps[0].peak_reserved_bytes > 0);
  CHECK(p.top_tensors.size() == 5);
  CHECK(p.top_tensors[0].size_bytes >= p.top_tensors[4].size_bytes);

  // Phases of step 2, checked per category with the schedule's markers.
  const OpGraph g = build_training_steps(r.model, r.options);
  const AllocationSchedule s = build_allocation_schedule(g);
  const auto opt_begin = s.phase_begin(2, Phase::kOptimizer);
  REQUIRE(opt_begin);
  const MemoryBill after_backward = live_bill(g, s, opt_begin->event_index);
  CHECK(after_backward.gradients == 4 * kGpt2Params);
  CHECK(after_backward.optimizer_states == 2 * 4 * kGpt2Params);  // exp_avg + exp_avg_sq
  CHECK(after_backward.parameters == 4 * kGpt2Params);
  const auto fwd_begin = s.phase_begin(2, Phase::kForward);
  REQUIRE(fwd_begin);
  const MemoryBill before_forward = live_bill(g, s, fwd_begin->event_index);
  CHECK(before_forward.gradients == 0);  // zero_grad(set_to_none=True)
  CHECK(before_forward.optimizer_states == 2 * 4 * kGpt2Params);

  REQUIRE(p.phases.before_forward);
  REQUIRE(p.phases.after_forward);
  REQUIRE(p.phases.after_backward);
  REQUIRE(p.phases.after_optimizer_step);
  CHECK(*p.phases.before_forward >= 12 * kGpt2Params);  // parameters + two moments, rounded up
  CHECK(*p.phases.after_backward - *p.phases.before_forward >= 4 * kGpt2Params);
  CHECK(*p.phases.after_forward > *p.phases.before_forward);
}

TEST_CASE("predict --inference: no_grad keeps model state only, nothing is saved for backward",
          "[quick][predict]") {
  RequestArgs a = gpt2_args(4, 512);
  a.inference = true;
  const Prediction p = predict(make_request(a));
  // Under torch.no_grad() no autograd node exists: nothing saved, no gradients, no optimizer (not even
  // built).
  CHECK(p.bill.activations == 0);
  CHECK(p.bill.gradients == 0);
  CHECK(p.bill.optimizer_states == 0);
  CHECK(p.bill.parameters == kGpt2Params * 4);
  CHECK_FALSE(p.phases.after_backward.has_value());
  CHECK(p.num_ooms == 0);
  // The same forward with autograd on keeps each layer's saved activations: strictly more at its peak.
  RequestArgs f = gpt2_args(4, 512);
  f.forward_only = true;
  CHECK(predict(make_request(f)).peak_allocated_bytes > p.peak_allocated_bytes);
}

TEST_CASE("predict: a huge batch does not fit on an H100 and the OOM is counted", "[quick][predict]") {
  RequestArgs a = gpt2_args(1024, 1024);
  a.steps = 1;
  const Prediction p = predict(make_request(a));
  CHECK_FALSE(p.fits);
  CHECK(p.num_ooms > 0);
}

TEST_CASE("fit: the answer fits and one more does not", "[quick][predict]") {
  RequestArgs a = gpt2_args(1, 256);
  a.gpu.clear();
  a.capacity = "8GiB";
  a.steps = 1;
  const PredictRequest r = make_request(a);
  const double margin = 0.1;
  const FitResult f = fit(r, FitVary::kBatch, margin);
  REQUIRE(f.best >= 1);
  CHECK(f.limit_bytes == static_cast<std::int64_t>(0.9 * 8.0 * 1024 * 1024 * 1024));
  auto fits_with_margin = [&](std::int64_t batch) {
    PredictRequest q = r;
    q.options.batch = batch;
    const Prediction p = predict(q);
    return p.num_ooms == 0 && p.peak_reserved_bytes + p.cuda_context_bytes <= f.limit_bytes;
  };
  CHECK(fits_with_margin(f.best));
  CHECK_FALSE(fits_with_margin(f.best + 1));
  CHECK(f.trials.size() >= 2);
}

TEST_CASE("fit --vary seq stops at GPT-2's learned positions, which it names", "[quick][predict]") {
  // GPT-2's position table has n_positions = 1024 rows (its config.json): a longer --seq is refused, so on a
  // card where every length fits the search ends at 1024 and says why, instead of failing on 2048.
  RequestArgs a = gpt2_args(1, 256);
  a.gpu.clear();
  a.capacity = "1000TB";
  a.steps = 1;
  const FitResult f = fit(make_request(a), FitVary::kSeq, 0.1);
  CHECK(f.best == 1024);
  CHECK(f.best_is_cap);
  CHECK(f.cap_reason == "the 1024 learned positions of gpt2");
  CHECK(f.trials.back().value <= 1024);
}

TEST_CASE("predict: bad option values are InputErrors naming the option", "[quick][predict]") {
  auto message = [](RequestArgs a) {
    try {
      (void)make_request(a);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  RequestArgs a = gpt2_args(1, 128);
  a.batch = 0;
  CHECK_THAT(message(a), Catch::Contains("--batch"));
  a = gpt2_args(1, 128);
  a.seq = -4;
  CHECK_THAT(message(a), Catch::Contains("--seq"));
  a = gpt2_args(1, 128);
  a.precision = "fp64";
  CHECK_THAT(message(a), Catch::Contains("--precision"));
  a = gpt2_args(1, 128);
  a.optimizer = "lion";
  CHECK_THAT(message(a), Catch::Contains("--optimizer"));
  a = gpt2_args(1, 128);
  a.checkpointing = "some";
  CHECK_THAT(message(a), Catch::Contains("--checkpointing"));
  a = gpt2_args(1, 128);
  a.attention = "sparse";
  CHECK_THAT(message(a), Catch::Contains("--attention"));
  a = gpt2_args(1, 128);
  a.steps = 0;
  CHECK_THAT(message(a), Catch::Contains("--steps"));
  a = gpt2_args(1, 128);
  a.gpu = "z80";
  CHECK(message(a) != "no error");
  a = gpt2_args(1, 128);
  a.model = "no-such-model";
  CHECK(message(a) != "no error");
  a = gpt2_args(1, 128);
  a.gpu.clear();
  a.capacity = "-1GB";
  CHECK_THAT(message(a), Catch::Contains("--capacity"));
  a = gpt2_args(1, 128);
  a.capacity = "8GiB";  // both --gpu and --capacity
  CHECK_THAT(message(a), Catch::Contains("--capacity"));
  a = gpt2_args(1, 128);
  a.alloc_conf = "max_split_size_mb:2";
  CHECK_THAT(message(a), Catch::Contains("--alloc-conf"));

  CHECK(parse_margin("10%") == Approx(0.1));
  CHECK(parse_margin("0.25") == Approx(0.25));
  CHECK(parse_margin("0") == 0.0);
  CHECK_THROWS_WITH(parse_margin("100%"), Catch::Contains("--margin"));
  CHECK_THROWS_WITH(parse_margin("-5%"), Catch::Contains("--margin"));
  CHECK_THROWS_WITH(parse_margin("lots"), Catch::Contains("--margin"));
  CHECK_THROWS_WITH(parse_fit_vary("layers"), Catch::Contains("--vary"));
}

TEST_CASE("cli: predict --json has the documented keys, fit prints its answer", "[quick][predict]") {
  const std::string out =
      run_cli("predict --model gpt2 --gpu a100-40gb --batch 2 --seq 128 --steps 2 --json");
  const nlohmann::json j = nlohmann::json::parse(out);
  for (const char* key :
       {"peak_allocated_bytes", "peak_reserved_bytes", "fits", "headroom_bytes", "bill", "phases", "steps"}) {
    CHECK(j.contains(key));
  }
  for (const char* key : {"parameters", "gradients", "optimizer_states", "activations", "temporaries",
                          "allocator_overhead", "cuda_context"}) {
    CHECK(j["bill"].contains(key));
  }
  for (const char* key : {"before_forward", "after_forward", "after_backward", "after_optimizer_step"}) {
    CHECK(j["phases"][key].is_number());
  }
  REQUIRE(j["steps"].size() == 2);
  CHECK(j["steps"][1]["step"] == 2);
  CHECK(j["steps"][1].contains("peak_allocated_bytes"));
  CHECK(j["steps"][1].contains("peak_reserved_bytes"));
  CHECK(j["fits"] == true);

  const std::string bad = run_cli("predict --model gpt2 --gpu h100 --batch 1 --seq 128 --precision fp64");
  CHECK_THAT(bad, Catch::Contains("vramsim: error: --precision"));
  const std::string fit_out = run_cli("fit --model gpt2 --capacity 4GiB --seq 128 --steps 1 --margin 10%");
  CHECK_THAT(fit_out, Catch::Contains("largest batch that fits"));
  CHECK_THAT(run_cli("fit --model gpt2 --gpu h100 --seq 128 --margin 100%"),
             Catch::Contains("vramsim: error: --margin"));
}

TEST_CASE("cli: predict --trace-out writes what the allocator replayed, vramsim replay agrees",
          "[quick][predict]") {
  // Two paths to the same number: predict's own replay of the generated schedule, and `vramsim replay` of the
  // trace file it wrote (read back from disk, initial state rebuilt, replayed from scratch).
  const std::string path = "vramsim_test_predict_trace.vtrace";
  const nlohmann::json p = nlohmann::json::parse(run_cli(
      "predict --model gpt2 --capacity 8GiB --batch 2 --seq 128 --steps 2 --json --trace-out " + path));
  const nlohmann::json r = nlohmann::json::parse(run_cli("replay --json " + path));
  std::remove(path.c_str());
  CHECK(r["peak_reserved_bytes"] == p["peak_reserved_bytes"]);
  CHECK(r["peak_allocated_bytes"] == p["peak_allocated_bytes"]);
  CHECK(r["peak_requested_bytes"] == p["peak_requested_bytes"]);
  // The file has an alloc event per allocation and two events per free (free_requested, then free_completed:
  // a generated free is never delayed); predict counts a free as one request.
  const std::int64_t allocations = p["allocations"];
  const std::int64_t frees = p["requests"].get<std::int64_t>() - allocations;
  CHECK(r["events"] == allocations + 2 * frees);
  CHECK(r["starts_mid_run"] == false);
  CHECK(p["timing"].is_null());  // --capacity: no GPU to time on
}

TEST_CASE("cli: predict on a GPU reports the time estimate per step", "[quick][predict]") {
  const nlohmann::json j = nlohmann::json::parse(
      run_cli("predict --model gpt2 --gpu h100 --batch 4 --seq 512 --precision amp-bf16 --steps 2 --json"));
  REQUIRE(j["timing"].is_object());
  REQUIRE(j["timing"]["steps"].size() == 2);
  const std::int64_t step_ns = j["timing"]["steps"][1]["time_ns"];
  CHECK(step_ns > 0);
  CHECK(j["timing"]["tokens_per_step"] == 4 * 512);
  // tokens/s is the tokens of one step over its time, by definition.
  CHECK(j["timing"]["tokens_per_s"].get<double>() == Approx(4 * 512 * 1e9 / static_cast<double>(step_ns)));
  CHECK(j["timing"]["steps"][1]["compute_bound_ns"].get<std::int64_t>() +
            j["timing"]["steps"][1]["memory_bound_ns"].get<std::int64_t>() ==
        step_ns);
}

TEST_CASE("cli: fit --json lists every trial, the answer fits and the next value tried above it does not",
          "[quick][predict]") {
  const nlohmann::json j = nlohmann::json::parse(
      run_cli("fit --model gpt2 --capacity 4GiB --seq 128 --steps 1 --margin 10% --json"));
  const std::int64_t best = j["best"];
  REQUIRE(best > 0);
  CHECK(j["limit_bytes"] == static_cast<std::int64_t>(0.9 * 4294967296.0));
  bool best_tried = false;
  bool above_tried = false;
  for (const nlohmann::json& t : j["trials"]) {
    const std::int64_t v = t["batch"];
    if (v == best) {
      best_tried = true;
      CHECK(t["fits"] == true);
      CHECK(t["peak_reserved_bytes"].get<std::int64_t>() <= j["limit_bytes"].get<std::int64_t>());
    }
    if (v == best + 1) {
      above_tried = true;
      CHECK(t["fits"] == false);
    }
  }
  CHECK(best_tried);
  CHECK(above_tried);  // bisection ends with lo = best, hi = best + 1, both tried
}

TEST_CASE("predict: --model-code picks whose layer code the graph follows", "[quick][predict]") {
  // kkaitlyn111's student TransformerLM at d768 (memory_small_forward; the test fixture of
  // tests/graph/kkaitlyn111_code.cpp) differs from the CS336 staff code of the same shape; the rise of a
  // forward (peak requested - before forward) tells them apart.
  const auto rise = [](const std::string& code) {
    RequestArgs a;
    a.model = "cs336-small";
    a.model_code = code;
    a.capacity = "80GiB";
    a.batch = 4;
    a.seq = 128;
    a.forward_only = true;
    a.steps = 1;
    const Prediction p = predict(make_request(a));
    return p.steps.at(0).peak_requested_bytes - *p.phases_requested.before_forward;
  };
  const std::int64_t staff = rise("");
  CHECK(rise("cs336-kkaitlyn111") != staff);
  CHECK(rise("cs336-basics") == staff);
  // The product's CLI has the library's codes only: a code that mirrors one person's script is a test's.
  CHECK_THAT(
      run_cli("predict --model gpt2 --gpu h100 --batch 1 --seq 64 --model-code keras"),
      Catch::Contains("vramsim: error: --model-code: unknown model code 'keras' (known: torch-modules, "
                      "cs336-basics)"));
}

TEST_CASE("predict: --warm states the process's history, the rise of a mid-process recording is exact",
          "[quick][predict]") {
  // Peak rises recorded in shared/traces/real (README, "The step simulator against real recorded steps"), by
  // kkaitlyn111's student code (the test fixture "cs336-kkaitlyn111"):
  // memory_files/memory_ctx256_forward_.pickle ran after a ctx 128 forward in the same process (its
  // main-thread cuBLAS workspace already existed): 12,588,752,896 B;
  // memory_files/memory_ctx256_fullstep_.pickle ran after a full step (both workspaces existed):
  // 41,127,485,444 B.
  const auto rise = [](bool forward_only, const std::string& optimizer, const std::string& warm) {
    RequestArgs a;
    a.model = "cs336-2.7b";
    a.model_code = "cs336-kkaitlyn111";
    a.gpu = "h100";
    a.batch = 4;
    a.seq = 256;
    a.steps = 1;
    a.forward_only = forward_only;
    a.optimizer = optimizer;
    a.warm = warm;
    const Prediction p = predict(make_request(a));
    return p.steps.at(0).peak_requested_bytes - *p.phases_requested.before_forward;
  };
  CHECK(rise(true, "adamw", "forward") == 12'588'752'896);
  CHECK(rise(false, "adamw-for-loop", "step") == 41'127'485'444);
  // As a fresh process (the default) the step makes its 32 MiB workspace itself.
  CHECK(rise(true, "adamw", "none") == 12'588'752'896 + 32 * static_cast<std::int64_t>(kMiB));
}
