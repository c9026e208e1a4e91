// predict's side of SGLang's start-up (--kv-cache paged --serving-engine sglang): the KV pool
// ModelRunner.profile_max_num_token sizes from mem_fraction_static (sim/inference/sglang_memory_pool.h has
// the arithmetic and its sources). Pure: no op graph and no allocator run.
#pragma once

#include "sim/predict/step_prediction.h"

namespace vramsim {

// One rank's pool: `paged.sglang` holds SGLang's lines; the other fields describe the pool as one-token
// blocks (page_size 1) for the served batch: num_gpu_blocks = max_total_num_tokens + page_size rows of
// block_bytes = cell_size. A pool SGLang refuses sets `paged.refusal`. Throws InputError for settings it
// does not model.
Prediction::Generation::Paged size_sglang_pool(const PredictRequest& request);

}  // namespace vramsim
