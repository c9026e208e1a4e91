// Gemma's RMSNorm as transformers runs it (models/gemma/modeling_gemma.py GemmaRMSNorm.forward, the same in
// gemma2, gemma3 and Gemma3MultiModalProjector's mm_soft_emb_norm): the input upcast to fp32,
// x * rsqrt(mean(x^2) + eps), times (1 + weight) in fp32, cast back to the input's dtype. Every step is its
// own eager kernel, so each intermediate is an allocation (the fp32 copies are what makes it cost more than
// LlamaRMSNorm at bf16).
#pragma once

#include <string>

#include "sim/torch/torch_ops.h"

namespace vramsim {

// Emits the norm of `x` with weight `w` under the op names `name`.<step>; returns the output, x's dtype.
VarId gemma_rms_norm(TorchOps& ops, const std::string& name, VarId x, VarId w);

}  // namespace vramsim
