// AdaLoRA (peft/tuners/adalora, PEFT 5d602fdb): LoRA in SVD form whose ranks are pruned during training.
//
// update_layer (adalora/layer.py AdaLoraLayer.update_layer) adds per targeted layer, with r = init_r
// (AdaLoraModel._create_and_replace passes lora_config.init_r): lora_A (r, in), lora_B (out, r), lora_E (r,
// 1) trainable, and ranknum (1,), a Parameter with requires_grad=False. SVDLinear.forward:
//
//   result = base_layer(x)
//   x = _cast_input_dtype(x, lora_A.dtype)
//   result += (dropout(x) @ (lora_A * lora_E).T @ lora_B.T) * scaling / (ranknum + 1e-5)
//
// so the product lora_A * lora_E (r x in) is a new tensor, saved by the first matmul with the cast input,
// the (tokens x r) product is saved by the second, and the update is added into the base output in place.
//
// AdaLoraModel.forward adds the orthogonality regulariser to the loss (orth_reg_weight, default 0.5): for
// every lora_A, ||A A^T - I||_F, for every lora_B, ||B^T B - I||_F (r x r products and an eye each),
// averaged.
//
// RankAllocator.update_ipt (adalora/layer.py), run by update_and_allocate(global_step) after the optimizer
// step while the gradients exist: for every parameter whose name holds "lora_" (lora_A, lora_B, lora_E) three
// fp32 tensors of its size, ipt, exp_avg_ipt and exp_avg_unc, made by zeros_like at the first call and kept
// for the run; every call rebinds them to new tensors ((p * p.grad).abs(), beta1 * e + (1 - beta1) * ipt,
// beta2 * u + (1 - beta2) * (ipt - e).abs()). The budget masking starts after tinit (200) steps.
#pragma once

#include <vector>

#include "sim/finetune/peft_lora.h"
#include "sim/graph/eager_tape.h"

namespace vramsim {

class TorchOps;

// AdaLoraModel.forward's regulariser: returns the new loss (one reference); takes over `loss`.
// `adapted`: the adapted base weights in model.parameters() order.
VarId adalora_orthogonal_regularizer(TorchOps& ops, const LoraAdapters& adapters,
                                     const std::vector<VarId>& adapted, VarId loss);

// RankAllocator: the importance state kept across steps.
class AdaloraRankAllocator {
 public:
  // `params`: lora_A, lora_B and lora_E of every adapted layer, in model.named_parameters() order.
  explicit AdaloraRankAllocator(std::vector<VarId> params) : m_params(std::move(params)) {}
  // One update_and_allocate before tfinal. The state stays with the model (AdaLoraModel.rankallocator).
  void update_ipt(EagerTape& tape);

 private:
  std::vector<VarId> m_params;
  std::vector<VarId> m_ipt, m_exp_avg_ipt, m_exp_avg_unc;
};

}  // namespace vramsim
