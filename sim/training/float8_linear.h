// torchao's float8 training (torchao/float8, Float8Linear), as torchtitan's Float8 converter installs it
// (torchtitan/components/quantization/float8.py: convert_to_float8_training with module_filter_fn).
//
// Which linears: every nn.Linear whose weight's two dimensions are multiples of 16 (the float8 tensor cores'
// requirement, torchtitan's module_filter_fn) and whose name is not filtered (filter_fqns, default
// ["output"]: the output layer, lm_head in transformers' naming, stays bf16). Embeddings are not linears.
//
// What one Float8Linear.forward allocates (torchao/float8/float8_linear.py, float8_scaling_utils.py,
// float8_training_tensor.py), with x [rows, in] and w [out, in] in bf16; float8 tensors are one byte per
// element (vramsim stores them as uint8, the same size as torch.float8_e4m3fn / float8_e5m2):
//   hp_tensor_to_float8_dynamic(t): tensor_to_amax (torch.max(torch.abs(t)) under no_grad: an abs copy of t,
//     a scalar; rowwise: torch.amax over the row, an fp32 scale per row), then _ToFloat8ConstrFunc:
//     t.to(float32) * scale (two fp32 copies), to_fp8_saturated's clamp (a third), .to(float8): the result.
//   tensorwise: the weight is cast outside the autograd function (Float8Linear.forward,
//     _cast_weight_to_float8_t) and the float8 weight is what matmul_with_hp_or_float8_args saves: one byte
//     per weight element kept from each layer's forward to its backward. With enable_fsdp_float8_all_gather
//     the unsharded weight already is float8 (WeightWithDynamicFloat8CastTensor): no cast, nothing extra.
//   rowwise: the weight is cast inside the function; the function saves the bf16 weight (the parameter).
//   Both save the bf16 input (ctx.save_for_backward(input_hp, weight_hp_t)), never its float8 cast.
//   The output is _scaled_mm's, in bf16.
// Backward (matmul_with_hp_or_float8_args.backward): grad_output cast to float8 twice (dim 0 for grad_input,
// dim 1 for grad_weight), the weight cast again (rowwise; after the workaround of pytorch#141881, which makes
// grad_output * 0 and an hp copy weight + zero), the saved input cast again; each float8 tensor is a local
// alive until the function returns. _scaled_mm needs its first operand row-major and its second
// column-major (float8_ops.py float8_mm / addmm_float8_unwrapped: a.contiguous(), b.t().contiguous().t()):
// grad_input's weight operand and both of grad_weight's operands are copied.
// Simplification: the tape allocates grad_input and grad_weight together, so the backward's casts run before
// both gradients exist (in PyTorch grad_input is made between the two pairs of casts).
#pragma once

#include <string>
#include <unordered_set>

#include "sim/graph/eager_tape.h"
#include "sim/training/training_options.h"

namespace vramsim {

class TorchOps;
struct ParameterShape;

// The weights Float8Linear replaced (their nn.Linear's weight VarId).
using Float8Weights = std::unordered_set<VarId>;

// torchtitan's module_filter_fn: a linear weight (a matrix "<module>.weight" that is not an embedding) whose
// dimensions are multiples of 16 and whose module is not the output layer (lm_head / output).
bool is_float8_target(const ParameterShape& parameter);

// The bytes torchao's casts make, per element count; for the tests' hand calculations.
struct Float8CastBytes {
  Bytes abs_copy = 0;   // torch.abs(t) in t's dtype (tensor_to_amax)
  Bytes fp32_copy = 0;  // each of the three fp32 intermediates (t.to(float32), * scale, clamp)
  Bytes float8 = 0;     // the result, one byte per element
  Bytes scale = 0;      // fp32: 4 bytes (tensorwise) or 4 per row (rowwise)
};
Float8CastBytes float8_cast_bytes(std::int64_t rows, std::int64_t cols, DType hp, Float8Recipe recipe);

// Float8Linear.forward on x [..., in] with weight w [out, in] (and an optional bias, added in bf16 after).
// `weight_is_float8`: FSDP2 gathered the weight as float8 (enable_fsdp_float8_all_gather).
// An x that is already float8 (float8_module_input below: one byte per element, gradients in bf16) is not
// cast again, and it is what the function saves (tensor_already_casted_to_fp8 in torchao's
// matmul_with_hp_or_float8_args; the December 2024 torchao's manual_float8_matmul_with_args_in_float8 saved
// the float8 input too); its grad_output comes cast once, by the module output's _NoopFwToFloat8BwDynamic,
// so the backward casts neither it nor the saved input again.
VarId float8_linear_forward(TorchOps& ops, const std::string& name, VarId x, VarId w, VarId bias,
                            const Float8Options& options, bool weight_is_float8);

// torchao's float8 tensor parallelism (torchao/float8/float8_tensor_parallel.py), which torchtitan applies
// with tensorwise scaling (parallelize_llama.py apply_tp with enable_float8_tensorwise_tp: rowwise recipes
// run regular TP): a module input is cast to float8 *before* it is redistributed, so the all-gather moves
// one byte per element and the linears that share the input (wq, wk, wv; w1, w3) take one float8 tensor.
//   PrepareFloat8ModuleInput (the attention's and the feed-forward's input), `sequence_shards` = tp under
//     sequence parallelism (input_layouts Shard(1) -> Replicate): x is the rank's [b, s/tp, in] slice, cast
//     to float8 (hp_tensor_to_float8_dynamic: _ToFloat8ConstrFunc, whose backward passes the gradient on),
//     then all-gathered into a new [b, s, in] float8 tensor (DTensor.redistribute: funcol
//     all_gather_into_tensor; its backward reduce-scatters the bf16 gradient back to the slice);
//     `sequence_shards` = 1 (a replicated input): the cast only.
//   Float8RowwiseParallel._prepare_input_fn (wo, w2: their input is already sharded on the last dimension):
//     the cast only, `sequence_shards` = 1.
// The result is float8 data (one byte per element) whose gradient is x's dtype (EagerTape::grad_dtype). The
// tensorwise amax of a DTensor is all-reduced across the group (a scalar; not counted).
VarId float8_module_input(TorchOps& ops, const std::string& name, VarId x, int sequence_shards);

// DTensor.redistribute(Shard(1) -> Replicate) of a [b, s/n, h] sequence shard (funcol all_gather_into_tensor):
// a new [b, s, h] tensor of the shard's dtype, whose backward reduce-scatters the gradient into a new slice.
// torchtitan's regular TP plan (PrepareModuleInput) gathers the attention's and feed-forward's inputs so; with
// rowwise float8 the Float8Linears then cast the gathered bf16 input each (float8_module_input is the
// tensorwise plan's).
VarId sequence_all_gather(EagerTape& tape, const std::string& name, VarId shard, int sequence_shards);

}  // namespace vramsim
