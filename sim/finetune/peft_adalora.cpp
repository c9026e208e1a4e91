// AdaLoRA (peft_adalora.h): SVDLinear's forward, the orthogonality regulariser and RankAllocator's state.
#include "sim/finetune/peft_adalora.h"

#include "sim/finetune/peft_method.h"
#include "sim/graph/eager_tape.h"
#include "sim/torch/torch_ops.h"

namespace vramsim {
namespace {

using Kind = GradRule::Kind;

// An elementwise op under no_grad: one new tensor of `like`'s shape and dtype.
VarId no_grad_op(EagerTape& t, const std::string& name, const char* kind, std::vector<VarId> inputs,
                 VarId like) {
  OpCall c;
  c.name = name;
  c.kind = kind;
  c.inputs = std::move(inputs);
  c.outputs = {OutputSpec{"", t.shape(like), DType::kFloat32}};
  return t.op1(c);
}

class AdaloraMethod final : public PeftLinearMethod {
 public:
  std::vector<AdapterTensor> layer_tensors(std::int64_t in, std::int64_t out, const LoraOptions& o,
                                           bool /*feedforward*/) const override {
    const std::int64_t r = o.init_r;
    return {{"lora_A.default", {r, in}},
            {"lora_B.default", {out, r}},
            {"lora_E.default", {r, 1}},
            {"ranknum.default", {1}, false}};
  }

