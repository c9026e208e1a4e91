#include "sim/torch/torch_ops.h"

#include <algorithm>

#include "sim/core/assert.h"
#include "sim/finetune/peft_method.h"
#include "sim/training/te_fp8_linear.h"

namespace vramsim {
namespace {

using Kind = GradRule::Kind;

using torch_ops_detail::numel_d;
using torch_ops_detail::with_last;

}  // namespace

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  const std::size_t n = std::max(a.size(), b.size());
  Shape out(n, 1);
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const std::int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    SIM_ASSERT(da == db || da == 1 || db == 1);
    out[i] = std::max(da, db);
  }
  return out;
}

// ---- autocast
// ----------------------------------------------------------------------------------------------

VarId TorchOps::autocast_low(const std::string& name, VarId x) {
  if (!m_autocast || !is_floating(m_tape.dtype(x)) || m_tape.dtype(x) == *m_autocast) {
    m_tape.hold(x);
    return x;
  }
  // autocast caches casts of fp32 leaves that require grad (the parameters), under no_grad too: its test
  // (autocast_mode.cpp, cached_cast) does not look at the grad mode. A frozen weight (LoRA's base) is cast
  // afresh at every use.
  const bool cacheable = m_tape.is_parameter(x) && m_tape.requires_grad(x);
  if (cacheable) {
    if (auto it = m_cast_cache.find(x); it != m_cast_cache.end()) {
      m_tape.hold(it->second);
      return it->second;
    }
  }
  OpCall c;
  c.name = cacheable ? m_tape.name(x) + ".autocast" : name + ".autocast_input";
  c.kind = "_to_copy";
  c.inputs = {x};
  c.outputs = {OutputSpec{"", m_tape.shape(x), *m_autocast}};
  const VarId cast = m_tape.op1(c);
  if (cacheable) {
    m_cast_cache[x] = cast;  // the cache's reference; clear_autocast_cache() drops it
    m_tape.hold(cast);
  }
  return cast;
}

VarId TorchOps::autocast_fp32(const std::string& name, VarId x) {
  if (!m_autocast || m_tape.dtype(x) == DType::kFloat32 || !is_floating(m_tape.dtype(x))) {
    m_tape.hold(x);
    return x;
  }
  return to(name + ".autocast_input", x, DType::kFloat32);
}

void TorchOps::clear_autocast_cache() {
  for (auto& [param, cast] : m_cast_cache) {
    (void)param;
    m_tape.drop(cast);
  }
  m_cast_cache.clear();
}

// ---- matmuls
// -----------------------------------------------------------------------------------------------

void TorchOps::maybe_allocate_workspace() {
  if (m_workspace_bytes > 0 && m_tape.capturing()) {
    m_tape.capture_workspace(m_workspace_bytes);  // allocated when the compiled graph runs the matmul
    m_workspace_bytes = 0;
  } else if (m_workspace_bytes >
             0) {  // after the output, inside the same call (the order the recordings show)
    m_tape.allocate("cublas_workspace.main_thread", m_workspace_bytes, DType::kUInt8,
                    TensorCategory::kWorkspace);
    m_workspace_bytes = 0;
  }
}

VarId TorchOps::linear(const std::string& name, VarId x, VarId w, VarId bias, bool weight_first) {
  return linear_impl(name, x, w, bias, weight_first, true);
}

VarId TorchOps::base_linear(const std::string& name, VarId x, VarId w, VarId bias) {
  return linear_impl(name, x, w, bias, false, false);
}

const LoraAdapter* TorchOps::plain_lora_adapter(VarId w) const {
  if (m_lora == nullptr || m_lora_options->method != PeftMethod::kLora || m_lora_options->use_dora) {
    return nullptr;
  }
  const auto it = m_lora->find(w);
  return it == m_lora->end() ? nullptr : &it->second;
}

