// torchao's NF4 weights (torchao/dtypes/nf4tensor.py: NF4Tensor, linear_nf4), as torchtune's QLoRA runs them
// (LoRALinear(quantize_base=True) and FrozenNF4Linear: every linear layer but the output projection; no
// parameter is cast to fp32, unlike PEFT's prepare_model_for_kbit_training).
//
// Storage of one weight of n elements (to_nf4, block_size 64, scaler_block_size 256):
//   quantized_data       uint8, n / 2 (two 4-bit codes per byte)
//   quantized_scalers    int8, n / 64 (each block's absmax, double-quantized linearly)
//   quantization_factor  the weight's dtype, n / (64 x 256)
//   scaler_mean          the weight's dtype, one element
//   nf4                  the 16-entry lookup table in the weight's dtype, one per weight
// torchao asserts n % 64 == 0 and (n / 64) % 256 == 0.
//
// linear_nf4 (the autograd Function LinearNF4): forward F.linear(x, weight.to(x.dtype)), saving only the
// NF4 weight; backward grad_output @ weight.to(grad_output.dtype). `.to` runs get_original_weight in eager
// PyTorch each time: the high and low nibbles as int64 indices, their lookups, the scalers, the scalers
// expanded and flattened (a copy, twice), the scaled halves, and torch.stack's output; every local lives
// until the function returns, so its peak is ~14n bytes for a 16-bit weight of 2n.
#pragma once

#include <cstdint>
#include <string>

#include "sim/finetune/bnb_quant.h"
#include "sim/graph/eager_tape.h"

namespace vramsim {

class TorchOps;

struct TorchaoNf4Bytes {
  Bytes quantized_data = 0;
  Bytes quantized_scalers = 0;
  Bytes quantization_factor = 0;
  Bytes scaler_mean = 0;
  Bytes nf4 = 0;
  Bytes total() const { return quantized_data + quantized_scalers + quantization_factor + scaler_mean + nf4; }
};
inline constexpr std::int64_t kTorchaoNf4Block = 64;
inline constexpr std::int64_t kTorchaoScalerBlock = 256;
// `dtype`: the weight's before quantization. Throws InputError naming `name` when torchao's divisibility
// asserts would fail.
TorchaoNf4Bytes torchao_nf4_bytes(std::int64_t numel, DType dtype, const std::string& name);

// to_nf4(weight) at model construction: the weight made in `dtype`, quantized, and only the NF4Tensor kept.
// Returns the frozen parameter (its storage the quantized data) and records it in `weights`.
VarId load_torchao_nf4_weight(EagerTape& tape, const std::string& name, std::int64_t out_features,
                              std::int64_t in_features, DType dtype, BnbWeights& weights);

// linear_nf4(x, weight) (+ bias) on x [..., in]. Returns [..., out] in x's dtype (one reference); x is not
// dropped.
VarId torchao_linear_nf4(TorchOps& ops, const std::string& name, VarId x, VarId weight, VarId bias,
                         const BnbWeight& w);

}  // namespace vramsim
