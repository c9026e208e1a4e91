// Hugging Face transformers' model.generate(): a prefill of the prompt, then one forward per new token,
// every forward reading and extending a KV cache (hf_kv_cache.h), under torch.no_grad().
//
// The loop is GenerationMixin._sample with greedy decoding: each forward computes only the last position's
// logits (logits_to_keep=1), generate copies them to fp32 (next_token_logits), takes the argmax, and grows
// input_ids and attention_mask by torch.cat (a new (batch, length + 1) int64 tensor each, the old freed);
// the model output goes at the end of the iteration (`del outputs`).
#pragma once

#include "sim/models/model_config.h"
#include "sim/graph/op_graph.h"
#include "sim/training/training_options.h"

namespace vramsim {

// options.seq is the prompt length, options.generate_tokens the new tokens (> 0), options.kv_cache the
// cache. Step 1 is the prefill (and the first new token); step t + 1 decodes new token t + 1.
// Throws InputError for model code that is not transformers' (no cache to model).
OpGraph build_generation(const ModelConfig& model, const TrainingOptions& options);

}  // namespace vramsim