VarId TorchOps::linear_impl(const std::string& name, VarId x, VarId w, VarId bias, bool weight_first,
                            bool adapters) {
  if (m_float8 != nullptr && m_float8->count(w) != 0 && !weight_first &&
      m_tape.shape(w)[1] == m_tape.shape(x).back()) {
    if (m_float8_options->recipe == Float8Recipe::kTeDelayed) {  // te.Linear (te_fp8_linear.h)
      return te_linear_forward(*this, name, x, w, bias, *m_float8_options);
    }
    return float8_linear_forward(*this, name, x, w, bias, *m_float8_options,
                                 m_float8_options->fsdp_float8_all_gather);
  }
  const auto quantized = m_bnb != nullptr ? m_bnb->find(w) : BnbWeights::const_iterator{};
  const bool bnb = m_bnb != nullptr && quantized != m_bnb->end();
  const auto base = [&](VarId input) {
    return bnb ? bnb_linear_forward(*this, name, input, w, bias, quantized->second, *m_bnb_options)
               : torch_linear(name, input, w, bias, weight_first);
  };
  const auto it = m_lora != nullptr ? m_lora->find(w) : LoraAdapters::const_iterator{};
  if (!adapters || m_lora == nullptr || it == m_lora->end()) {
    return base(x);
  }
  // the adapted layer's forward (PEFT's tuner layer: peft_method.h)
  const bool clone =
      bnb && m_lora_options->method == PeftMethod::kLora &&
      (quantized->second.format == BnbFormat::kNf4 || quantized->second.format == BnbFormat::kFp4);
  const auto base_result = [&](VarId input) {
    VarId y = base(input);
    if (clone) {
      // peft/tuners/lora/bnb.py Linear4bit.forward: "for 4bit, we need to defensively clone here"
      const VarId cloned = contiguous(name + ".result_clone", y);
      m_tape.drop(y);
      y = cloned;
    }
    return y;
  };
  return linear_method(*m_lora_options)
      ->forward(*this, name, x, w, base_result, it->second, *m_lora_options, m_lora_training);
}

VarId TorchOps::torch_linear(const std::string& name, VarId x, VarId w, VarId bias, bool weight_first) {
  const VarId first = autocast_low(name, weight_first ? w : x);
  const VarId second = autocast_low(name, weight_first ? x : w);
  const VarId xa = weight_first ? second : first;
  const VarId wa = weight_first ? first : second;
  const VarId ba = bias == kNoVar ? kNoVar : autocast_low(name, bias);
  const Shape& ws = m_tape.shape(w);
  // nn.Linear weights are (out, in); GPT-2's Conv1D weights are (in, out): the output width is the one
  // that is not x's last dimension.
  const std::int64_t in = m_tape.shape(x).back();
  const std::int64_t out_features = ws[0] == in && ws[1] != in ? ws[1] : ws[0];
  OpCall c;
  c.name = name;
  const DType out_dtype = m_autocast ? *m_autocast : promote(m_tape.dtype(x), m_tape.dtype(w));
  c.outputs = {OutputSpec{"", with_last(m_tape.shape(x), out_features), out_dtype}};
  // mm(self=x, mat2=w.t()) computes mat2's gradient first; addmm(self=bias, mat1=x, mat2=w.t()) mat1's,
  // mat2's, then self's (argument names sorted). A batched x is folded into rows (matmul /
  // _flatten_nd_linear), so its gradient is a view.
  c.backward.order = ba == kNoVar ? std::vector<int>{1, 0} : std::vector<int>{0, 1, 2};
  c.backward.grads = {GradRule{Kind::kAlloc, false, m_tape.shape(x).size() > 2}, GradRule{}};
  if (weight_first && ba == kNoVar) {
    // einsum(weight, x, "o i, ... i -> ... o") runs bmm(self = weight, mat2 = x^T) and permutes the result
    // back: the output's last dimension is outermost in memory, and the backward computes mat2's, x's,
    // gradient first (the sorted argument names), itself x^T-shaped, so with its last dimension outermost.
    c.outputs[0].order = MemoryOrder::kLastDimOutermost;
    c.backward.order = {0, 1};
    c.backward.grads[0].layout = GradRule::Layout::kLastDimOutermost;
  }
  c.flops = 2.0 * numel_d(m_tape.shape(x)) * static_cast<double>(out_features);
  return record_linear(c, xa, wa, ba);
}

