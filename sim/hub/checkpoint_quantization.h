// A checkpoint's `quantization_config` (config.json): the format its weights are stored in, read as
// transformers' quantizers read it (quantizers/auto.py dispatches on quant_method), and the bytes those
// weights take on the device as the quantized modules register them:
//   bitsandbytes (BitsAndBytesConfig: load_in_4bit / load_in_8bit, bnb_4bit_quant_type,
//     bnb_4bit_use_double_quant, bnb_4bit_compute_dtype, bnb_4bit_quant_storage): the modelled path of
//     --base-weights (bnb_quant.h), which make_request() takes the config's values into.
//   fp8 (FineGrainedFP8Config, integrations/finegrained_fp8.py FP8Linear): every nn.Linear but lm_head and
//     modules_to_not_convert keeps its weight as float8_e4m3fn (out x in, 1 byte) and a float32
//     weight_scale_inv of ceil(out / block[0]) x ceil(in / block[1]) (weight_block_size; DeepSeek-V3 ships
//     [128, 128]).
//   mxfp4 (Mxfp4Config, integrations/mxfp4.py Mxfp4GptOssExperts; gpt-oss only): the experts' gate_up_proj
//     and down_proj as uint8 blocks (two 4-bit values a byte, 16 bytes per 32 values) and a uint8 (E8M0)
//     scale per 32 values; their biases float32; attention, router, embeddings and lm_head in torch_dtype.
//   gptq (GPTQConfig; AutoGPTQ's QuantLinear, qlinear_triton.py): qweight int32 (in / 32 * bits, out),
//     qzeros int32 (ceil(in / group), out / 32 * bits), scales float16 (ceil(in / group), out), g_idx int32
//     (in), bias float16; group_size -1 is one group of `in`.
//   awq (AwqConfig, version gemm; AutoAWQ's WQLinear_GEMM, awq/modules/linear/gemm.py): qweight int32
//     (in, out / (32 / bits)), qzeros int32 (in / group, out / (32 / bits)), scales float16 (in / group,
//     out), bias float16.
// Only bitsandbytes is simulated in a step; for the others predict / fit / plan refuse with a "not
// modelled" message that names what was read (describe()) instead of predicting the weights in torch_dtype.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sim/core/types.h"
#include "sim/graph/dtype.h"
#include "sim/training/training_options.h"

namespace vramsim {

struct ModelConfig;
struct ParameterShape;

enum class QuantMethod : std::uint8_t { kBitsandbytes, kFp8, kMxfp4, kGptq, kAwq };

struct CheckpointQuantization {
  QuantMethod method = QuantMethod::kBitsandbytes;
  // bitsandbytes
  BnbFormat bnb_format = BnbFormat::kNone;  // kNf4 / kFp4 (load_in_4bit + bnb_4bit_quant_type), kInt8
  bool bnb_double_quant = false;
  DType bnb_compute_dtype = DType::kFloat32;  // BitsAndBytesConfig's default when unset
  DType bnb_quant_storage = DType::kUInt8;
  // fp8: weight_block_size (rows of out, columns of in)
  std::int64_t block_out = 128;
  std::int64_t block_in = 128;
  // gptq / awq
  std::int64_t bits = 4;
  std::int64_t group_size = 128;  // -1: the whole input dimension
  // Module names (or glob patterns, '*' for any run of characters) kept in torch_dtype.
  std::vector<std::string> modules_to_not_convert;
};

// The config's quantization_config, or nullopt when it has none (or it is null). `root` is the config.json
// object. Throws InputError naming `source` and the key for an unknown quant_method, a missing or mistyped
// key, or a combination transformers rejects.
std::optional<CheckpointQuantization> read_checkpoint_quantization(std::string_view json_text,
                                                                   std::string_view source);
// Same for --model's value: nullopt for a preset name.
std::optional<CheckpointQuantization> checkpoint_quantization_of(const std::string& name_or_path);

std::string_view quant_method_name(QuantMethod method);  // as config.json spells it: "fp8", ...

// Whether the quantizer replaces this parameter's module (the weight of a linear layer that is not lm_head,
// an embedding, a router that is not an nn.Linear, or one of modules_to_not_convert; for mxfp4 the gpt-oss
// experts).
bool is_quantized_weight(const ModelConfig& model, const CheckpointQuantization& q, const ParameterShape& p);

// The device bytes of the quantized weights as the quantized modules register them (their other
// parameters are not counted). Throws InputError for a shape the format cannot store (a dimension the
// packing does not divide).
struct QuantizedWeightBytes {
  std::int64_t weights = 0;  // quantized weights converted
  Bytes packed = 0;          // the values: fp8 bytes, mxfp4 blocks, qweight
  Bytes scales = 0;          // weight_scale_inv, mxfp4 scales, gptq / awq scales
  Bytes zeros = 0;           // gptq / awq qzeros
  Bytes other = 0;           // gptq g_idx, mxfp4 float32 expert biases, gptq / awq float16 biases
  Bytes total() const { return packed + scales + zeros + other; }
};
QuantizedWeightBytes quantized_weight_bytes(const ModelConfig& model, const CheckpointQuantization& q,
                                            std::string_view source);

// Throws InputError "<file>: quantization_config: <describe()>: N weights in B bytes (...); predicting with
// these weights is not modelled ..." unless `q` is bitsandbytes (the modelled --base-weights path).
void refuse_unmodelled_quantization(const CheckpointQuantization& q, const std::string& name_or_path);

// "fp8 (float8_e4m3fn weights, a float32 scale per 128 x 128 block)", ... for messages and reports.
std::string describe(const CheckpointQuantization& q);

}  // namespace vramsim
