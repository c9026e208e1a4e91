// VeRA (peft/tuners/vera/layer.py and model.py, PEFT 5d602fdb). The model holds one pair of frozen random
// matrices, vera_A (r, max in) and vera_B (max out, r), in BufferDicts (buffers: neither trainable nor
// counted by get_nb_trainable_parameters), sized for the largest adapted layer; each adapted layer adds two
// trainable vectors, vera_lambda_b (out) and vera_lambda_d (r). Linear.forward:
//
//   sliced_A = vera_A[:, :in]; sliced_B = vera_B[:out, :]            (views)
//   x = self._cast_input_dtype(x, lambda_d.dtype)
//   result = result + lambda_b * F.linear(lambda_d * F.linear(dropout(x), sliced_A), sliced_B)
//
// The linears' weights are buffers, so they save no input; the two products save their tensor operand for
// the lambdas' gradients: (tokens x r) and (tokens x out), in the adapter dtype.
#include "sim/finetune/peft_method.h"
#include "sim/graph/eager_tape.h"
#include "sim/torch/torch_ops.h"

namespace vramsim {
namespace {

class VeraMethod final : public PeftLinearMethod {
 public:
  std::vector<AdapterTensor> layer_tensors(std::int64_t /*in*/, std::int64_t out, const LoraOptions& o,
                                           bool /*feedforward*/) const override {
    return {{"vera_lambda_b.default", {out}}, {"vera_lambda_d.default", {o.rank}}};
  }
  std::vector<AdapterTensor> shared_tensors(std::int64_t max_in, std::int64_t max_out,
                                            const LoraOptions& o) const override {
    return {{"vera_A.default", {o.rank, max_in}, false}, {"vera_B.default", {max_out, o.rank}, false}};
  }

  VarId forward(TorchOps& ops, const std::string& name, VarId x, VarId /*weight*/,
                const std::function<VarId(VarId)>& base, const LoraAdapter& a, const LoraOptions& o,
                bool training) const override {
    EagerTape& t = ops.tape();
    const VarId lambda_b = a.params.at(0), lambda_d = a.params.at(1);
    const VarId result = base(x);
    const DType orig = t.dtype(result);
    const std::int64_t out = t.shape(lambda_b).at(0);
    const std::int64_t in = t.shape(x).back();
    const VarId sliced_a = t.view(a.shared.at(0), {o.rank, in}, name + ".vera.sliced_A");
    const VarId sliced_b = t.view(a.shared.at(1), {out, o.rank}, name + ".vera.sliced_B");
    const VarId xa = ops.to(name + ".vera_cast_input", x, t.dtype(lambda_d));
    VarId dropped = xa;
    if (training && o.dropout > 0.0) {  // vera_dropout
      const auto [y, mask] = ops.dropout(name + ".vera_dropout", xa, o.dropout);
      t.drop({mask, xa});
      dropped = y;
    }
    const VarId ya = ops.linear(name + ".vera.F.linear(x, sliced_A)", dropped, sliced_a);
    t.drop({dropped, sliced_a});
    const VarId yd = ops.mul(name + ".vera.lambda_d*", lambda_d, ya);
    t.drop(ya);
    const VarId yb = ops.linear(name + ".vera.F.linear(., sliced_B)", yd, sliced_b);
    t.drop({yd, sliced_b});
    const VarId scaled = ops.mul(name + ".vera.lambda_b*", lambda_b, yb);
    t.drop(yb);
    const VarId sum = ops.add(name + ".vera.result+", result, scaled);
    t.drop({result, scaled});
    const VarId res = ops.to(name + ".vera.result.to(orig_dtype)", sum, orig);
    t.drop(sum);
    return res;
  }
};

}  // namespace

const PeftLinearMethod& vera_method() {
  static const VeraMethod kMethod;
  return kMethod;
}

}  // namespace vramsim
