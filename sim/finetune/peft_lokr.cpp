// LoKr (peft/tuners/lokr/layer.py, PEFT 5d602fdb), for a Linear with decompose_both False (PEFT's default).
// update_layer factorizes in = in_m * in_n and out = out_l * out_k (factorization(dim, decompose_factor))
// and adds lokr_w1 (out_l, in_m), and lokr_w2 (out_k, in_n), or lokr_w2_a (out_k, r) and lokr_w2_b (r, in_n)
// when r < max(out_k, in_n) / 2. get_delta_weight: w2 = w2_a @ w2_b; make_kron: torch.kron(w1, w2) * scale
// (ordinary autograd: kron saves w1 and w2, the product by a Python float saves nothing); the (out, in)
// delta weight is then saved by F.linear (lycoris_delta_forward).
#include <utility>

#include "sim/finetune/peft_method.h"
#include "sim/graph/eager_tape.h"
#include "sim/torch/torch_ops.h"

namespace vramsim {
namespace {

// peft/tuners/lokr/layer.py factorization(dimension, factor): (m, n), m * n = dimension, m <= n.
std::pair<std::int64_t, std::int64_t> factorization(std::int64_t dimension, std::int64_t factor) {
  if (factor > 0 && dimension % factor == 0) {
    return {factor, dimension / factor};
  }
  if (factor == -1) {
    factor = dimension;
  }
  std::int64_t m = 1, n = dimension;
  const std::int64_t length = m + n;
  while (m < n) {
    std::int64_t new_m = m + 1;
    while (dimension % new_m != 0) {
      ++new_m;
    }
    const std::int64_t new_n = dimension / new_m;
    if (new_m + new_n > length || new_m > factor) {
      break;
    }
    m = new_m;
    n = new_n;
  }
  return m > n ? std::pair{n, m} : std::pair{m, n};
}

class LokrMethod final : public PeftLinearMethod {
 public:
  std::vector<AdapterTensor> layer_tensors(std::int64_t in, std::int64_t out, const LoraOptions& o,
                                           bool /*feedforward*/) const override {
    const auto [in_m, in_n] = factorization(in, o.decompose_factor);
    const auto [out_l, out_k] = factorization(out, o.decompose_factor);
    std::vector<AdapterTensor> t{{"lokr_w1.default", {out_l, in_m}}};
    if (2 * static_cast<std::int64_t>(o.rank) < std::max(out_k, in_n)) {  // use_w2 = not (r < max / 2)
      t.push_back({"lokr_w2_a.default", {out_k, o.rank}});
      t.push_back({"lokr_w2_b.default", {o.rank, in_n}});
    } else {
      t.push_back({"lokr_w2.default", {out_k, in_n}});
    }
    return t;
  }

  VarId forward(TorchOps& ops, const std::string& name, VarId x, VarId /*weight*/,
                const std::function<VarId(VarId)>& base, const LoraAdapter& a, const LoraOptions& /*o*/,
                bool /*training*/) const override {
    EagerTape& t = ops.tape();
    const VarId w1 = a.params.at(0);
    VarId w2 = a.params.at(1);
    if (a.params.size() == 3) {
      w2 = ops.matmul(name + ".lokr.w2_a@w2_b", a.params[1], a.params[2],
                      {t.shape(a.params[1]).at(0), t.shape(a.params[2]).at(1)});
    } else {
      t.hold(w2);
    }
    const Shape s1 = t.shape(w1);
    const Shape s2 = t.shape(w2);
    OpCall c;  // torch.kron(w1, w2): saves both for backward
    c.name = name + ".lokr.kron";
    c.kind = "kron";
    c.inputs = {w1, w2};
    c.outputs = {OutputSpec{"", {s1.at(0) * s2.at(0), s1.at(1) * s2.at(1)}, t.dtype(w1)}};
    c.saved.inputs = {0, 1};
    c.flops = static_cast<double>(s1.at(0) * s2.at(0) * s1.at(1) * s2.at(1));
    const VarId kron = t.op1(c);
    t.drop(w2);
    const VarId delta = ops.scale(name + ".lokr.kron*scale", kron);
    t.drop(kron);
    return lycoris_delta_forward(ops, name, x, delta, base);
  }
};

}  // namespace

const PeftLinearMethod& lokr_method() {
  static const LokrMethod kMethod;
  return kMethod;
}

}  // namespace vramsim
