// OFT (peft/tuners/oft/layer.py, PEFT 5d602fdb). update_layer adds an OFTRotationModule per targeted linear
// layer: `weight` (r, n_elements), trainable, with r blocks of oft_block_size b = in / r (one of r and
// oft_block_size given, the other derived; adjust_oft_parameters moves a non-divisor to the nearest divisor)
// and n_elements = b (b - 1) / 2, the upper triangle of each skew-symmetric block. Its forward, before the
// base layer, rotates the input:
//
//   x = x.to(weight.dtype)                                       (fp32 adapters: a copy of the input)
//   Q_skew = zeros(r, b, b); Q_skew[:, rows, cols] = weight; Q_skew = Q_skew - Q_skew.transpose(-2, -1)
//   _cayley_batch (use_cayley_neumann, PEFT's default, num_cayley_neumann_terms 5):
//     R = eye(b).repeat(r, 1, 1); R.add_(Q_skew, alpha=2); Q2 = bmm(Q_skew, Q_skew); R.add_(Q2, alpha=2);
//     Q_power = bmm(Q2, Q_skew) ...; each bmm saves its two (r, b, b) operands for backward
//   (use_cayley_neumann=False: torch.linalg.solve(I + Q, I - Q, left=False))
//   x_rotated = einsum("...rk,rkc->...rc", x.reshape(..., r, b), R): bmm over the r blocks, saving the cast
//     input and R; the result (r, tokens, b) permuted back and reshaped: a copy
//   base_layer(x_rotated.to(previous_dtype))
//
// The index buffers rows/cols (two int64 vectors of n_elements, not parameters) are not modelled.
#include "sim/core/error.h"
#include "sim/finetune/peft_method.h"
#include "sim/graph/eager_tape.h"
#include "sim/torch/torch_ops.h"

#include <fmt/format.h>

namespace vramsim {
namespace {

using Kind = GradRule::Kind;

// OFTLayer.adjust_oft_parameters: the divisor of in_features nearest to `params`.
std::int64_t adjust_oft_parameters(std::int64_t in, std::int64_t params) {
  if (params >= in) {
    return in;
  }
  std::int64_t higher = params;
  while (higher <= in && in % higher != 0) {
    ++higher;
  }
  std::int64_t lower = params;
  while (lower > 1 && in % lower != 0) {
    --lower;
  }
  return params - lower <= higher - params ? lower : higher;
}

// (r, block size) for a layer of `in` features, as update_layer derives them.
std::pair<std::int64_t, std::int64_t> oft_blocks(std::int64_t in, const LoraOptions& o) {
  if (o.rank != 0 && o.block_size != 0) {
    // OFTConfig.__post_init__
    throw InputError(fmt::format(
        "--oft-block-size: You can only specify either r ({}) or oft_block_size ({}), but not both "
        "simultaneously (OFTConfig)",
        o.rank, o.block_size));
  }
  if (o.rank != 0) {
    const std::int64_t r = adjust_oft_parameters(in, o.rank);
    return {r, in / r};
  }
  const std::int64_t b = adjust_oft_parameters(in, o.block_size != 0 ? o.block_size : 32);  // default 32
  return {in / b, b};
}

// tensor.add_(other, alpha): in place; the gradient flows to the target and, scaled, to `other`.
VarId add_inplace(EagerTape& t, const std::string& name, VarId target, VarId other) {
  BackwardRule rule;
  rule.grads = {GradRule{Kind::kPassThrough}, GradRule{Kind::kAlloc}};
  const VarId v = t.inplace(name, "add_", target, {other}, rule);
  t.drop(target);
  return v;
}

// _cayley_batch on the skew-symmetric blocks: R (r, b, b), one reference. Takes over `skew`.
VarId cayley_batch(TorchOps& ops, const std::string& name, VarId skew, const LoraOptions& o) {
  EagerTape& t = ops.tape();
  const Shape s = t.shape(skew);
  if (!o.use_cayley_neumann) {
    // torch.linalg.solve(id_mat + Q, id_mat - Q, left=False): the LU factors and int32 pivots (4 bytes each,
    // stored as uint8 x 4) are saved
    const VarId eye = t.constant(name + ".id_mat", "eye", {s.at(1), s.at(2)}, t.dtype(skew));
    const VarId a = ops.add(name + ".id+Q", eye, skew);
    const VarId b = ops.sub(name + ".id-Q", eye, skew);
    t.drop({eye, skew});
    OpCall c;
    c.name = name + ".linalg_solve";
    c.kind = "linalg_solve_ex";
    c.inputs = {a, b};
    c.outputs = {OutputSpec{"", s, t.dtype(a)}, OutputSpec{"LU", s, t.dtype(a)},
                 OutputSpec{"pivots", {s.at(0), s.at(1), 4}, DType::kUInt8}};
    c.saved.outputs = {0, 1, 2};
    const std::vector<VarId> outs = t.op(c);
    t.drop({a, b, outs.at(1), outs.at(2)});
    return outs.at(0);
  }
  VarId r = t.constant(name + ".eye.repeat", "repeat", s, t.dtype(skew));
  const int terms = o.num_cayley_neumann_terms;
  if (terms > 1) {
    r = add_inplace(t, name + ".R+=2Q", r, skew);
    if (terms > 2) {
      const VarId q2 = ops.matmul(name + ".Q^2", skew, skew, s, true);
      r = add_inplace(t, name + ".R+=2Q^2", r, q2);
      VarId power = q2;
      for (int i = 3; i < terms - 1; ++i) {
        const VarId next = ops.matmul(name + ".Q^" + std::to_string(i), power, skew, s, true);
        t.drop(power);
        power = next;
        r = add_inplace(t, name + ".R+=2Q^" + std::to_string(i), r, power);
      }
      const VarId last = ops.matmul(name + ".Q^last", power, skew, s, true);
      t.drop(power);
      r = add_inplace(t, name + ".R+=Q^last", r, last);
      t.drop(last);
    }
  }
  t.drop(skew);
  return r;
}

class OftMethod final : public PeftLinearMethod {
 public:
  std::vector<AdapterTensor> layer_tensors(std::int64_t in, std::int64_t /*out*/, const LoraOptions& o,
                                           bool /*feedforward*/) const override {
    const auto [r, b] = oft_blocks(in, o);
    return {{"oft_R.default.weight", {r, b * (b - 1) / 2}}};
  }

