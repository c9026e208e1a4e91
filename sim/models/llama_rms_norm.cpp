#include "sim/models/llama_rms_norm.h"

namespace vramsim {

VarId llama_rms_norm(TorchOps& ops, const std::string& n, VarId x, VarId w) {
  EagerTape& t = ops.tape();
  const DType in_dtype = t.dtype(x);
  const VarId x32 = ops.to(n + ".to_fp32", x, DType::kFloat32);  // hidden_states.to(torch.float32)
  const VarId sq = ops.pow2(n + ".pow", x32);                    // variance = hidden_states.pow(2).mean(-1)
  const VarId var = ops.mean_last(n + ".mean", sq);
  t.drop(sq);
  const VarId ve = ops.add_scalar(n + ".add_eps", var);
  const VarId r = ops.rsqrt(n + ".rsqrt", ve);
  t.drop(ve);
  const VarId hn = ops.mul(n + ".mul_rsqrt", x32, r);  // hidden_states * torch.rsqrt(variance + eps)
  t.drop({x32, r});
  const VarId hc = ops.to(n + ".to_in_dtype", hn, in_dtype);
  const VarId out = ops.mul(n + ".mul_weight", w, hc);  // self.weight * hidden_states.to(input_dtype)
  t.drop({hc, hn, var});  // the locals `hidden_states` and `variance` live until forward returns
  return out;
}

}  // namespace vramsim
