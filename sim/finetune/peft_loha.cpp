// LoHa (peft/tuners/loha/layer.py, PEFT 5d602fdb). update_layer (create_adapter_parameters, a Linear) adds
// hada_w1_a (out, r), hada_w1_b (r, in), hada_w2_a (out, r), hada_w2_b (r, in), all trainable.
// get_delta_weight runs HadaWeight, an autograd.Function:
//   forward:  ctx.save_for_backward(w1a, w1b, w2a, w2b, scale); ((w1a @ w1b) * (w2a @ w2b)) * scale
//   backward: grad_out * scale, then per pair temp = grad_out * (w2a @ w2b) (and the other), its matmuls
// so the forward makes three (out x in) temporaries and keeps only the parameters; the delta weight itself
// is saved by F.linear (lycoris_delta_forward). That full-size delta per adapted layer, alive from the
// layer's forward to its backward, is LoHa's cost over LoRA.
#include "sim/finetune/peft_method.h"
#include "sim/graph/eager_tape.h"
#include "sim/torch/torch_ops.h"

namespace vramsim {
namespace {

class LohaMethod final : public PeftLinearMethod {
 public:
  std::vector<AdapterTensor> layer_tensors(std::int64_t in, std::int64_t out, const LoraOptions& o,
                                           bool /*feedforward*/) const override {
    return {{"hada_w1_a.default", {out, o.rank}},
            {"hada_w1_b.default", {o.rank, in}},
            {"hada_w2_a.default", {out, o.rank}},
            {"hada_w2_b.default", {o.rank, in}}};
  }

  VarId forward(TorchOps& ops, const std::string& name, VarId x, VarId /*weight*/,
                const std::function<VarId(VarId)>& base, const LoraAdapter& a, const LoraOptions& /*o*/,
                bool /*training*/) const override {
    EagerTape& t = ops.tape();
    const VarId w1a = a.params.at(0), w1b = a.params.at(1), w2a = a.params.at(2), w2b = a.params.at(3);
    const std::int64_t out = t.shape(w1a).at(0);
    const std::int64_t in = t.shape(w1b).at(1);
    const DType dtype = t.dtype(w1a);
    // HadaWeight.forward runs without grad: its temporaries, then the output with the Function's node
    const bool grad = t.grad_enabled();
    t.set_grad_enabled(false);
    const VarId m1 = ops.matmul(name + ".hada.w1a@w1b", w1a, w1b, {out, in});
    const VarId m2 = ops.matmul(name + ".hada.w2a@w2b", w2a, w2b, {out, in});
    const VarId product = ops.mul(name + ".hada.product", m1, m2);
    t.drop({m1, m2});
    t.set_grad_enabled(grad);
    OpCall c;
    c.name = name + ".HadaWeight";
    c.kind = "HadaWeight";
    c.inputs = {w1a, w1b, w2a, w2b, product};
    c.outputs = {OutputSpec{"", {out, in}, dtype}};
    c.saved.inputs = {0, 1, 2, 3};
    c.backward.grads = {GradRule{GradRule::Kind::kAlloc}, GradRule{GradRule::Kind::kAlloc},
                        GradRule{GradRule::Kind::kAlloc}, GradRule{GradRule::Kind::kAlloc},
                        GradRule{GradRule::Kind::kNone}};
    // grad_out * scale, w2a @ w2b (then w1a @ w1b) and temp: three of the delta's size
    c.backward.temp_bytes = {3 * static_cast<Bytes>(out * in) * dtype_size_bytes(dtype)};
    c.flops = 4.0 * static_cast<double>(out * in * t.shape(w1a).at(1));
    const VarId delta = t.op1(c);
    t.drop(product);
    return lycoris_delta_forward(ops, name, x, delta, base);
  }
};

}  // namespace

const PeftLinearMethod& loha_method() {
  static const LohaMethod kMethod;
  return kMethod;
}

}  // namespace vramsim
