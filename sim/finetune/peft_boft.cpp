// BOFT (peft/tuners/boft/layer.py, PEFT 5d602fdb). update_layer adds boft_R (m, block_num, b, b) and
// boft_s (out, 1), both trainable, with m = boft_n_butterfly_factor stages (PEFT stores the factor minus one
// and makes factor - 1 + 1 of them) and block_num * b = in (one of boft_block_size, default 4, and
// boft_block_num given); and a non-persistent buffer boft_P (m, in, in) of permutation matrices, made in fp32
// on the host. _move_adapter_to_device_of_base_layer moves boft_R and boft_s only, so on a model placed by
// from_pretrained(device_map=...) boft_P stays in host memory and `self.boft_P.to(x)` copies it to the GPU,
// in x's dtype, at every forward. Linear.forward:
//
//   boft_rotation = eye(in, dtype=x.dtype); boft_scale = ones(out, 1, dtype=x.dtype)
//   orth = cayley_batch(boft_R.view(m * D, b, b))  (0.5 * (R - R^T), I + Q, I - Q, linalg.solve)
//   block_diagonal = FastBlockDiag / torch.block_diag  -> (m, in, in) fp32, then .to(x)
//   M = bmm(boft_P, bmm(block_diagonal, boft_P.permute(0, 2, 1)))  (each bmm saves boft_P's copy)
//   butterfly = M[0]; butterfly = M[i] @ butterfly for the other stages
//   boft_rotation = butterfly @ boft_rotation                       (saves the eye)
//   boft_scale = boft_s * boft_scale                                (fp32 with fp32 adapters)
//   result = base_layer(x @ boft_rotation) * boft_scale.squeeze(-1) (x @ R saves R; the product saves the
//                                                                    base output; fp32, cast back)
// So every adapted layer keeps three (in x in) matrices in x's dtype from its forward to its backward: the
// copy of boft_P, the eye and the rotation.
#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/finetune/peft_method.h"
#include "sim/graph/eager_tape.h"
#include "sim/torch/torch_ops.h"

namespace vramsim {
namespace {

// (stages m, block_num, block_size) for `in` features, with update_layer's checks.
struct BoftShape {
  std::int64_t stages = 1, blocks = 0, size = 0;
};

BoftShape boft_shape(std::int64_t in, const LoraOptions& o) {
  if (o.block_size != 0 && o.block_num != 0) {
    throw InputError(fmt::format(
        "--boft-block-num: You can only specify either boft_block_size ({}) or boft_block_num ({}), but not "
        "both simultaneously, because boft_block_size x boft_block_num == in_features (BOFTConfig)",
        o.block_size, o.block_num));
  }
  if (o.butterfly_factor < 1 || o.butterfly_factor > 32) {
    throw InputError(fmt::format(
        "--boft-n-butterfly-factor: You can only specify boft_n_butterfly_factor {} to be a positive integer "
        "number (BOFT)",
        o.butterfly_factor));
  }
  BoftShape s;
  const std::int64_t factor = o.butterfly_factor - 1;  // update_layer: boft_n_butterfly_factor - 1
  s.stages = factor + 1;
  if (o.block_num != 0) {
    if (in % o.block_num != 0) {
      throw InputError(fmt::format(
          "--boft-block-num: in_features ({}) must be divisible by boft_block_num ({})", in, o.block_num));
    }
    s.blocks = o.block_num;
    s.size = in / o.block_num;
  } else {
    s.size = o.block_size != 0 ? o.block_size : 4;  // BOFTConfig.boft_block_size default
    const std::int64_t span = s.size << factor;
    if (in % s.size != 0 || in < span || in % span != 0) {
      throw InputError(fmt::format(
          "--boft-block-size: Invalid combination of in_features ({}), boft_n_butterfly_factor ({}) and "
          "boft_block_size ({}) (BOFT)",
          in, factor + 1, s.size));
    }
    s.blocks = in / s.size;
  }
  if (factor != 0 && (s.blocks % 2 != 0 || s.size % 2 != 0)) {
    throw InputError(
        fmt::format("--boft-block-size: boft_block_num ({}) and boft_block_size ({}) must be even "
                    "with a butterfly factor (BOFT)",
                    s.blocks, s.size));
  }
  return s;
}

class BoftMethod final : public PeftLinearMethod {
 public:
  std::vector<AdapterTensor> layer_tensors(std::int64_t in, std::int64_t out, const LoraOptions& o,
                                           bool /*feedforward*/) const override {
    const BoftShape s = boft_shape(in, o);
    return {{"boft_R.default", {s.stages, s.blocks, s.size, s.size}}, {"boft_s.default", {out, 1}}};
  }