VarId TorchOps::record_linear(OpCall& c, VarId xa, VarId wa, VarId ba) {
  c.kind = ba == kNoVar ? "mm" : "addmm";
  c.inputs = {xa, wa};
  if (ba != kNoVar) {
    c.inputs.push_back(ba);
  }
  // mm saves mat1 when mat2 needs grad and mat2 when mat1 does; the bias is not saved.
  if (m_tape.requires_grad(wa)) {
    c.saved.inputs.push_back(0);
  }
  if (m_tape.requires_grad(xa)) {
    c.saved.inputs.push_back(1);
  }
  if (ba != kNoVar) {  // a bias broadcasts over the rows: its gradient is summed to its shape
    c.backward.grads.push_back(GradRule{Kind::kPassThrough, true});
  }
  const VarId y = m_tape.op1(c);
  maybe_allocate_workspace();
  m_tape.drop(xa);
  m_tape.drop(wa);
  if (ba != kNoVar) {
    m_tape.drop(ba);
  }
  return y;
}

VarId TorchOps::matmul(const std::string& name, VarId a, VarId b, const Shape& out_shape, bool cublas) {
  const VarId aa = autocast_low(name, a);
  const VarId bb = autocast_low(name, b);
  OpCall c;
  c.name = name;
  c.kind = "bmm";
  c.inputs = {aa, bb};
  const DType out_dtype = m_autocast ? *m_autocast : promote(m_tape.dtype(a), m_tape.dtype(b));
  c.outputs = {OutputSpec{"", out_shape, out_dtype}};
  if (m_tape.requires_grad(bb)) {
    c.saved.inputs.push_back(0);
  }
  if (m_tape.requires_grad(aa)) {
    c.saved.inputs.push_back(1);
  }
  c.backward.order = {1, 0};  // bmm(self, mat2): mat2's gradient first
  // torch.matmul folds 4-D operands into bmm's 3-D ones: their gradients are views of bmm's.
  for (VarId in : {aa, bb}) {
    c.backward.grads.push_back(GradRule{Kind::kAlloc, false, m_tape.shape(in).size() > 3});
  }
  c.flops = 2.0 * numel_d(out_shape) * static_cast<double>(m_tape.shape(a).back());
  const VarId y = m_tape.op1(c);
  if (cublas) {
    maybe_allocate_workspace();
  }
  m_tape.drop(aa);
  m_tape.drop(bb);
  return y;
}

// ---- elementwise
// -------------------------------------------------------------------------------------------

VarId TorchOps::binary(const std::string& name, const std::string& kind, VarId a, VarId b, SavedSpec saved,
                       bool a_pass, bool b_pass, std::vector<Bytes> temps) {
  const Shape out = broadcast_shapes(m_tape.shape(a), m_tape.shape(b));
  const DType dt = promote(m_tape.dtype(a), m_tape.dtype(b));
  OpCall c;
  c.name = name;
  c.kind = kind;
  c.inputs = {a, b};
  c.outputs = {OutputSpec{"", out, dt}};
  c.saved = std::move(saved);
  c.backward.temp_bytes = std::move(temps);
  c.flops = numel_d(out);
  for (VarId in : {a, b}) {
    const bool pass = in == a ? a_pass : b_pass;
    // A broadcast input's gradient is the full-size one, summed to its shape by the engine (sum_to).
    const bool broadcast = m_tape.shape(in) != out;
    c.backward.grads.push_back(GradRule{pass ? Kind::kPassThrough : Kind::kAlloc, broadcast});
  }
  c.backward.order = {1, 0};  // (self, other): "other" sorts first in derivatives.yaml
  for (GradRule& g : c.backward.grads) {
    g.layout = GradRule::Layout::kLikeGrad;  // grad * ...: the incoming gradient is the first operand
  }
  // TensorIterator lays the output out as the first operand that is not broadcast in it
  c.outputs[0].order = m_tape.shape(a) == out ? m_tape.memory_order(a) : m_tape.memory_order(b);
  return m_tape.op1(c);
}

VarId TorchOps::add(const std::string& name, VarId a, VarId b) {
  return binary(name, "add", a, b, {}, true, true);
}

