// The bytes a decoder layer's linear weight takes on a GPU under vLLM's weight formats (`vllm serve
// --quantization`), after process_weights_after_loading: what "Model loading took" counts
// (sim/serving/vllm_v1_sizing.cpp) and what the served batch's graph holds (build_generation), from one rule.
#pragma once

#include <string>

#include "sim/core/types.h"

namespace vramsim {

struct ParameterShape;

// The --quantization values modelled: "" (the model dtype), fp8, fp8-block, w8a8-int8, w8a8-fp8 (one-byte
// weights and float32 scales), gptq, awq, w4a16 (4-bit Marlin weights and group scales).
bool vllm_format_one_byte(const std::string& quantization);
bool vllm_format_four_bit(const std::string& quantization);

// Bytes of `linear` (a decoder layer's [out, in] weight of this rank, `tp` ranks) stored in `quantization`,
// the scales included; `dtype_bytes` is the model dtype's (the W4A16 group scales are in it). For "" the
// weight's numel x dtype_bytes. Throws InputError where vLLM refuses the shape (fp8-block's 128 x 128 block,
// W4A16's group of 128).
Bytes vllm_linear_weight_bytes(const ParameterShape& linear, const std::string& quantization,
                               Bytes dtype_bytes, int tp);

// Whether `parameter` is one vLLM's quantization methods store in the format: a decoder layer's 2-D (or
// stacked-expert) weight. Norms, embeddings and the head stay in the model dtype.
bool vllm_quantizes(const ParameterShape& parameter);

}  // namespace vramsim
