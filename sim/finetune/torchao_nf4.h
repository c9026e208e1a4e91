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
#include <functional>
#include <string>
#include <vector>

#include "sim/finetune/bnb_quant.h"
#include "sim/graph/eager_tape.h"
#include "sim/parallel/data_parallel.h"

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
// `resident_numel` (optional): the elements of a flat tensor a rank keeps under FSDP2 (its shard).
// torchtune's load_from_full_model_state_dict (torchtune/training/_distributed.py) then quantizes the whole
// weight on the device (to_nf4), cuts it with torch.chunk along dim 0 (NF4Tensor's nf4_split: each of
// quantized_data, quantized_scalers and quantization_factor split into equal flat chunks) and keeps this
// rank's chunk in fresh tensors (full_tensor.new_zeros(chunk.size()), nf4_new_zeros, then copy_); scaler_mean
// and the nf4 table are the whole NF4Tensor's, kept whole on every rank.
VarId load_torchao_nf4_weight(EagerTape& tape, const std::string& name, std::int64_t out_features,
                              std::int64_t in_features, DType dtype, BnbWeights& weights,
                              const std::function<std::int64_t(std::int64_t)>& resident_numel = nullptr);

// NF4Tensor.fsdp_pre_all_gather (torchao/dtypes/nf4tensor.py): FSDP2 all-gathers quantized_scalers (int8,
// n / 64), quantization_factor (the weight's dtype, n / (64 x 256)) and quantized_data (uint8, n / 2) of a
// weight of n elements, in that order; scaler_mean and nf4 go as metadata, and fsdp_post_all_gather wraps
// the gathered tensors in an NF4Tensor of the full shape without copying.
std::vector<AllGatherInput> torchao_nf4_all_gather_inputs(const BnbWeight& w);

// linear_nf4(x, weight) (+ bias) on x [..., in]. Returns [..., out] in x's dtype (one reference); x is not
// dropped.
VarId torchao_linear_nf4(TorchOps& ops, const std::string& name, VarId x, VarId weight, VarId bias,
                         const BnbWeight& w);

}  // namespace vramsim