  VarId forward(TorchOps& ops, const std::string& name, VarId x, VarId /*weight*/,
                const std::function<VarId(VarId)>& base, const LoraAdapter& a, const LoraOptions& /*o*/,
                bool /*training*/) const override {
    EagerTape& t = ops.tape();
    const VarId boft_r = a.params.at(0), boft_s = a.params.at(1);
    const Shape rs = t.shape(boft_r);
    const std::int64_t m = rs.at(0), d = rs.at(1), h = rs.at(2);
    const std::int64_t in = d * h;
    const std::int64_t out = t.shape(boft_s).at(0);
    const DType previous = t.dtype(x);
    const DType adapter = t.dtype(boft_r);
    const VarId rotation0 = t.constant(name + ".boft_rotation", "eye", {in, in}, previous);
    const VarId scale0 = t.constant(name + ".boft_scale", "ones", {out, 1}, previous);
    // cayley_batch(boft_R.view(m * D, b, b))
    const Shape blocks{m * d, h, h};
    const VarId data = t.view(boft_r, blocks, name + ".boft_R.view");
    const VarId data_t = t.view(boft_r, blocks, name + ".boft_R.view.T");
    const VarId diff = ops.sub(name + ".cayley.data-data.T", data, data_t);
    t.drop({data, data_t});
    const VarId skew = ops.scale(name + ".cayley.skew", diff);
    t.drop(diff);
    const VarId eye = t.constant(name + ".cayley.id_mat", "eye", {h, h}, adapter);
    const VarId lhs = ops.add(name + ".cayley.id+skew", eye, skew);
    const VarId rhs = ops.sub(name + ".cayley.id-skew", eye, skew);
    t.drop({eye, skew});
    OpCall solve;
    solve.name = name + ".cayley.linalg_solve";
    solve.kind = "linalg_solve_ex";
    solve.inputs = {lhs, rhs};
    solve.outputs = {OutputSpec{"", blocks, adapter}, OutputSpec{"LU", blocks, adapter},
                     OutputSpec{"pivots", {m * d, h, 4}, DType::kUInt8}};
    solve.saved.outputs = {0, 1, 2};
    const std::vector<VarId> solved = t.op(solve);
    t.drop({lhs, rhs, solved.at(1), solved.at(2)});
    // FastBlockDiag: (m, in, in) in the adapter's dtype (saves its small input), then .to(x)
    OpCall diag;
    diag.name = name + ".block_diagonal_butterfly";
    diag.kind = "FastBlockDiag";
    diag.inputs = {solved.at(0)};
    diag.outputs = {OutputSpec{"", {m, in, in}, adapter}};
    diag.saved.inputs = {0};
    const VarId bd = t.op1(diag);
    t.drop(solved.at(0));
    const VarId bd_cast = ops.to(name + ".block_diagonal_butterfly.to(x)", bd, previous);
    t.drop(bd);
    // self.boft_P.to(x): host fp32 to a device copy in x's dtype
    const VarId p = t.constant(name + ".boft_P.to(x)", "_to_copy", {m, in, in}, previous);
    const VarId pt = t.view(p, {m, in, in}, name + ".boft_P.permute(0, 2, 1)");
    const VarId m1 = ops.matmul(name + ".bmm(block_diagonal, P^T)", bd_cast, pt, {m, in, in});
    t.drop({bd_cast, pt});
    const VarId m2 = ops.matmul(name + ".bmm(P, ...)", p, m1, {m, in, in});
    t.drop({p, m1});
    VarId butterfly = t.view(m2, {in, in}, name + ".butterfly_oft_mat_batch[0]");
    for (std::int64_t i = 1; i < m; ++i) {
      const VarId stage = t.view(m2, {in, in}, name + ".butterfly_oft_mat_batch[i]");
      const VarId next = ops.matmul(name + ".butterfly@", stage, butterfly, {in, in});
      t.drop({stage, butterfly});
      butterfly = next;
    }
    t.drop(m2);
    const VarId rotation = ops.matmul(name + ".butterfly@boft_rotation", butterfly, rotation0, {in, in});
    t.drop({butterfly, rotation0});
    const VarId scale = ops.mul(name + ".boft_s*boft_scale", boft_s, scale0);
    t.drop(scale0);
    const VarId rotation_cast = ops.to(name + ".boft_rotation.to(previous_dtype)", rotation, previous);
    t.drop(rotation);
    const VarId x_rotated = ops.matmul(name + ".x@boft_rotation", x, rotation_cast, t.shape(x));
    t.drop(rotation_cast);
    const VarId result = base(x_rotated);
    t.drop(x_rotated);
    const VarId squeezed = t.view(scale, {out}, name + ".boft_scale.squeeze(-1)");
    t.drop(scale);
    const VarId scaled = ops.mul(name + ".result*boft_scale", result, squeezed);
    t.drop({result, squeezed});
    const VarId cast = ops.to(name + ".result.to(previous_dtype)", scaled, previous);
    t.drop(scaled);
    return cast;
  }
};

}  // namespace

const PeftLinearMethod& boft_method() {
  static const BoftMethod kMethod;
  return kMethod;
}

}  // namespace vramsim