  VarId forward(TorchOps& ops, const std::string& name, VarId x, VarId /*weight*/,
                const std::function<VarId(VarId)>& base, const LoraAdapter& a, const LoraOptions& o,
                bool /*training*/) const override {
    EagerTape& t = ops.tape();
    const VarId w = a.params.at(0);
    const Shape xs = t.shape(x);
    const std::int64_t in = xs.back();
    const std::int64_t tokens = numel(xs) / in;
    const std::int64_t r = t.shape(w).at(0);
    const std::int64_t b = in / r;
    const DType previous = t.dtype(x);
    const VarId xa = ops.to(name + ".oft_cast_input", x, t.dtype(w));
    // _pytorch_skew_symmetric: zeros, the upper triangle written, minus its transpose
    const VarId zeros = t.constant(name + ".Q_skew", "zeros", {r, b, b}, t.dtype(w));
    BackwardRule put;
    put.grads = {GradRule{Kind::kNone}, GradRule{Kind::kAlloc}};
    const VarId filled = t.inplace(name + ".Q_skew[:, rows, cols]=weight", "index_put_", zeros, {w}, put);
    t.drop(zeros);
    const VarId ft = t.view(filled, {r, b, b}, name + ".Q_skew.T");
    const VarId skew = ops.sub(name + ".Q_skew-Q_skew.T", filled, ft);
    t.drop({filled, ft});
    const VarId rot = cayley_batch(ops, name + ".cayley", skew, o);
    // einsum("...rk,rkc->...rc"): bmm of (r, tokens, b) x (r, b, b)
    const VarId xr = t.view(xa, {r, tokens, b}, name + ".x.reshape(..., r, b)");
    t.drop(xa);
    const VarId y = ops.matmul(name + ".einsum", xr, rot, {r, tokens, b});
    t.drop({xr, rot});
    const VarId yp = t.view(y, xs, name + ".x_rotated_reshaped");
    t.drop(y);
    const VarId rotated = ops.contiguous(name + ".x_rotated.reshape", yp);  // permuted: reshape copies
    t.drop(yp);
    const VarId cast = ops.to(name + ".x_rotated.to(previous_dtype)", rotated, previous);
    t.drop(rotated);
    const VarId result = base(cast);
    t.drop(cast);
    return result;
  }
};

}  // namespace

const PeftLinearMethod& oft_method() {
  static const OftMethod kMethod;
  return kMethod;
}

}  // namespace vramsim
