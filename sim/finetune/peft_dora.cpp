// DoRA (LoraConfig(use_dora=True)): lora/variants.py DoraLinearVariant.forward and lora/dora.py
// DoraLinearLayer (PEFT 5d602fdb). Besides lora_A / lora_B, each adapted layer gets lora_magnitude_vector
// (out,), initialised to the norm of each output row of the weight, trainable. Its forward:
//
//   lora_weight = lora_B(lora_A(torch.eye(in))).T                  (in x out, then a transposed view)
//   weight = dequantize_module_weight(base_layer).to(x.dtype)      (a copy when x was cast to fp32)
//   weight_norm = linalg.norm(weight + scaling * lora_weight.detach(), dim=1).detach()
//   mag_norm_scale = (magnitude / weight_norm).view(1, -1)
//   lora_result = lora_B(lora_A(x))
//   result_dora = (mag_norm_scale - 1) * base_result + mag_norm_scale * lora_result * scaling
//   result = result + result_dora
//
// What it costs beyond LoRA: in the forward of every adapted layer, the identity (in x in), lora_weight
// (in x out), the weight's copy and two more (out x in) temporaries of the norm, in the adapter dtype; kept
// for backward, base_result (the base layer's output, saved by the first product because mag_norm_scale
// requires grad) and lora_result (saved by the second). With lora_dropout > 0 in training, base_result is
// recomputed as F.linear(dropout(x), weight) instead of reusing the base layer's output.
#include <fmt/format.h>

#include "sim/finetune/peft_method.h"
#include "sim/graph/eager_tape.h"
#include "sim/torch/torch_ops.h"

namespace vramsim {
namespace {

class DoraMethod final : public PeftLinearMethod {
 public:
  std::vector<AdapterTensor> layer_tensors(std::int64_t in, std::int64_t out, const LoraOptions& o,
                                           bool /*feedforward*/) const override {
    return {{"lora_A.default.weight", {o.rank, in}},
            {"lora_B.default.weight", {out, o.rank}},
            {"lora_magnitude_vector.default.weight", {out}}};
  }

  VarId forward(TorchOps& ops, const std::string& name, VarId x, VarId weight,
                const std::function<VarId(VarId)>& base, const LoraAdapter& a, const LoraOptions& o,
                bool training) const override {
    EagerTape& t = ops.tape();
    const VarId result = base(x);
    const DType result_dtype = t.dtype(result);
    const DType ad = t.dtype(a.lora_a);
    const VarId xa = ops.to(name + ".lora_cast_input", x, ad);  // _cast_input_dtype
    const bool reuse_base = !(training && o.dropout > 0.0);
    VarId xd = xa;
    if (!reuse_base) {
      const auto [y, mask] = ops.dropout(name + ".lora_dropout", xa, o.dropout);
      t.drop({mask, xa});
      xd = y;
    }
    const VarId dequantized = weight_in_dtype(ops, name, weight, a, result_dtype, ad);
    const VarId magnitude = a.params.at(2);
    const VarId norm = weight_norm(ops, name, dequantized, a);
    const VarId ratio = ops.div(name + ".dora.magnitude/weight_norm", magnitude, norm);
    t.drop(norm);
    const VarId mns = t.view(ratio, {1, t.shape(magnitude).at(0)}, name + ".dora.mag_norm_scale");
    t.drop(ratio);
    const VarId la = ops.linear(name + ".lora_A", xd, a.lora_a);
    const VarId lora_result = ops.linear(name + ".lora_B", la, a.lora_b);
    t.drop(la);
    VarId base_result = result;
    if (reuse_base) {
      t.hold(result);
    } else {
      base_result = ops.linear(name + ".dora.F.linear(x, weight)", xd, dequantized);
    }
    t.drop({xd, dequantized});
    const VarId m1 = ops.add_scalar(name + ".dora.mag_norm_scale-1", mns);
    const VarId p1 = ops.mul(name + ".dora.(mag_norm_scale-1)*base_result", m1, base_result);
    t.drop({m1, base_result});
    const VarId p2 = ops.mul(name + ".dora.mag_norm_scale*lora_result", mns, lora_result);
    t.drop({mns, lora_result});
    const VarId p3 = ops.scale(name + ".dora.*scaling", p2);
    t.drop(p2);
    const VarId dora = ops.add(name + ".dora.result_dora", p1, p3);
    t.drop({p1, p3});
    const VarId sum = ops.add(name + ".lora_add", result, dora);  // result = result + result_dora
    t.drop({result, dora});
    const VarId out = ops.to(name + ".lora_result_dtype", sum, result_dtype);
    t.drop(sum);
    return out;
  }

