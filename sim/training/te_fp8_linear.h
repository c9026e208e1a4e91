// Transformer Engine's FP8 training (--float8 te): every nn.Linear becomes a te.Linear (Accelerate's
// convert_model, accelerate/utils/transformer_engine.py: each nn.Linear whose weight's dimensions are
// multiples of 16, the output layer included) and the forward runs under
// fp8_autocast(fp8_recipe=DelayedScaling()) (TE's transformer_engine/common/recipe: amax_history_len 1024,
// Format.HYBRID, amax_compute_algo "max", margin 0).
//
// What TE keeps (transformer_engine/pytorch; the H100 layout, where FP8 GEMMs take TN operands only, so a
// column-wise FP8 tensor is a second, transposed copy, Float8Tensor._transpose):
//   per te.Linear, at its first forward under fp8_autocast (TransformerEngineBaseModule.init_fp8_metadata,
//     module/base.py; DelayedScalingRecipeState, quantization.py): "scaling_fwd" with num_gemms * 3 = 3
//     quantizers (input, weight, output): scale = torch.ones(3) fp32, amax_history = torch.zeros(
//     amax_history_len, 3) fp32; "scaling_bwd" with 2 (grad_output, grad_input): torch.ones(2),
//     torch.zeros(amax_history_len, 2). Kept for the run.
//   _Linear.forward (module/linear.py, _linear_forward_impl):
//     the weight quantized by quantize_weight (module/base.py) with row-wise and column-wise usage: one
//       byte per element for the data and one for its transpose, plus a one-element fp32 scale_inv.
//       Without is_first_microbatch (TE's default) it is made anew in every forward and saved for backward
//       (wt_save = weightmat); with it (--fp8-weight-cache) it is the module's _fp8_workspaces["weight"],
//       kept between steps (not under FSDP2: cache_name is None when is_fsdp2). Under FSDP2 only the
//       row-wise data is made and nothing is saved: the backward quantizes the gathered weight again (TE
//       issue #2681).
//     the input quantized row-wise and column-wise (fused cast-transpose: no high-precision temporaries);
//       after the GEMM inputmat.update_usage(rowwise_usage=False) drops the row-wise data, and the transposed
//       copy, one byte per element, is what is saved (saved_inputmat).
//     the output: the GEMM's, in the activation dtype; the bias is added in its epilogue.
//   _Linear.backward: grad_output quantized row-wise and column-wise (two bytes per element and a scale_inv),
//     alive until the backward returns; dgrad and wgrad in the activation dtype.
// Not modelled: the global amax reduction's torch.cat of every module's current amax (a few KiB) and TE's
// userbuffers; LayerNormLinear/LayerNormMLP (TE's own TransformerLayer, which Accelerate does not use).
#pragma once

#include <string>
#include <vector>

#include "sim/core/types.h"
#include "sim/graph/eager_tape.h"
#include "sim/training/training_options.h"

namespace vramsim {

class TorchOps;
struct ParameterShape;

// Accelerate's convert_model: a linear weight (a matrix "<module>.weight" that is not an embedding) whose
// dimensions are multiples of 16; the output layer (lm_head) is converted too.
bool is_te_linear_target(const ParameterShape& parameter);

// The bytes one te.Linear of (in, out) features keeps for the run and per forward, for the tests' hand
// calculations (requested sizes, before the allocator's rounding).
struct TeLinearBytes {
  Bytes fp8_meta = 0;         // scaling_fwd and scaling_bwd: (3 + 2) * (amax_history_len + 1) * 4
  Bytes weight_fp8 = 0;       // data and transpose: 2 * in * out (row-wise only under FSDP2: in * out)
  Bytes saved_input = 0;      // the transposed fp8 input: rows * in
  Bytes grad_output_fp8 = 0;  // backward: 2 * rows * out
};
TeLinearBytes te_linear_bytes(std::int64_t rows, std::int64_t in, std::int64_t out, const Float8Options& o);

// TransformerEngineBaseModule.init_fp8_metadata for the module of `weight`, and with --fp8-weight-cache its
// weight workspace (data, transpose, scale_inv): persistent tensors made in the current op.
std::vector<VarId> create_te_module_state(EagerTape& tape, const std::string& module, VarId weight,
                                          const Float8Options& o);

// te.Linear.forward on x [..., in] with weight w [out, in] (the bias is added in the GEMM epilogue).
VarId te_linear_forward(TorchOps& ops, const std::string& name, VarId x, VarId w, VarId bias,
                        const Float8Options& o);

}  // namespace vramsim
