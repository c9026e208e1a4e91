#include "sim/serving/sglang_serving_fit.h"

#include <algorithm>
#include <cmath>

#include "sim/core/error.h"
#include "sim/serving/serving_tp_sweep.h"
#include "sim/serving/sglang_sizing.h"

namespace vramsim {
namespace {

using Paged = Prediction::Generation::Paged;

void require_sglang_serving(const PredictRequest& r) {
  if (r.vllm.engine != "sglang" || r.options.generate_tokens <= 0 || r.options.kv_cache != "paged") {
    throw InputError(
        "--vary max-model-len / max-num-seqs / mem-fraction-static / tp with SGLang: for --generate N "
        "--kv-cache paged --serving-engine sglang");
  }
}

}  // namespace

std::optional<SglangQuestion> parse_sglang_question(std::string_view text) {
  if (text == "max-model-len") {
    return SglangQuestion::kMaxModelLen;
  }
  if (text == "max-num-seqs") {
    return SglangQuestion::kMaxNumSeqs;
  }
  if (text == "mem-fraction-static") {
    return SglangQuestion::kMemFractionStatic;
  }
  return std::nullopt;
}

SglangFitResult fit_sglang_serving(const PredictRequest& request, SglangQuestion question) {
  require_sglang_serving(request);
  SglangFitResult out;
  out.question = question;
  out.max_position_embeddings = request.model.max_positions;  // 0: not known
  const Paged g = size_sglang_pool(request);
  out.pool = *g.sglang;
  out.refusal = g.refusal;
  const Paged::Sglang& s = out.pool;
  // SGLang's default for this GPU and size: the same request with the fraction unset.
  PredictRequest unset = request;
  unset.vllm.mem_fraction_static = 0.0;
  out.default_fraction = size_sglang_pool(unset).sglang->mem_fraction_static;
  const std::int64_t tokens = g.refusal.empty() ? s.max_total_num_tokens : 0;
  switch (question) {
    case SglangQuestion::kMaxModelLen:
      out.answer = out.max_position_embeddings > 0 ? std::min(tokens, out.max_position_embeddings) : tokens;
      break;
    case SglangQuestion::kMaxNumSeqs:
      out.answer = std::min(tokens / s.context_len, s.max_running_requests);
      break;
    case SglangQuestion::kMemFractionStatic: {
      // rest = available - total x (1 - f) >= L x cell  <=>  f >= 1 - (available - L x cell) / total.
      const double need = static_cast<double>(s.context_len) * static_cast<double>(s.cell_size_bytes);
      const double f = 1.0 - (static_cast<double>(s.available_after_load_bytes) - need) /
                                 static_cast<double>(s.total_gpu_memory_bytes);
      double up = std::ceil(f * 1e4) / 1e4;
      // The pool floors its token count: step up until the re-sized pool holds the request.
      for (int i = 0; i < 3 && up < 1.0; ++i) {
        PredictRequest r = request;
        r.vllm.mem_fraction_static = std::max(up, 1e-4);
        const Paged t = size_sglang_pool(r);
        if (t.refusal.empty() && t.sglang->max_total_num_tokens >= s.context_len) {
          break;
        }
        up += 1e-4;
      }
      out.answer_fraction = up < 1.0 ? std::max(up, 1e-4) : 0.0;
      break;
    }
  }
  return out;
}

SglangTpPlan plan_sglang_tensor_parallel(const RequestArgs& args) {
  SglangTpPlan plan;
  plan.rows =
      sweep_serving_tensor_parallel<SglangTpRow>(args, [&](const PredictRequest& r, SglangTpRow& row) {
        require_sglang_serving(r);
        const Paged g = size_sglang_pool(r);
        const Paged::Sglang& s = *g.sglang;
        plan.context_len = s.context_len;
        row.mem_fraction_static = s.mem_fraction_static;
        row.weights_bytes = s.weights_bytes;
        row.refusal = g.refusal;
        row.max_total_num_tokens = g.refusal.empty() ? s.max_total_num_tokens : 0;
        row.max_running_requests = s.max_running_requests;
        row.holds_one_request = g.refusal.empty() && s.max_total_num_tokens >= s.context_len;
      });
  for (const SglangTpRow& row : plan.rows) {
    if (row.holds_one_request) {
      plan.smallest_tp_that_holds = row.tp;
      break;
    }
  }
  return plan;
}

}  // namespace vramsim
