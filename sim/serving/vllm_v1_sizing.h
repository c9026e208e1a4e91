// predict's side of vLLM's V1 engine start-up (--kv-cache paged --vllm-version v1): the engine arguments with
// vLLM's defaults filled in, the weights of one tensor-parallel rank, the profile run's peak, the
// communication buffers, and the KV cache that is left (sim/inference/vllm_v1_startup.h has the arithmetic
// and its sources). Pure: no op graph and no allocator run.
#pragma once

#include "sim/predict/step_prediction.h"

namespace vramsim {

// The start-up of one rank as vLLM V1 logs it; `paged.v1` holds the V1 lines, the other fields what the
// serving run uses (num_gpu_blocks, block_bytes of every layer, the settings). A start-up vLLM would refuse
// sets `paged.refusal`. Throws InputError for settings vLLM's configs reject.
Prediction::Generation::Paged size_vllm_v1_cache(const PredictRequest& request);

}  // namespace vramsim