VarId TorchOps::sub(const std::string& name, VarId a, VarId b) {
  return binary(name, "sub", a, b, {}, true, false);
}

VarId TorchOps::mul(const std::string& name, VarId a, VarId b) {
  SavedSpec s;
  if (m_tape.requires_grad(b)) {
    s.inputs.push_back(0);
  }
  if (m_tape.requires_grad(a)) {
    s.inputs.push_back(1);
  }
  return binary(name, "mul", a, b, s, false, false);
}

VarId TorchOps::div(const std::string& name, VarId a, VarId b) {
  SavedSpec s;
  if (m_tape.requires_grad(b)) {
    s.inputs = {0, 1};
  } else if (m_tape.requires_grad(a)) {
    s.inputs = {1};
  }
  std::vector<Bytes> temps;
  if (m_tape.requires_grad(b)) {
    // other's formula, -grad * ((self / other) / other): three temporaries of the output's size live until
    // the product is made.
    const Bytes bytes = tensor_bytes(broadcast_shapes(m_tape.shape(a), m_tape.shape(b)),
                                     promote(m_tape.dtype(a), m_tape.dtype(b)));
    temps = {bytes, bytes, bytes};
  }
  return binary(name, "div", a, b, s, false, false, std::move(temps));
}

VarId TorchOps::unary(const std::string& name, const std::string& kind, VarId a, DType out, SavedSpec saved,
                      std::vector<Bytes> temps) {
  OpCall c;
  c.name = name;
  c.kind = kind;
  c.inputs = {a};
  c.outputs = {OutputSpec{"", m_tape.shape(a), out}};
  c.outputs[0].order = m_tape.memory_order(a);
  c.saved = std::move(saved);
  c.backward.temp_bytes = std::move(temps);
  c.backward.grads = {GradRule{}};
  c.backward.grads[0].layout = GradRule::Layout::kLikeGrad;
  c.flops = numel_d(m_tape.shape(a));
  return m_tape.op1(c);
}

VarId TorchOps::scale(const std::string& name, VarId a) { return unary(name, "mul", a, m_tape.dtype(a), {}); }

VarId TorchOps::add_scalar(const std::string& name, VarId a) {
  OpCall c;
  c.name = name;
  c.kind = "add";
  c.inputs = {a};
  c.outputs = {OutputSpec{"", m_tape.shape(a), m_tape.dtype(a)}};
  c.backward.grads = {GradRule{Kind::kPassThrough}};
  c.flops = numel_d(m_tape.shape(a));
  return m_tape.op1(c);
}

VarId TorchOps::neg(const std::string& name, VarId a) { return unary(name, "neg", a, m_tape.dtype(a), {}); }

VarId TorchOps::pow2(const std::string& name, VarId a) {
  const VarId x = autocast_fp32(name, a);
  // pow_backward: grad * (2 * self.pow(1)): self.pow(1) is a copy, 2 * it another; C++ keeps both
  // temporaries until the full expression ends, beside the gradient.
  const Bytes bytes = tensor_bytes(m_tape.shape(x), m_tape.dtype(x));
  const VarId y = unary(name, "pow", x, m_tape.dtype(x), SavedSpec{{0}, {}}, {bytes, bytes});
  m_tape.drop(x);
  return y;
}

VarId TorchOps::pow3(const std::string& name, VarId a) {
  const VarId x = autocast_fp32(name, a);  // pow is on autocast's fp32 list
  // pow_backward: grad * (3 * self.pow(2)): two full-size temporaries (self.pow(2), then 3 * it).
  const Bytes bytes = tensor_bytes(m_tape.shape(x), m_tape.dtype(x));
  const VarId y = unary(name, "pow", x, m_tape.dtype(x), SavedSpec{{0}, {}}, {bytes, bytes});
  m_tape.drop(x);
  return y;
}

VarId TorchOps::tanh(const std::string& name, VarId a) {
  return unary(name, "tanh", a, m_tape.dtype(a), SavedSpec{{}, {0}});  // tanh_backward(grad, result)
}

