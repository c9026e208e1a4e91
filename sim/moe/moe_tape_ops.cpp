#include "sim/moe/moe_tape_ops.h"

#include <algorithm>

namespace vramsim {

using Kind = GradRule::Kind;

VarId moe_op(EagerTape& t, const std::string& name, const char* kind, std::vector<VarId> inputs,
             const Shape& out, DType dtype, std::vector<int> saved, const std::vector<int>& no_grad,
             double flops) {
  OpCall c;
  c.name = name;
  c.kind = kind;
  c.inputs = std::move(inputs);
  c.outputs = {OutputSpec{"", out, dtype}};
  c.saved.inputs = std::move(saved);
  c.backward.grads.assign(c.inputs.size(), GradRule{Kind::kAlloc});
  for (int i : no_grad) {
    c.backward.grads[static_cast<std::size_t>(i)] = GradRule{Kind::kNone};
  }
  c.flops = flops;
  return t.op1(c);
}

VarId grouped_gemm(EagerTape& t, const std::string& name, VarId x, const std::vector<VarId>& weights,
                   std::int64_t out_features) {
  std::vector<VarId> inputs{x};
  inputs.insert(inputs.end(), weights.begin(), weights.end());
  std::vector<int> saved(inputs.size());
  for (std::size_t i = 0; i < saved.size(); ++i) {
    saved[i] = static_cast<int>(i);
  }
  const std::int64_t rows = t.shape(x)[0], in = t.shape(x)[1];
  return moe_op(
      t, name, "grouped_gemm", inputs, {rows, out_features}, t.dtype(x), saved, {},
      2.0 * static_cast<double>(rows) * static_cast<double>(in) * static_cast<double>(out_features));
}

VarId expert_all_to_all(EagerTape& t, const std::string& name, VarId x, std::int64_t rows) {
  Shape out = t.shape(x);
  out[0] = rows;
  const VarId received = moe_op(t, name, "all_to_all_single", {x}, out, t.dtype(x), {});
  t.set_category(received, TensorCategory::kCommunication);
  return received;
}

namespace {

// One collective of x into a new [rows, ...] tensor whose backward makes the gradient of x anew; the
// larger of the two sides is staged flat while it runs (ProcessGroupNCCL's newLikeFlat), both ways.
VarId staged_collective(EagerTape& t, const std::string& name, const char* kind, VarId x, std::int64_t rows) {
  Shape out = t.shape(x);
  out[0] = rows;
  const Bytes staged = std::max(tensor_bytes(out, t.dtype(x)), tensor_bytes(t.shape(x), t.dtype(x)));
  OpCall c;
  c.name = name;
  c.kind = kind;
  c.inputs = {x};
  c.outputs = {OutputSpec{"", out, t.dtype(x)}};
  c.scratch_bytes = {staged};
  c.backward.grads = {GradRule{Kind::kAlloc}};
  c.backward.temp_bytes = {staged};
  const VarId y = t.op1(c);
  t.set_category(y, TensorCategory::kCommunication);
  return y;
}

}  // namespace

VarId expert_tensor_all_gather(EagerTape& t, const std::string& name, VarId x, std::int64_t rows) {
  return staged_collective(t, name, "all_gather", x, rows);
}

VarId expert_tensor_reduce_scatter(EagerTape& t, const std::string& name, VarId x, std::int64_t rows) {
  return staged_collective(t, name, "reduce_scatter", x, rows);
}

}  // namespace vramsim
