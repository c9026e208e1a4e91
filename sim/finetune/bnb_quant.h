// bitsandbytes quantized linear layers, as transformers' BitsAndBytesConfig installs them
// (replace_with_bnb_linear: every nn.Linear / Conv1D but the output layer, lm_head, which
// get_keys_to_not_convert keeps) and bitsandbytes 0.42-0.43 runs them (bitsandbytes/nn/modules.py,
// functional.py, autograd/_functions.py).
//
// Storage (what Params4bit / Int8Params keep on the device, per weight of n = out x in elements):
//   4-bit (nf4, fp4): the codes packed two per byte, (n + 1) / 2 bytes of uint8 (quant_storage), a float32
//     absmax per block of 64 (4 * ceil(n / 64) bytes) and the 16-entry float32 code table (64 bytes).
//     Double quantization (bnb_4bit_use_double_quant) stores the absmax as uint8 (ceil(n / 64) bytes), with
//     a float32 absmax per 256 of them, a float32 offset (their mean) and shares one 256-entry float32
//     dynamic map (1 KiB) per process.
//   8-bit (LLM.int8): the weight as int8 (n bytes) and a float32 scale per output row (SCB, 4 * out bytes).
//
// Temporaries of a forward (Linear4bit / MatMul4Bit): x cast to the compute dtype when it differs; the
// whole weight dequantized (out x in, in the dtype the model was loaded in), a copy in the compute dtype
// when that differs; the output; its cast back to x's dtype. Nothing is saved for backward (the packed
// weight is a parameter; older releases also kept A: BnbOptions::matmul4bit_saves_input); the backward
// dequantizes the weight again for the input gradient.
// A single-token inference input takes gemv_4bit, which dequantizes nothing.
// Linear8bitLt / MatMul8bitLt (has_fp16_weights=False, llm_int8_threshold 6.0): x cast to fp16, quantized
// row- and column-wise (two int8 copies, their float32 scales), the col32 layout copy, an int32 product,
// its fp16 dequantization, a cast back to x's dtype and a clone; saves x, the column-wise int8 copy and its
// scales. Its backward quantizes the fp16 gradient the same way and dequantizes the weight in x's dtype.
// See Note [LLM.int8 outliers] in bnb_quant.cpp for what is assumed about outlier columns.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "sim/graph/eager_tape.h"
#include "sim/training/training_options.h"

namespace vramsim {

class TorchOps;
struct ParameterShape;

// "--base-weights nf4|fp4|int8"; throws InputError naming `option`.
BnbFormat parse_base_weights(std::string_view text, std::string_view option = "--base-weights");
// "--bnb-compute-dtype fp32|fp16|bf16"; throws InputError naming `option`.
DType parse_bnb_compute_dtype(std::string_view text, std::string_view option = "--bnb-compute-dtype");
// "--bnb-quant-storage uint8|fp32|fp16|bf16" (bnb_4bit_quant_storage); throws InputError naming `option`.
DType parse_bnb_quant_storage(std::string_view text, std::string_view option = "--bnb-quant-storage");
std::string_view base_weights_name(BnbFormat f);  // "nf4", "fp4", "int8"; "" for kNone

// Bytes (as requested from the allocator) of one quantized weight's tensors.
struct Bnb4bitBytes {
  Bytes packed = 0;   // (n + 1) / 2 uint8
  Bytes absmax = 0;   // fp32 per block of 64; uint8 with double quantization
  Bytes absmax2 = 0;  // double quantization: fp32 per 256 absmax values
  Bytes offset = 0;   // double quantization: the fp32 mean
  Bytes code = 0;     // the fp32 4-bit code table, one per weight
  Bytes total() const { return packed + absmax + absmax2 + offset + code; }
};
inline constexpr std::int64_t kBnb4bitBlock = 64;
inline constexpr std::int64_t kBnbNestedBlock = 256;
Bnb4bitBytes bnb_4bit_bytes(std::int64_t numel, bool double_quant);

struct BnbInt8Bytes {
  Bytes weight = 0;  // int8, out x in
  Bytes scb = 0;     // fp32 per output row
  Bytes total() const { return weight + scb; }
};
BnbInt8Bytes bnb_int8_bytes(std::int64_t out_features, std::int64_t in_features);

// Whether replace_with_bnb_linear converts this parameter's module: the weight of a linear layer (a matrix
// "<module>.weight") that is neither the output layer nor an embedding.
bool is_bnb_target(const ParameterShape& parameter);

// A quantized weight: the parameter (frozen; its shape (out, in), its storage the packed or int8 bytes)
// and the quantization state's other tensors.
struct BnbWeight {
  BnbFormat format = BnbFormat::kNone;
  std::int64_t out_features = 0;
  std::int64_t in_features = 0;
  DType quant_dtype = DType::kFloat16;  // QuantState.dtype: what dequantize_4bit returns
};
using BnbWeights = std::unordered_map<VarId, BnbWeight>;

// Params4bit._quantize / Int8Params.cuda at from_pretrained: the weight arrives in `load_dtype`, is
// quantized on the device, and only the quantized tensors stay. Returns the (frozen) parameter: for 4-bit,
// the packed codes as bitsandbytes shapes them, ((n + 1) / (2 * itemsize), 1) of options.quant_storage.
// `resident_numel` (optional): the elements of the packed parameter a data-parallel rank keeps (its FSDP or
// ZeRO-3 shard); the quantization state (absmax, code table) is not a parameter and stays whole on every
// rank (bitsandbytes' fix_4bit_weight_quant_state_from_module restores it after FSDP flattens the weight).
VarId load_bnb_weight(EagerTape& tape, const std::string& name, std::int64_t out_features,
                      std::int64_t in_features, DType load_dtype, const BnbOptions& options,
                      BnbWeights& weights,
                      const std::function<std::int64_t(std::int64_t)>& resident_numel = nullptr);

// Linear4bit.forward / Linear8bitLt.forward on x [..., in] with an optional bias (kNoVar). Returns the
// output [..., out] in x's dtype (one reference); x is not dropped.
VarId bnb_linear_forward(TorchOps& ops, const std::string& name, VarId x, VarId weight, VarId bias,
                         const BnbWeight& w, const BnbOptions& options);

}  // namespace vramsim