VarId TorchOps::sqrt(const std::string& name, VarId a) {
  return unary(name, "sqrt", a, m_tape.dtype(a), SavedSpec{{}, {0}},
               {tensor_bytes(m_tape.shape(a), m_tape.dtype(a))});
}

VarId TorchOps::rsqrt(const std::string& name, VarId a) {
  const VarId x = autocast_fp32(name, a);
  // -0.5 * grad * result.pow(3): two temporaries (result.pow(3), -0.5 * grad) live until the product is made.
  const Bytes bytes = tensor_bytes(m_tape.shape(x), m_tape.dtype(x));
  const VarId y = unary(name, "rsqrt", x, m_tape.dtype(x), SavedSpec{{}, {0}}, {bytes, bytes});
  m_tape.drop(x);
  return y;
}

VarId TorchOps::exp(const std::string& name, VarId a) {
  const VarId x = autocast_fp32(name, a);
  const VarId y = unary(name, "exp", x, m_tape.dtype(x), SavedSpec{{}, {0}});
  m_tape.drop(x);
  return y;
}

VarId TorchOps::log(const std::string& name, VarId a) {
  const VarId x = autocast_fp32(name, a);
  const VarId y = unary(name, "log", x, m_tape.dtype(x), SavedSpec{{0}, {}});
  m_tape.drop(x);
  return y;
}

VarId TorchOps::sigmoid(const std::string& name, VarId a) {
  return unary(name, "sigmoid", a, m_tape.dtype(a), SavedSpec{{}, {0}});
}

VarId TorchOps::silu(const std::string& name, VarId a) {
  return unary(name, "silu", a, m_tape.dtype(a), SavedSpec{{0}, {}});
}

VarId TorchOps::gelu(const std::string& name, VarId a) {
  return unary(name, "gelu", a, m_tape.dtype(a), SavedSpec{{0}, {}});
}

VarId TorchOps::to(const std::string& name, VarId a, DType dtype) {
  if (m_tape.dtype(a) == dtype) {
    m_tape.hold(a);
    return a;
  }
  return unary(name, "_to_copy", a, dtype, {});
}

VarId TorchOps::contiguous(const std::string& name, VarId a) {
  OpCall c;
  c.name = name;
  c.kind = "clone";
  c.inputs = {a};
  c.outputs = {OutputSpec{"", m_tape.shape(a), m_tape.dtype(a)}};
  c.backward.grads = {GradRule{Kind::kPassThrough}};
  return m_tape.op1(c);
}

VarId TorchOps::contiguous(const std::string& name, VarId a, bool already) {
  if (already) {
    m_tape.hold(a);
    return a;
  }
  return contiguous(name, a);
}

VarId TorchOps::cat_last(const std::string& name, VarId a, VarId b) {
  OpCall c;
  c.name = name;
  c.kind = "cat";
  c.inputs = {a, b};
  Shape out = m_tape.shape(a);
  out.back() += m_tape.shape(b).back();
  c.outputs = {OutputSpec{"", out, promote(m_tape.dtype(a), m_tape.dtype(b))}};
  c.backward.grads = {GradRule{Kind::kPassThrough}, GradRule{Kind::kPassThrough}};  // narrow() views
  return m_tape.op1(c);
}

VarId TorchOps::cat_dim(const std::string& name, VarId a, VarId b, std::size_t dim) {
  OpCall c;
  c.name = name;
  c.kind = "cat";
  c.inputs = {a, b};
  Shape out = m_tape.shape(a);
  out.at(dim) += m_tape.shape(b).at(dim);
  c.outputs = {OutputSpec{"", out, promote(m_tape.dtype(a), m_tape.dtype(b))}};
  c.backward.grads = {GradRule{Kind::kPassThrough}, GradRule{Kind::kPassThrough}};  // narrow() views
  return m_tape.op1(c);
}

// ---- reductions
// --------------------------------------------------------------------------------------------

VarId TorchOps::mean_last(const std::string& name, VarId a) {
  OpCall c;
  c.name = name;
  c.kind = "mean";
  c.inputs = {a};
  c.outputs = {OutputSpec{"", with_last(m_tape.shape(a), 1), m_tape.dtype(a)}};
  c.flops = numel_d(m_tape.shape(a));
  return m_tape.op1(c);  // backward: grad.expand(...) / n -> a full-size gradient
}

