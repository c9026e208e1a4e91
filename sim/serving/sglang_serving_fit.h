// `fit` for SGLang serving (--kv-cache paged --serving-engine sglang): the questions a serving user asks of
// SGLang's start-up arithmetic (sim/inference/sglang_memory_pool.h), each answered by re-sizing the pool,
// never by running the allocator model. The pool does not depend on the context length (profile_max_num_token
// reads none), so one sizing answers the first two.
//
//   max-model-len        the largest --context-length whose longest request fits the pool whole: the
//                        scheduler serves requests of at most min(context_len - 1, max_total_num_tokens - 1)
//                        tokens (tp_worker.py: max_req_len), so context_len <= max_total_num_tokens, at most
//                        the model's max_position_embeddings.
//   max-num-seqs         how many requests of --max-model-len (SGLang's context_len) tokens the pool holds at
//                        once, max_total_num_tokens // context_len, at most max_running_requests
//                        (init_memory_pool's default: min(max(tokens / context_len x 512, 2048), 4096)).
//   mem-fraction-static  the smallest mem_fraction_static whose pool holds one context_len request:
//                        rest_memory = available - total_gpu_memory x (1 - f) >= context_len x cell_size, to
//                        four decimals rounded up; beside SGLang's default. (What a larger fraction leaves
//                        for the activations and CUDA graphs is not modelled, so no upper answer is given.)
//   tp                   the same request at tensor-parallel sizes 1, 2, 4 and 8, each rank's pool with the
//                        default fraction of that size; the answer is the smallest size whose pool holds one
//                        context_len request.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sim/predict/step_prediction.h"

namespace vramsim {

enum class SglangQuestion : std::uint8_t { kMaxModelLen, kMaxNumSeqs, kMemFractionStatic };

// "max-model-len" | "max-num-seqs" | "mem-fraction-static"; nullopt for other --vary values.
std::optional<SglangQuestion> parse_sglang_question(std::string_view text);

struct SglangFitResult {
  SglangQuestion question = SglangQuestion::kMaxModelLen;
  Prediction::Generation::Paged::Sglang pool;  // the start-up at the settings as given
  std::string refusal;                         // SGLang's refusal there ("" : it starts)
  std::int64_t max_position_embeddings = 0;    // the model's (0: not known)
  std::int64_t answer = 0;                     // context length or requests (0: none)
  double answer_fraction = 0.0;                // mem-fraction-static (0: none below 1)
  double default_fraction = 0.0;               // SGLang's default for this GPU and TP size
};

// Throws InputError when the request is not an SGLang paged-cache serving one.
SglangFitResult fit_sglang_serving(const PredictRequest& request, SglangQuestion question);

struct SglangTpRow {
  int tp = 0;
  std::string error;  // this size's InputError ("" : sized)
  double mem_fraction_static = 0.0;
  std::int64_t weights_bytes = 0;
  std::int64_t max_total_num_tokens = 0;
  std::int64_t max_running_requests = 0;
  std::string refusal;             // SGLang's ("" : it starts)
  bool holds_one_request = false;  // max_total_num_tokens >= context_len
};
struct SglangTpPlan {
  std::int64_t context_len = 0;
  std::vector<SglangTpRow> rows;
  int smallest_tp_that_holds = 0;  // 0: none
};
SglangTpPlan plan_sglang_tensor_parallel(const RequestArgs& args);

}  // namespace vramsim
