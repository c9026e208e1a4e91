// vLLM's weight formats (vllm_weight_formats.h): the bytes of a decoder layer's linear weight after loading.
#include "sim/inference/vllm_weight_formats.h"

#include <cstdint>
#include <string>

#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/models/model_config.h"

namespace vramsim {
namespace {

// W4A16 (--quantization gptq|awq: 4-bit, group_size 128, symmetric GPTQ without act-order, AWQ with zero
// points, the common "-GPTQ-Int4" / "-AWQ" checkpoints, run by vLLM's Marlin kernels on Ampere and later): a
// linear weight [out, in] of the rank keeps, after MarlinLinearKernel.process_weights_after_loading,
//   qweight  int32 [in / 8, out]             in x out / 2 B  (gptq_marlin.py / awq_marlin.py create_weights;
//                                                             gptq_marlin_repack keeps the size)
//   scales   model dtype [in / 128, out]     sharded with the rank's in (desc_act off)
//   qzeros   int32 [in / 128, out / 8]       AWQ only (awq_to_marlin_zero_points keeps the size); GPTQ's is
//                                             replaced by marlin_make_empty_g_idx, as is g_idx
// The Marlin workspace (marlin_make_workspace_new: one int32 per SM per layer, about 1 KiB) is not counted.
constexpr std::int64_t kW4GroupSize = 128;
Bytes w4a16_linear_bytes(const ParameterShape& s, Bytes dtype_bytes, bool awq) {
  const std::int64_t in = s.shape.back();
  const std::int64_t out = s.numel() / in;
  if (in % kW4GroupSize != 0) {
    throw InputError(
        fmt::format("--quantization {}: {} has {} input features, not a multiple of the group size {}",
                    awq ? "awq" : "gptq", s.name, in, kW4GroupSize));
  }
  const auto groups = static_cast<Bytes>(in / kW4GroupSize);
  const Bytes qweight = static_cast<Bytes>(in) * static_cast<Bytes>(out) / 2;
  const Bytes scales = groups * static_cast<Bytes>(out) * dtype_bytes;
  const Bytes qzeros = awq ? groups * static_cast<Bytes>(out) / 2 : 0;
  return qweight + scales + qzeros;
}

// One-byte weights (float8_e4m3fn or int8) of a linear [out, in] of the rank, with their float32 scales:
//   fp8        Fp8LinearMethod (fp8.py), runtime from a 16-bit checkpoint or a per-tensor FP8 checkpoint:
//              process_weights_after_loading leaves one scale a layer (scaled_fp8_quant;
//              requantize_with_max_scale for fused shards)
//   fp8-block  Fp8LinearMethod with the checkpoint's weight_block_size [128, 128] (DeepSeek-V3, Qwen3-*-FP8):
//              weight_scale_inv, BlockQuantScaleParameter [cdiv(out, 128), cdiv(in, 128)];
//              validate_fp8_block_shape refuses a rank's partition the block does not divide
//   w8a8-int8  compressed-tensors CompressedTensorsW8A8Int8 / CompressedTensorsW8A8Fp8 (the "-quantized.w8a8"
//   w8a8-fp8   / "-FP8-dynamic" checkpoints: strategy channel, dynamic symmetric activations):
//              ChannelQuantScaleParameter [out, 1]; the CUTLASS kernels transpose the weight, same bytes
constexpr std::int64_t kFp8Block = 128;
Bytes one_byte_linear_bytes(const ParameterShape& s, const std::string& quantization, int tp) {
  const std::int64_t in = s.shape.back();
  const std::int64_t out = s.numel() / in;
  const auto n = static_cast<Bytes>(s.numel());
  if (quantization == "fp8") {
    return n + 4;
  }
  if (quantization == "fp8-block") {
    // MLA's down-projections (q_a_proj, kv_a_proj_with_mqa: deepseek_v2.py ReplicatedLinear) are whole on
    // every rank, not partitioned, so validate_fp8_block_shape has no partition to check (576 rows of
    // DeepSeek-V3's kv_a_proj_with_mqa are not a multiple of 128).
    const bool replicated = s.name.find("kv_a_proj_with_mqa") != std::string::npos ||
                            s.name.find("q_a_proj") != std::string::npos;
    if (tp > 1 && !replicated && (in % kFp8Block != 0 || out % kFp8Block != 0)) {
      // A routed expert sliced by TP: vLLM's Fp8MoEMethod.create_weights refuses it the same way ("The
      // output_size of gate's and up's weight = ... is not divisible by weight quantization block_n"), and
      // --enable-expert-parallel keeps the experts whole (vllm_expert_parallel.h).
      const bool expert = s.name.find(".experts.") != std::string::npos;
      throw InputError(fmt::format(
          "--quantization fp8-block: {} of this rank is {} x {}, not divisible by the weight quantization "
          "block 128 x 128 (vLLM's validate_fp8_block_shape refuses it){}",
          s.name, out, in, expert ? "; --enable-expert-parallel keeps each expert whole" : ""));
    }
    const auto blocks =
        static_cast<Bytes>(((out + kFp8Block - 1) / kFp8Block) * ((in + kFp8Block - 1) / kFp8Block));
    return n + 4 * blocks;
  }
  return n + 4 * static_cast<Bytes>(out);  // w8a8-int8, w8a8-fp8
}

}  // namespace

bool vllm_format_one_byte(const std::string& quantization) {
  return quantization == "fp8" || quantization == "fp8-block" || quantization == "w8a8-int8" ||
         quantization == "w8a8-fp8";
}

// compressed-tensors W4A16 (CompressedTensorsWNA16, symmetric, group 128, no act-order) is kept by the same
// MarlinLinearKernel as symmetric GPTQ: weight_packed in x out / 2 B and the group scales.
bool vllm_format_four_bit(const std::string& quantization) {
  return quantization == "gptq" || quantization == "awq" || quantization == "w4a16";
}

bool vllm_quantizes(const ParameterShape& parameter) {
  return parameter.layer >= 0 && parameter.shape.size() >= 2;
}

Bytes vllm_linear_weight_bytes(const ParameterShape& linear, const std::string& quantization,
                               Bytes dtype_bytes, int tp) {
  if (vllm_format_four_bit(quantization)) {
    return w4a16_linear_bytes(linear, dtype_bytes, quantization == "awq");
  }
  if (vllm_format_one_byte(quantization)) {
    return one_byte_linear_bytes(linear, quantization, tp);
  }
  return static_cast<Bytes>(linear.numel()) * dtype_bytes;
}

}  // namespace vramsim
