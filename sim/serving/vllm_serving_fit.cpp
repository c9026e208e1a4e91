#include "sim/serving/vllm_serving_fit.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "sim/core/error.h"
#include "sim/serving/serving_tp_sweep.h"
#include "sim/serving/vllm_v1_sizing.h"

namespace vramsim {
namespace {

using Paged = Prediction::Generation::Paged;

void require_v1_serving(const PredictRequest& r) {
  if (r.vllm.engine != "vllm") {
    throw InputError(
        "--vary gpu-memory-utilization: vLLM's serving question; with --serving-engine sglang ask "
        "--vary mem-fraction-static (or max-model-len, max-num-seqs, tp)");
  }
  if (r.options.generate_tokens <= 0 || r.options.kv_cache != "paged" || r.vllm.version != "v1") {
    throw InputError(
        "--vary max-model-len / max-num-seqs / gpu-memory-utilization: vLLM V1 serving questions, for "
        "--generate N --kv-cache paged (--vllm-version v1)");
  }
}

void copy_settings(const Paged& g, ServingFitResult& out) {
  out.gpu_memory_utilization = g.gpu_memory_utilization;
  out.max_model_len = g.max_model_len;
  out.max_num_batched_tokens = g.max_num_batched_tokens;
  out.max_num_seqs = g.max_num_seqs;
  out.block_size = g.block_size;
  out.total_bytes = g.v1->total_bytes;
  out.available_bytes = g.available_bytes;
  out.kv_cache_tokens = g.v1->kv_cache_tokens;
  out.refusal = g.refusal;
  out.min_utilization = g.v1->min_gpu_memory_utilization;
}

// The largest value in 1..cap for which `trial` passes, for a trial that passes up to an edge and fails
// beyond it: a doubling search up to the first failure, then a bisection (0: none passes).
std::int64_t largest_passing(std::int64_t cap, const std::function<bool(std::int64_t)>& trial) {
  std::int64_t good = 0;
  std::int64_t bad = cap + 1;
  for (std::int64_t v = 1;; v = std::min(cap, v * 2)) {
    if (!trial(v)) {
      bad = v;
      break;
    }
    good = v;
    if (v == cap) {
      break;
    }
  }
  while (good > 0 && bad - good > 1) {
    const std::int64_t mid = good + (bad - good) / 2;
    (trial(mid) ? good : bad) = mid;
  }
  return good;
}

// The largest max_num_seqs in 1..max_num_batched_tokens whose requests of max_model_len tokens all hold their
// blocks at once: fewer blocks and more blocks needed as it grows, so the first failure ends a doubling
// search and a bisection finds the edge.
void largest_max_num_seqs(const PredictRequest& request, ServingFitResult& out) {
  const auto trial = [&](std::int64_t seqs) {
    PredictRequest r = request;
    r.vllm.max_num_seqs = seqs;
    const Paged g = size_vllm_v1_cache(r);
    ServingTrial t;
    t.value = seqs;
    t.num_gpu_blocks = g.num_gpu_blocks;
    t.needed_blocks = seqs * g.v1->blocks_per_request;  // cdiv(max_model_len, block_size) without windows
    t.starts = g.refusal.empty();
    t.fits = t.starts && t.num_gpu_blocks >= t.needed_blocks;
    out.trials.push_back(t);
    return t.fits;
  };
  const std::int64_t cap = out.max_num_batched_tokens;
  out.answer = largest_passing(cap, trial);
}

// The largest max_loras in 1..max_num_seqs with which the engine starts: the slots grow with it, so the
// first refusal ends a doubling search and a bisection finds the edge.
void largest_max_loras(const PredictRequest& request, ServingFitResult& out) {
  if (!request.vllm.lora.enabled) {
    throw InputError("--vary max-loras: vLLM's LoRA slots, for --enable-lora");
  }
  const auto trial = [&](std::int64_t loras) {
    PredictRequest r = request;
    r.vllm.lora.max_loras = loras;
    const Paged g = size_vllm_v1_cache(r);
    ServingTrial t;
    t.value = loras;
    t.num_gpu_blocks = g.num_gpu_blocks;
    t.needed_blocks = g.v1->blocks_per_request;
    t.starts = g.refusal.empty();
    t.fits = t.starts;
    out.trials.push_back(t);
    return t.fits;
  };
  const std::int64_t cap = std::max<std::int64_t>(1, out.max_num_seqs);
  out.answer = largest_passing(cap, trial);
}

}  // namespace

std::optional<ServingQuestion> parse_serving_question(std::string_view text) {
  if (text == "max-loras") {
    return ServingQuestion::kMaxLoras;
  }
  if (text == "max-model-len") {
    return ServingQuestion::kMaxModelLen;
  }
  if (text == "max-num-seqs") {
    return ServingQuestion::kMaxNumSeqs;
  }
  if (text == "gpu-memory-utilization") {
    return ServingQuestion::kGpuMemoryUtilization;
  }
  return std::nullopt;
}

ServingFitResult fit_vllm_serving(const PredictRequest& request, ServingQuestion question, double margin) {
  require_v1_serving(request);
  ServingFitResult out;
  out.question = question;
  out.margin = margin;
  const Paged g = size_vllm_v1_cache(request);
  copy_settings(g, out);
  const Paged::V1& s = *g.v1;
  switch (question) {
    case ServingQuestion::kMaxModelLen:
      // kv_cache_utils.estimate_max_model_len's arithmetic (vllm_v1_sizing.cpp's largest_max_model_len).
      out.answer = s.largest_max_model_len;
      break;
    case ServingQuestion::kMaxNumSeqs:
      largest_max_num_seqs(request, out);
      break;
    case ServingQuestion::kMaxLoras:
      largest_max_loras(request, out);
      break;
    case ServingQuestion::kGpuMemoryUtilization: {
      out.outside_budget_bytes = s.context_bytes + s.before_snapshot_bytes;
      const double limit = static_cast<double>(s.total_bytes) * (1.0 - margin);
      const double room = limit - static_cast<double>(out.outside_budget_bytes);
      const double u = std::floor(room / static_cast<double>(s.total_bytes) * 1e4) / 1e4;
      out.answer_utilization = std::min(1.0, u) >= out.min_utilization ? std::min(1.0, u) : 0.0;
      break;
    }
  }
  return out;
}

ServingTpPlan plan_vllm_tensor_parallel(const RequestArgs& args) {
  ServingTpPlan plan;
  plan.rows =
      sweep_serving_tensor_parallel<ServingTpRow>(args, [&](const PredictRequest& r, ServingTpRow& row) {
        require_v1_serving(r);
        const Paged g = size_vllm_v1_cache(r);
        plan.max_model_len = g.max_model_len;
        row.weights_bytes = g.v1->weights_bytes;
        row.available_bytes = g.available_bytes;
        row.kv_cache_tokens = g.v1->kv_cache_tokens;
        row.max_concurrency = g.v1->max_concurrency;
        row.refusal = g.refusal;
      });
  for (const ServingTpRow& row : plan.rows) {
    if (row.error.empty() && row.refusal.empty()) {
      plan.smallest_tp_that_starts = row.tp;
      break;
    }
  }
  return plan;
}

}  // namespace vramsim
