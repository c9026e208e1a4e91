#include "sim/parallel/loss_parallel.h"

#include "sim/torch/torch_ops.h"

namespace vramsim {

using torch_ops_detail::numel_d;
using torch_ops_detail::with_last;

VarId loss_parallel_cross_entropy(TorchOps& ops, const std::string& name, VarId logits_float, VarId labels) {
  EagerTape& t = ops.tape();
  const Shape& shape = t.shape(logits_float);
  const DType dtype = t.dtype(logits_float);
  const Bytes full = tensor_bytes(shape, dtype);
  const Bytes row_stat = tensor_bytes(with_last(shape, 1), dtype);

  // loss.py _log_softmax: the result is the op's output; `shifted` and the per-row max and sum are its
  // scratch (the full-size exp is freed before the result is allocated, so it never adds to `shifted` +
  // result).
  OpCall ls;
  ls.name = name + ".log_softmax";
  ls.kind = "_log_softmax";
  ls.inputs = {logits_float};
  ls.outputs = {OutputSpec{"", shape, dtype}};
  ls.saved.outputs = {0};  // derivatives.yaml: _log_softmax saves its result
  // _log_softmax_backward_handler: grad_output.to(input_dtype), the incoming gradient itself.
  ls.backward.grads = {GradRule{GradRule::Kind::kPassThrough}};
  ls.scratch_bytes = {row_stat, full, row_stat};  // x_max, shifted, shifted_sumexp
  ls.flops = 5.0 * numel_d(shape);
  const VarId log_probs = t.op1(ls);

  // _nll_loss_forward_handler: a scalar loss and total_weight; the backward node keeps the target and
  // total_weight (and the result, already saved by the log_softmax node).
  OpCall nll;
  nll.name = name + ".nll_loss";
  nll.kind = "nll_loss_forward";
  nll.inputs = {log_probs, labels};
  nll.outputs = {OutputSpec{"", {}, dtype}, OutputSpec{"total_weight", {}, dtype, false}};
  nll.saved = SavedSpec{{1}, {1}};
  // _nll_loss_and_log_softmax_backward: the gradient returned is (grad_input + exp(x)) * grad_output;
  // grad_input (zeros_like(x)) and the sum are alive while it is computed (exp(x) is freed before it).
  nll.backward.grads = {GradRule{GradRule::Kind::kAlloc}, GradRule{GradRule::Kind::kNone}};
  nll.backward.temp_bytes = {full, full};
  nll.flops = numel_d(shape);
  const std::vector<VarId> out = t.op(nll);
  t.drop(out[1]);  // total_weight: only the backward node keeps it
  t.drop(log_probs);
  return out[0];
}

}  // namespace vramsim
