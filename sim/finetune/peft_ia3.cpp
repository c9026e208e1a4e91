// IA3 (peft/tuners/ia3/layer.py, PEFT 5d602fdb). update_layer adds one trainable vector per targeted layer:
// ia3_l of (out, 1), or (1, in) for a feedforward module (IA3Config.feedforward_modules; by default PEFT's
// TRANSFORMERS_MODELS_TO_IA3_FEEDFORWARD_MODULES_MAPPING, llama's down_proj). Linear.forward:
//
//   ia3_scaling = 1; ia3_scaling *= ia3_l.flatten()              (a new vector)
//   feedforward:  x = x.to(ia3_l.dtype); interm = (x * ia3_scaling).to(previous_dtype); base_layer(interm)
//   otherwise:    result = base_layer(x); result = (result * ia3_scaling).to(result.dtype)
//
// Memory: the product saves its tensor operand for ia3_l's gradient: the fp32 copy of the input (tokens x in)
// of a feedforward layer, the base layer's output (tokens x out) otherwise; the product itself is in the
// promoted dtype (fp32 with fp32 ia3_l) before the cast back.
#include "sim/finetune/peft_method.h"
#include "sim/graph/eager_tape.h"
#include "sim/torch/torch_ops.h"

namespace vramsim {
namespace {

class Ia3Method final : public PeftLinearMethod {
 public:
  std::vector<AdapterTensor> layer_tensors(std::int64_t in, std::int64_t out, const LoraOptions& /*o*/,
                                           bool feedforward) const override {
    return {{"ia3_l.default", feedforward ? Shape{1, in} : Shape{out, 1}}};
  }

  VarId forward(TorchOps& ops, const std::string& name, VarId x, VarId /*weight*/,
                const std::function<VarId(VarId)>& base, const LoraAdapter& a, const LoraOptions& /*o*/,
                bool /*training*/) const override {
    EagerTape& t = ops.tape();
    const VarId l = a.params.at(0);
    const Shape ls = t.shape(l);
    const bool feedforward = ls.at(0) == 1 && ls.at(1) > 1;
    const VarId flat = t.view(l, {ls.at(0) * ls.at(1)}, name + ".ia3_l.flatten");
    const VarId scaling = ops.scale(name + ".ia3_scaling", flat);  // 1 * ia3_l.flatten()
    t.drop(flat);
    if (feedforward) {
      const DType previous = t.dtype(x);
      const VarId xa = ops.to(name + ".ia3_cast_input", x, t.dtype(l));
      const VarId product = ops.mul(name + ".ia3_x*scaling", xa, scaling);
      t.drop({xa, scaling});
      const VarId interm = ops.to(name + ".ia3_interm", product, previous);
      t.drop(product);
      const VarId result = base(interm);
      t.drop(interm);
      return result;
    }
    const VarId result = base(x);
    const DType result_dtype = t.dtype(result);
    const VarId product = ops.mul(name + ".ia3_result*scaling", result, scaling);
    t.drop({result, scaling});
    const VarId out = ops.to(name + ".ia3_result_dtype", product, result_dtype);
    t.drop(product);
    return out;
  }
};

}  // namespace

const PeftLinearMethod& ia3_method() {
  static const Ia3Method kMethod;
  return kMethod;
}

}  // namespace vramsim
