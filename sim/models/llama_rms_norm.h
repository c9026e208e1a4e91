// LlamaRMSNorm as transformers runs it (models/llama/modeling_llama.py LlamaRMSNorm.forward; the same
// statements in Qwen2RMSNorm, the Qwen2-VL / 2.5-VL vision blocks' norms and MllamaTextRMSNorm): the input
// upcast to fp32, variance = pow(2).mean(-1), x * rsqrt(variance + eps), cast back to the input's dtype, then
// weight *. Every step is its own eager kernel, so each intermediate is an allocation; the locals
// `hidden_states` and `variance` live until forward returns.
#pragma once

#include <string>

#include "sim/torch/torch_ops.h"

namespace vramsim {

// Emits the norm of `x` with weight `w` under the op names `name`.<step>; returns the output, x's dtype.
VarId llama_rms_norm(TorchOps& ops, const std::string& name, VarId x, VarId w);

}  // namespace vramsim