VarId TorchOps::sum_last(const std::string& name, VarId a) {
  OpCall c;
  c.name = name;
  c.kind = "sum";
  c.inputs = {a};
  const DType dt = m_autocast && m_tape.dtype(a) != DType::kFloat32 ? DType::kFloat32 : m_tape.dtype(a);
  c.outputs = {OutputSpec{"", with_last(m_tape.shape(a), 1), dt}};
  c.backward.grads = {GradRule{Kind::kPassThrough}};  // grad.expand(sizes): a view
  c.reduce_staging = m_tape.last_dim_reduce_staging(a);
  c.flops = numel_d(m_tape.shape(a));
  return m_tape.op1(c);
}

VarId TorchOps::mean_all(const std::string& name, VarId a) {
  OpCall c;
  c.name = name;
  c.kind = "mean";
  c.inputs = {a};
  c.outputs = {OutputSpec{"", {}, m_tape.dtype(a)}};
  c.flops = numel_d(m_tape.shape(a));
  return m_tape.op1(c);
}

std::pair<VarId, VarId> TorchOps::max_last(const std::string& name, VarId a) {
  OpCall c;
  c.name = name;
  c.kind = "max";
  c.inputs = {a};
  const Shape s = with_last(m_tape.shape(a), 1);
  c.outputs = {OutputSpec{"", s, m_tape.dtype(a)}, OutputSpec{"indices", s, DType::kInt64, false}};
  c.saved.outputs = {1};  // value_selecting_reduction_backward: zeros(self) scattered at the indices
  // MaxOps accumulates thrust::pair<acc_t, int64_t>: 16 bytes per partial result
  c.reduce_staging = m_tape.last_dim_reduce_staging(a, 16);
  c.flops = numel_d(m_tape.shape(a));
  const std::vector<VarId> out = m_tape.op(c);
  return {out[0], out[1]};
}

VarId TorchOps::amax_last(const std::string& name, VarId a) {
  OpCall c;
  c.name = name;
  c.kind = "amax";
  c.inputs = {a};
  c.outputs = {OutputSpec{"", with_last(m_tape.shape(a), 1), m_tape.dtype(a)}};
  c.saved = SavedSpec{{0}, {0}};
  // backward: (self == result) as a full-size bool mask, divided by the count of maxima
  c.backward.temp_bytes = {tensor_bytes(m_tape.shape(a), DType::kBool)};
  c.reduce_staging = m_tape.last_dim_reduce_staging(a);
  c.flops = numel_d(m_tape.shape(a));
  return m_tape.op1(c);
}

VarId TorchOps::vector_norm_last(const std::string& name, VarId a) {
  OpCall c;
  c.name = name;
  c.kind = "linalg_vector_norm";
  c.inputs = {a};
  const DType dt = m_autocast && m_tape.dtype(a) != DType::kFloat32 ? DType::kFloat32 : m_tape.dtype(a);
  c.outputs = {OutputSpec{"", with_last(m_tape.shape(a), 1), dt}};
  c.saved = SavedSpec{{0}, {0}};
  // norm_backward for p = 2 (FunctionsManual.cpp): grad * (self / norm).masked_fill_(norm == 0, 0): the
  // quotient and the bool mask of the norm's shape (temporaries of the expression, alive until it ends),
  // then the product.
  ScratchScript scratch;
  scratch.alloc(tensor_bytes(m_tape.shape(a), m_tape.dtype(a)));
  scratch.alloc(tensor_bytes(c.outputs[0].shape, DType::kBool));
  c.backward.scratch_before_grads = scratch.steps();
  c.backward.grads = {GradRule{}};
  c.backward.grads[0].layout = GradRule::Layout::kLikeGrad;
  c.reduce_staging = m_tape.last_dim_reduce_staging(a);
  c.flops = 2.0 * numel_d(m_tape.shape(a));
  return m_tape.op1(c);
}

}  // namespace vramsim