 private:
  // dequantize_module_weight(base_layer).to(x.dtype): a float weight is cast (a copy when the dtypes
  // differ); a quantized one is dequantized to the compute dtype first.
  static VarId weight_in_dtype(TorchOps& ops, const std::string& name, VarId weight, const LoraAdapter& a,
                               DType compute, DType ad) {
    EagerTape& t = ops.tape();
    const Shape shape{t.shape(a.lora_b).at(0), t.shape(a.lora_a).at(1)};
    if (is_floating(t.dtype(weight)) && t.shape(weight) == shape) {
      return ops.to(name + ".dora.weight.to(x.dtype)", weight, ad);
    }
    if (is_floating(t.dtype(weight)) && numel(t.shape(weight)) == numel(shape)) {
      // GPT-2's Conv1D (in, out): transpose(weight, fan_in_fan_out) is a view, then the cast
      const VarId cast = ops.to(name + ".dora.weight.to(x.dtype)", weight, ad);
      const VarId view = t.view(cast, shape, name + ".dora.weight.T");
      t.drop(cast);
      return view;
    }
    // a packed bitsandbytes weight (uint8, or bnb_4bit_quant_storage's float) is dequantized first
    const VarId w = t.constant(name + ".dora.dequantize_module_weight", "dequantize", shape, compute);
    const VarId cast = ops.to(name + ".dora.weight.to(x.dtype)", w, ad);
    t.drop(w);
    return cast;
  }

  // get_lora_weight and get_weight_norm: nothing of it reaches backward (the norm is detached; the graph
  // of lora_weight is released with it when forward returns), so it runs without grad, the identity and
  // lora_A's output held as long as lora_weight as their autograd nodes would hold them.
  static VarId weight_norm(TorchOps& ops, const std::string& name, VarId weight, const LoraAdapter& a) {
    EagerTape& t = ops.tape();
    const bool grad = t.grad_enabled();
    t.set_grad_enabled(false);
    const std::int64_t in = t.shape(a.lora_a).at(1);
    const std::int64_t out = t.shape(a.lora_b).at(0);
    const VarId eye = t.constant(name + ".dora.x_eye", "eye", {in, in}, t.dtype(a.lora_a));
    const VarId ea = ops.linear(name + ".dora.lora_A(x_eye)", eye, a.lora_a);
    const VarId lw = ops.linear(name + ".dora.lora_weight", ea, a.lora_b);  // (in, out)
    const VarId lwt = t.view(lw, {out, in}, name + ".dora.lora_weight.T");
    const VarId scaled = ops.scale(name + ".dora.scaling*lora_weight", lwt);
    const VarId sum = ops.add(name + ".dora.weight+scaling*lora_weight", weight, scaled);
    t.drop(scaled);
    const VarId norm = ops.vector_norm_last(name + ".dora.weight_norm", sum);  // (out, 1)
    t.drop(sum);
    const VarId flat = t.view(norm, {out}, name + ".dora.weight_norm");
    t.drop({norm, lwt, lw, ea, eye});
    t.set_grad_enabled(grad);
    return flat;
  }
};

}  // namespace

const PeftLinearMethod& dora_method() {
  static const DoraMethod kMethod;
  return kMethod;
}

}  // namespace vramsim
