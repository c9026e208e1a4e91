// The indexing TorchOps that mixture-of-experts blocks use: topk, advanced indexing, index_add_, and an
// in-place division (derivatives.yaml: topk, index.Tensor, index_add, div_).
#include "sim/torch/torch_ops.h"

#include "sim/core/assert.h"
#include "sim/torch/cuda_sort.h"

namespace vramsim {
namespace {

using Kind = GradRule::Kind;
using torch_ops_detail::numel_d;
using torch_ops_detail::with_last;

}  // namespace

std::pair<VarId, VarId> TorchOps::topk_last(const std::string& name, VarId a, std::int64_t k) {
  OpCall c;
  c.name = name;
  c.kind = "topk";
  c.inputs = {a};
  c.outputs = {OutputSpec{"", with_last(m_tape.shape(a), k), m_tape.dtype(a)},
               OutputSpec{"indices", with_last(m_tape.shape(a), k), DType::kInt64, false}};
  c.saved.outputs = {1};  // value_selecting_reduction_backward: zeros(self).scatter(indices, grad)
  c.flops = numel_d(m_tape.shape(a));
  const std::vector<VarId> out = m_tape.op(c);
  return {out[0], out[1]};
}

VarId TorchOps::index_rows(const std::string& name, VarId x, VarId index, std::int64_t rows) {
  // (a second index tensor, as in routing_weights[top_x, idx], adds two more index-sized temporaries to the
  // backward's linear index that are not modelled)
  Shape out = m_tape.shape(x);
  out[0] = rows;
  return advanced_index(name, x, index, out, rows);
}

VarId TorchOps::index(const std::string& name, VarId x, VarId index) {
  const Shape& xs = m_tape.shape(x);
  Shape out = m_tape.shape(index);
  out.insert(out.end(), xs.begin() + 1, xs.end());
  return advanced_index(name, x, index, out, numel(m_tape.shape(index)));
}

VarId TorchOps::advanced_index(const std::string& name, VarId x, VarId index, const Shape& out,
                               std::int64_t positions) {
  OpCall c;
  c.name = name;
  c.kind = "index";
  c.inputs = {x, index};
  c.outputs = {OutputSpec{"", out, m_tape.dtype(x)}};
  c.saved.inputs = {1};
  // IndexBackward: zeros(x), then index_put_(accumulate=True), which sorts the positions on CUDA
  c.backward.grads = {GradRule{Kind::kAlloc}, GradRule{Kind::kNone}};
  const int cc = m_tape.cuda_device().compute_capability;
  c.backward.scratch_after_grads = index_put_with_sort_scratch(positions, m_tape.shape(x).at(0), cc).steps();
  c.backward.scratch_after_grads_strided =
      index_put_with_sort_scratch(positions, m_tape.shape(x).at(0), cc, 0, tensor_bytes(out, m_tape.dtype(x)))
          .steps();
  c.flops = numel_d(out);
  return m_tape.op1(c);
}

VarId TorchOps::index_arange_rows(const std::string& name, VarId x, VarId cols) {
  const Shape& xs = m_tape.shape(x);
  SIM_ASSERT(xs.size() == 2);
  const std::int64_t n = xs[0];
  // index.Tensor moves the host index to the device for the kernel
  const VarId rows = m_tape.constant(name + ".arange_to_device", "_to_copy", {n}, DType::kInt64);
  OpCall c;
  c.name = name;
  c.kind = "index";
  c.inputs = {x, cols};
  c.outputs = {OutputSpec{"", {n}, m_tape.dtype(x)}};
  c.saved.inputs = {1};
  // IndexBackward: zeros(x), then index_put_(accumulate=True) over both dimensions (linear index up to
  // n * m), the host arange copied to the device again
  c.backward.grads = {GradRule{Kind::kAlloc}, GradRule{Kind::kNone}};
  c.backward.scratch_after_grads =
      index_put_with_sort_scratch(n, numel(xs), m_tape.cuda_device().compute_capability, 1).steps();
  c.flops = static_cast<double>(n);
  const VarId out = m_tape.op1(c);
  m_tape.drop(rows);
  return out;
}

VarId TorchOps::index_add_rows(const std::string& name, VarId target, VarId index, VarId source) {
  BackwardRule rule;
  rule.grads = {GradRule{Kind::kPassThrough}, GradRule{Kind::kNone}, GradRule{Kind::kAlloc}};
  return m_tape.inplace(name, "index_add_", target, {index, source}, rule);
}

VarId TorchOps::div_inplace(const std::string& name, VarId a, VarId b) {
  BackwardRule rule;
  // grad / b for a; -grad * a / b^2 summed to b's shape: one product of a's size before the reduction
  rule.grads = {GradRule{Kind::kAlloc}, GradRule{Kind::kAlloc}};
  rule.temp_bytes = {tensor_bytes(m_tape.shape(a), m_tape.dtype(a))};
  return m_tape.inplace(name, "div_", a, {b}, rule);
}

}  // namespace vramsim
