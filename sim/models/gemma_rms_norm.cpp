#include "sim/models/gemma_rms_norm.h"

namespace vramsim {

VarId gemma_rms_norm(TorchOps& ops, const std::string& n, VarId x, VarId w) {
  EagerTape& t = ops.tape();
  const DType in_dtype = t.dtype(x);
  const VarId x32 = ops.to(n + ".float", x, DType::kFloat32);
  const VarId sq = ops.pow2(n + ".pow", x32);
  const VarId var = ops.mean_last(n + ".mean", sq);
  t.drop(sq);
  const VarId ve = ops.add_scalar(n + ".add_eps", var);
  t.drop(var);
  const VarId r = ops.rsqrt(n + ".rsqrt", ve);
  t.drop(ve);
  const VarId normed = ops.mul(n + ".mul_rsqrt", x32, r);
  t.drop({x32, r});
  const VarId w32 = ops.to(n + ".weight_float", w, DType::kFloat32);
  const VarId one_plus = ops.add_scalar(n + ".one_plus_weight", w32);
  t.drop(w32);
  const VarId scaled = ops.mul(n + ".mul_weight", normed, one_plus);
  t.drop({normed, one_plus});
  const VarId out = ops.to(n + ".type_as", scaled, in_dtype);
  t.drop(scaled);
  return out;
}

}  // namespace vramsim