  VarId forward(TorchOps& ops, const std::string& name, VarId x, VarId /*weight*/,
                const std::function<VarId(VarId)>& base, const LoraAdapter& a, const LoraOptions& o,
                bool training) const override {
    EagerTape& t = ops.tape();
    const VarId lora_a = a.params.at(0), lora_b = a.params.at(1), lora_e = a.params.at(2);
    const VarId ranknum = a.params.at(3);
    const Shape as = t.shape(lora_a), bs = t.shape(lora_b);
    const VarId result = base(x);
    const VarId xa = ops.to(name + ".lora_cast_input", x, t.dtype(lora_a));
    VarId dropped = xa;
    if (training && o.dropout > 0.0) {
      const auto [y, mask] = ops.dropout(name + ".lora_dropout", xa, o.dropout);
      t.drop({mask, xa});
      dropped = y;
    }
    const VarId ae = ops.mul(name + ".lora_A*lora_E", lora_a, lora_e);  // (r, in)
    const VarId aet = t.view(ae, {as.at(1), as.at(0)}, name + ".(lora_A*lora_E).T");
    t.drop(ae);
    Shape hs = t.shape(x);
    hs.back() = as.at(0);
    const VarId h = ops.matmul(name + ".x@(A*E).T", dropped, aet, hs);
    t.drop({dropped, aet});
    const VarId bt = t.view(lora_b, {bs.at(1), bs.at(0)}, name + ".lora_B.T");
    Shape ys = hs;
    ys.back() = bs.at(0);
    const VarId y = ops.matmul(name + ".@lora_B.T", h, bt, ys);
    t.drop({h, bt});
    const VarId scaled = ops.scale(name + ".*scaling", y);
    t.drop(y);
    const VarId rank = ops.add_scalar(name + ".ranknum+1e-5", ranknum);
    const VarId update = ops.div(name + "./ranknum", scaled, rank);
    t.drop({scaled, rank});
    // result += update: in place into the base output (its dtype); the update's gradient is grad cast to fp32
    BackwardRule rule;
    rule.grads = {GradRule{Kind::kPassThrough}, GradRule{Kind::kAlloc}};
    const VarId sum = t.inplace(name + ".result+=", "add_", result, {update}, rule);
    t.drop({result, update});
    return sum;
  }
};

}  // namespace

const PeftLinearMethod& adalora_method() {
  static const AdaloraMethod kMethod;
  return kMethod;
}

VarId adalora_orthogonal_regularizer(TorchOps& ops, const LoraAdapters& adapters,
                                     const std::vector<VarId>& adapted, VarId loss) {
  EagerTape& t = ops.tape();
  VarId regu = kNoVar;
  for (const VarId base : adapted) {
    const auto it = adapters.find(base);
    if (it == adapters.end()) {
      continue;
    }
    for (int i = 0; i < 2; ++i) {  // lora_A: p @ p.T; lora_B: p.T @ p
      const VarId p = it->second.params.at(static_cast<std::size_t>(i));
      const Shape s = t.shape(p);
      const std::int64_t r = i == 0 ? s.at(0) : s.at(1);
      const std::int64_t k = i == 0 ? s.at(1) : s.at(0);
      const std::string name = t.name(p) + ".orth_reg";
      const VarId left = i == 0 ? p : t.view(p, {r, k}, name + ".T");
      const VarId right = i == 0 ? t.view(p, {k, r}, name + ".T") : p;
      const VarId cov = ops.matmul(name + ".para_cov", left, right, {r, r});
      t.drop(i == 0 ? right : left);
      // torch.eye(*para_cov.size(), out=torch.empty_like(para_cov))
      const VarId eye = t.constant(name + ".I", "eye", {r, r}, t.dtype(cov));
      const VarId diff = ops.sub(name + ".para_cov-I", cov, eye);
      t.drop({cov, eye});
      OpCall norm;  // torch.norm(p="fro"): saves its input and its result
      norm.name = name + ".norm";
      norm.kind = "linalg_vector_norm";
      norm.inputs = {diff};
      norm.outputs = {OutputSpec{"", {}, t.dtype(diff)}};
      norm.saved.inputs = {0};
      norm.saved.outputs = {0};
      const VarId n = t.op1(norm);
      t.drop(diff);
      if (regu == kNoVar) {
        regu = n;
      } else {
        const VarId sum = ops.add(name + ".regu_loss+=", regu, n);
        t.drop({regu, n});
        regu = sum;
      }
    }
  }
  if (regu == kNoVar) {
    return loss;
  }
  const VarId mean = ops.scale("adalora.regu_loss/num_param", regu);
  t.drop(regu);
  const VarId weighted = ops.scale("adalora.orth_reg_weight*regu_loss", mean);
  t.drop(mean);
  const VarId total = ops.add("adalora.outputs.loss+=", loss, weighted);
  t.drop({loss, weighted});
  return total;
}

void AdaloraRankAllocator::update_ipt(EagerTape& t) {
  const bool grad = t.grad_enabled();
  t.set_grad_enabled(false);
  const bool first = m_ipt.empty();
  for (std::size_t i = 0; i < m_params.size(); ++i) {
    const VarId p = m_params[i];
    const std::string name = "rank_allocator." + t.name(p);
    if (first) {  // torch.zeros_like(p), three times
      m_ipt.push_back(t.constant(name + ".ipt", "zeros_like", t.shape(p), t.dtype(p)));
      m_exp_avg_ipt.push_back(t.constant(name + ".exp_avg_ipt", "zeros_like", t.shape(p), t.dtype(p)));
      m_exp_avg_unc.push_back(t.constant(name + ".exp_avg_unc", "zeros_like", t.shape(p), t.dtype(p)));
      for (const VarId v : {m_ipt.back(), m_exp_avg_ipt.back(), m_exp_avg_unc.back()}) {
        t.set_category(v, TensorCategory::kOptimizerState);
      }
    }
    // ipt[n] = (p * p.grad).abs().detach()
    const VarId prod = no_grad_op(t, name + ".p*grad", "mul", {p}, p);
    const VarId ipt = no_grad_op(t, name + ".abs", "abs", {prod}, p);
    t.drop({prod, m_ipt[i]});
    m_ipt[i] = ipt;
    t.set_category(ipt, TensorCategory::kOptimizerState);
    // exp_avg_ipt = beta1 * exp_avg_ipt + (1 - beta1) * ipt
    const VarId e1 = no_grad_op(t, name + ".beta1*exp_avg_ipt", "mul", {m_exp_avg_ipt[i]}, p);
    const VarId e2 = no_grad_op(t, name + ".(1-beta1)*ipt", "mul", {ipt}, p);
    const VarId e = no_grad_op(t, name + ".exp_avg_ipt", "add", {e1, e2}, p);
    t.drop({e1, e2, m_exp_avg_ipt[i]});
    m_exp_avg_ipt[i] = e;
    t.set_category(e, TensorCategory::kOptimizerState);
    // exp_avg_unc = beta2 * exp_avg_unc + (1 - beta2) * (ipt - exp_avg_ipt).abs()
    const VarId u1 = no_grad_op(t, name + ".beta2*exp_avg_unc", "mul", {m_exp_avg_unc[i]}, p);
    const VarId d = no_grad_op(t, name + ".ipt-exp_avg_ipt", "sub", {ipt, e}, p);
    const VarId da = no_grad_op(t, name + ".abs2", "abs", {d}, p);
    t.drop(d);
    const VarId u2 = no_grad_op(t, name + ".(1-beta2)*", "mul", {da}, p);
    t.drop(da);
    const VarId u = no_grad_op(t, name + ".exp_avg_unc", "add", {u1, u2}, p);
    t.drop({u1, u2, m_exp_avg_unc[i]});
    m_exp_avg_unc[i] = u;
    t.set_category(u, TensorCategory::kOptimizerState);
  }
  t.set_grad_enabled(grad);
}

}  // namespace vramsim
