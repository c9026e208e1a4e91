// `fit` for vLLM serving (--kv-cache paged, --vllm-version v1): the questions a serving user asks of the V1
// engine's start-up arithmetic (vllm_v1_sizing.h), each answered by re-sizing the start-up, never by running
// the allocator model:
//
//   max-model-len           the largest max_model_len that starts at this gpu_memory_utilization: vLLM's own
//                           estimate_max_model_len (kv_cache_utils.py; the length whose cdiv(len, block_size)
//                           blocks of every layer fit in the available memory), at most the model's
//                           max_position_embeddings. The profile run does not depend on max_model_len in V1
//                           (chunked prefill: max_num_batched_tokens tokens), so one sizing answers it.
//   max-num-seqs            the largest max_num_seqs whose max_num_seqs requests of max_model_len tokens all
//                           hold their blocks at once (get_max_concurrency_for_kv_cache_config >=
//                           max_num_seqs), searched because the sampler's dummy run grows with max_num_seqs;
//                           at most max_num_batched_tokens (SchedulerConfig._verify_args).
//   gpu-memory-utilization  the largest utilization (four decimals, as vLLM prints it) whose serving process
//                           stays within (1 - margin) of the device: CUDA context + buffers allocated before
//                           vLLM's snapshot + utilization x total (weights, activations, non-torch and KV
//                           cache, which vLLM fills to the budget) + the CUDA graphs when they are outside
//                           the budget (--vllm-cudagraph-memory absent: counted as 0, said in the answer); it
//                           must also start (one max_model_len request fits).
//   max-loras               with --enable-lora: the largest max_loras (adapter slots, vllm_lora.h) with which
//                           the engine still starts at this max_model_len, searched as the slots grow
//                           linearly; at most max_num_seqs (a batch uses at most one adapter a request).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sim/predict/step_prediction.h"

namespace vramsim {

enum class ServingQuestion : std::uint8_t { kMaxModelLen, kMaxNumSeqs, kGpuMemoryUtilization, kMaxLoras };

// "max-model-len" | "max-num-seqs" | "gpu-memory-utilization" | "max-loras"; nullopt for other --vary values.
std::optional<ServingQuestion> parse_serving_question(std::string_view text);

struct ServingTrial {
  std::int64_t value = 0;  // max_num_seqs (or max_loras) tried
  std::int64_t num_gpu_blocks = 0;
  std::int64_t needed_blocks = 0;  // value x one request's blocks (cdiv(max_model_len, block_size) per group)
  bool starts = false;             // no refusal at start-up
  bool fits = false;
};

struct ServingFitResult {
  ServingQuestion question = ServingQuestion::kMaxModelLen;
  double gpu_memory_utilization = 0.0;
  std::int64_t max_model_len = 0;
  std::int64_t max_num_batched_tokens = 0;
  std::int64_t max_num_seqs = 0;  // as configured (max-num-seqs: the trials vary it)
  std::int64_t block_size = 0;
  std::int64_t total_bytes = 0;
  std::int64_t available_bytes = 0;  // at the settings asked (max-model-len) or at the answer
  std::int64_t kv_cache_tokens = 0;
  std::string refusal;                    // vLLM's refusal at the settings as given ("" : it starts)
  std::vector<ServingTrial> trials;       // max-num-seqs, max-loras
  std::int64_t outside_budget_bytes = 0;  // context + before the snapshot (gpu-memory-utilization)
  double margin = 0.0;
  std::int64_t answer = 0;          // max_model_len, max_num_seqs or max_loras (0: none)
  double answer_utilization = 0.0;  // gpu-memory-utilization (0: none)
  double min_utilization = 0.0;     // what one max_model_len request needs
};

// Throws InputError when the request is not a V1 paged-cache serving one.
ServingFitResult fit_vllm_serving(const PredictRequest& request, ServingQuestion question, double margin);

// `fit --vary tp`: the same serving request at tensor-parallel sizes 1, 2, 4 and 8 (vLLM's custom all-reduce
// sizes, one node), each one rank's start-up; a size the model cannot be split into is kept with its error.
struct ServingTpRow {
  int tp = 0;
  std::string error;  // the InputError of this size ("" : sized)
  std::int64_t weights_bytes = 0;
  std::int64_t available_bytes = 0;
  std::int64_t kv_cache_tokens = 0;
  double max_concurrency = 0.0;
  std::string refusal;  // vLLM's refusal ("" : it starts)
};
struct ServingTpPlan {
  std::int64_t max_model_len = 0;
  std::vector<ServingTpRow> rows;
  int smallest_tp_that_starts = 0;  // 0: none does
};
ServingTpPlan plan_vllm_tensor_parallel(const RequestArgs& args);

}  // namespace vramsim
