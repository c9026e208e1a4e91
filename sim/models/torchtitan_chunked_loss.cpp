#include "sim/models/torchtitan_chunked_loss.h"

#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "sim/torch/torch_ops.h"

namespace vramsim {
namespace {

// logits.chunk(k, dim=1): views of ceil(s / k) positions each (the last shorter), made without autograd
// nodes of their own; returns them. The caller attaches the one SplitBackward0 node.
std::vector<VarId> chunk_views(EagerTape& t, VarId base, std::int64_t k, const std::string& name) {
  const Shape shape = t.shape(base);
  const std::int64_t s = shape.at(1);
  const std::int64_t per = (s + k - 1) / k;
  std::vector<VarId> views;
  for (std::int64_t start = 0; start < s; start += per) {
    Shape cs = shape;
    cs[1] = std::min(per, s - start);
    views.push_back(t.view(base, cs, fmt::format("{}.chunk{}", name, views.size())));
  }
  return views;
}

// SplitBackward0 of logits.chunk(): split_with_sizes_backward fills the chunks that got no gradient with
// zeros and cats them into the logits' gradient; the input buffer's chunk gradients go when it returns.
void attach_split_backward(EagerTape& t, VarId logits, const std::vector<VarId>& chunks) {
  const std::string name = t.name(logits) + ".chunk";
  const Shape shape = t.shape(logits);
  const DType dtype = t.dtype(logits);
  std::vector<Shape> chunk_shapes;
  for (VarId v : chunks) {
    chunk_shapes.push_back(t.shape(v));
  }
  t.function_node(
      name + ".SplitBackward0", {logits}, chunks, {},
      [&t, name, shape, dtype, chunk_shapes](const std::vector<TensorId>& grads_out, std::vector<TensorId>) {
        t.begin_op(name + ".split_backward", "cat");
        std::vector<TensorId> zeros;
        for (std::size_t i = 0; i < grads_out.size(); ++i) {
          if (grads_out[i] == kNoTensor) {  // at::zeros for a chunk no gradient reached
            zeros.push_back(t.allocate(fmt::format("{}{}.grad.zeros", name, i),
                                       tensor_bytes(chunk_shapes[i], dtype), dtype,
                                       TensorCategory::kTemporary));
          }
        }
        const TensorId grad =
            t.allocate(name + ".grad", tensor_bytes(shape, dtype), dtype, TensorCategory::kTemporary);
        for (TensorId g : grads_out) {
          if (g != kNoTensor) {
            t.use(g);
            t.release(g);
          }
        }
        for (TensorId z : zeros) {
          t.release(z);
        }
        return std::vector<TensorId>{grad};
      });
}

// x.flatten(0, 1) of a chunk along dim 1: a view when the chunk is contiguous (batch 1, or the one chunk
// of the whole tensor), else reshape's copy (clone + _unsafe_view). Returns a new variable (one reference);
// the caller keeps `x`.
VarId flatten_batch(TorchOps& ops, VarId x, bool whole, const std::string& name) {
  EagerTape& t = ops.tape();
  Shape out = t.shape(x);
  out.erase(out.begin());
  out.front() *= t.shape(x).front();
  if (whole || t.shape(x).front() == 1) {
    return t.view(x, out, name);
  }
  const VarId copy = ops.contiguous(name + ".clone", x);
  const VarId v = t.view(copy, out, name);
  t.drop(copy);
  return v;
}

}  // namespace

VarId torchtitan_chunked_loss(EmitContext& c, VarId logits, VarId labels) {
  TorchOps& ops = c.ops;
  EagerTape& t = ops.tape();
  const std::int64_t s = t.shape(logits).at(1);
  const std::int64_t k = std::min<std::int64_t>(c.options.loss_chunks, s);
  // labels.chunk(k, dim=1) and logits.chunk(k, dim=1): the logits' views get their gradient through one
  // SplitBackward0 node; the labels need none.
  const std::vector<VarId> label_chunks = chunk_views(t, labels, k, "loss.labels");
  const bool grad = t.grad_enabled();
  t.set_grad_enabled(false);
  const std::vector<VarId> logit_chunks = chunk_views(t, logits, k, "loss.logits");
  t.set_grad_enabled(grad);
  if (grad && t.requires_grad(logits)) {
    attach_split_backward(t, logits, logit_chunks);
  }
  const bool whole = logit_chunks.size() == 1;
  VarId total = kNoVar;
  for (std::size_t i = 0; i < logit_chunks.size(); ++i) {
    const std::string n = fmt::format("loss.chunk{}", i);
    // cross_entropy_loss: F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))
    const VarId flat = flatten_batch(ops, logit_chunks[i], whole, n + ".flatten");
    const VarId lf = ops.to(n + ".logits_float", flat, DType::kFloat32);
    t.drop(flat);  // the flattened copy (batch > 1) is a temporary of the expression
    const VarId target = flatten_batch(ops, label_chunks[i], whole, n + ".labels_flatten");
    const VarId lsm = ops.log_softmax_last(n + ".cross_entropy.log_softmax", lf);
    const VarId part = ops.nll_loss(n + ".cross_entropy.nll_loss", lsm, target);
    t.drop({lsm, lf, target});
    if (total == kNoVar) {  // total_loss = 0.0; 0.0 + loss is Tensor.__radd__: a new tensor
      total = ops.add_scalar(n + ".total_loss", part);
      t.drop(part);
      continue;
    }
    BackwardRule rule;  // total_loss += loss: Tensor.__iadd__, add_ in place
    rule.grads = {GradRule{GradRule::Kind::kPassThrough}, GradRule{GradRule::Kind::kPassThrough}};
    const VarId sum = t.inplace(n + ".total_loss+=", "add_", total, {part}, rule);
    t.drop({total, part});
    total = sum;
  }
  const VarId loss = ops.scale("loss.total_loss.div_num_output_chunks", total);
  t.drop(total);
  for (VarId v : logit_chunks) {  // the function's lists go when it returns
    t.drop(v);
  }
  for (VarId v : label_chunks) {
    t.drop(v);
  }
  return loss;
}

}  // namespace vramsim
