// The nn-level TorchOps: softmax, masking, dropout, fused attention, embedding, losses, LayerNorm.
// (Elementwise ops, reductions, matmuls and autocast are in torch_ops.cpp.)
#include "sim/torch/torch_ops.h"

#include "sim/core/error.h"
#include "sim/parallel/context_parallel.h"

namespace vramsim {
namespace {

using Kind = GradRule::Kind;

using torch_ops_detail::numel_d;
using torch_ops_detail::with_last;

}  // namespace

// ---- attention pieces
// --------------------------------------------------------------------------------------

VarId TorchOps::softmax_last(const std::string& name, VarId a, std::optional<DType> dtype) {
  DType out = dtype.value_or(m_tape.dtype(a));
  if (m_autocast && !dtype) {
    out = DType::kFloat32;
  }
  // softmax(x, dtype=float32) (SoftMax.cpp): CUDA computes fp16 -> fp32 in the kernel (half_to_float); any
  // other input is converted first, a copy that lives while _softmax runs.
  if (out != m_tape.dtype(a) && !(m_tape.dtype(a) == DType::kFloat16 && out == DType::kFloat32)) {
    const VarId converted = to(name + ".to_dtype", a, out);
    const VarId y = softmax_last(name, converted, out);
    m_tape.drop(converted);
    return y;
  }
  OpCall c;
  c.name = name;
  c.kind = "_softmax";
  c.inputs = {a};
  c.outputs = {OutputSpec{"", m_tape.shape(a), out}};
  c.saved.outputs = {0};
  c.flops = 5.0 * numel_d(m_tape.shape(a));
  if (out != m_tape.dtype(a)) {  // _softmax_backward_data returns fp32, then cast back to the input dtype
    c.backward.temp_bytes = {tensor_bytes(m_tape.shape(a), out)};
  }
  return m_tape.op1(c);
}

VarId TorchOps::log_softmax_last(const std::string& name, VarId a) {
  OpCall c;
  c.name = name;
  c.kind = "_log_softmax";
  c.inputs = {a};
  const DType out = m_autocast ? DType::kFloat32 : m_tape.dtype(a);
  c.outputs = {OutputSpec{"", m_tape.shape(a), out}};
  c.saved.outputs = {0};
  c.flops = 5.0 * numel_d(m_tape.shape(a));
  return m_tape.op1(c);
}

VarId TorchOps::masked_fill(const std::string& name, VarId a, VarId mask) {
  OpCall c;
  c.name = name;
  c.kind = "masked_fill";
  c.inputs = {a, mask};
  c.outputs = {OutputSpec{"", m_tape.shape(a), m_tape.dtype(a)}};
  c.saved.inputs = {1};
  c.backward.grads = {GradRule{Kind::kAlloc}, GradRule{Kind::kNone}};
  c.flops = numel_d(m_tape.shape(a));
  return m_tape.op1(c);
}

VarId TorchOps::where(const std::string& name, VarId mask, VarId a) {
  // The python scalar becomes a 0-dim device tensor for the call (a 4-byte allocation freed right after).
  const VarId scalar = m_tape.constant(name + ".scalar", "scalar_tensor", {}, DType::kFloat32);
  OpCall c;
  c.name = name;
  c.kind = "where";
  c.inputs = {mask, a, scalar};
  c.outputs = {OutputSpec{"", broadcast_shapes(m_tape.shape(mask), m_tape.shape(a)), m_tape.dtype(a)}};
  c.saved.inputs = {0};
  c.backward.grads = {GradRule{Kind::kNone}, GradRule{Kind::kAlloc}, GradRule{Kind::kNone}};
  c.backward.temp_bytes = {4};  // the zero scalar of where(cond, grad, 0)
  c.flops = numel_d(m_tape.shape(a));
  const VarId y = m_tape.op1(c);
  m_tape.drop(scalar);
  return y;
}

std::pair<VarId, VarId> TorchOps::dropout(const std::string& name, VarId a, double p) {
  OpCall c;
  c.name = name;
  c.kind = "native_dropout";
  c.inputs = {a};
  c.outputs = {OutputSpec{"", m_tape.shape(a), m_tape.dtype(a)},
               OutputSpec{"mask", m_tape.shape(a), DType::kBool, false}};
  c.saved.outputs = {1};
  c.flops = numel_d(m_tape.shape(a)) * (p > 0.0 ? 2.0 : 1.0);
  const std::vector<VarId> out = m_tape.op(c);
  return {out[0], out[1]};
}

VarId TorchOps::fused_attention(const std::string& name, const char* kind, VarId q, VarId k, VarId v,
                                VarId mask, std::int64_t lse_rows, std::vector<Bytes> backward_temps) {
  // SDPA is on autocast's lower-precision list: q, k, v and a floating-point mask are cast.
  const VarId qa = autocast_low(name, q);
  const VarId ka = autocast_low(name, k);
  const VarId va = autocast_low(name, v);
  const VarId ma = mask == kNoVar ? kNoVar : autocast_low(name, mask);
  const Shape& qs = m_tape.shape(q);  // b, h, s, d
  OpCall c;
  c.name = name;
  c.kind = kind;
  c.inputs = {qa, ka, va};
  c.outputs = {OutputSpec{"", qs, m_tape.dtype(qa)},
               OutputSpec{"logsumexp", {qs[0], qs[1], lse_rows}, DType::kFloat32, false}};
  c.saved = SavedSpec{{0, 1, 2}, {0, 1}};
  if (ma != kNoVar) {  // the attn_bias is saved for the backward kernel
    c.inputs.push_back(ma);
    c.saved.inputs.push_back(3);
    c.backward.grads = {GradRule{Kind::kAlloc}, GradRule{Kind::kAlloc}, GradRule{Kind::kAlloc},
                        GradRule{Kind::kNone}};
  }
  c.backward.temp_bytes = std::move(backward_temps);
  const std::int64_t kl = m_tape.shape(k)[2];
  c.flops = 4.0 * numel_d(qs) * static_cast<double>(kl) / (qs[2] == kl ? 2.0 : 1.0);  // causal when square
  const std::vector<VarId> out = m_tape.op(c);
  m_tape.drop(out[1]);  // the logsumexp is only referenced by the backward node
  m_tape.drop({qa, ka, va});
  if (ma != kNoVar) {
    m_tape.drop(ma);
  }
  return out[0];
}

VarId TorchOps::sdpa_flash(const std::string& name, VarId q, VarId k, VarId v) {
  const Shape& qs = m_tape.shape(q);  // b, h, s, d
  const std::int64_t seq_rounded = (qs[2] + 127) / 128 * 128;
  // FlashAttention-2 backward: an fp32 dq accumulator (b, s rounded to 128, h, d rounded to 32) and
  // softmax_d (b, h, s rounded to 128).
  const std::int64_t d_rounded = (qs[3] + 31) / 32 * 32;
  std::vector<Bytes> temps{static_cast<Bytes>(qs[0] * seq_rounded * qs[1] * d_rounded) * 4,
                           static_cast<Bytes>(qs[0] * qs[1] * seq_rounded) * 4};
  if (m_tape.shape(k)[1] != qs[1]) {  // grouped-query: dk, dv computed per query head, then summed
    const DType low = m_autocast && is_floating(m_tape.dtype(k)) ? *m_autocast : m_tape.dtype(k);
    temps.push_back(tensor_bytes(qs, low));
    temps.push_back(tensor_bytes(qs, low));
  }
  if (m_context_parallel != nullptr && m_context_parallel->degree > 1) {
    return ring_attention(*this, name, "_scaled_dot_product_flash_attention", q, k, v, qs[2], temps,
                          *m_context_parallel);
  }
  return fused_attention(name, "_scaled_dot_product_flash_attention", q, k, v, kNoVar, qs[2],
                         std::move(temps));
}

VarId TorchOps::sdpa_efficient(const std::string& name, VarId q, VarId k, VarId v, VarId mask) {
  const Shape& qs = m_tape.shape(q);  // b, h, s, d
  // _efficient_attention_backward: delta = (grad_out * out).sum(-1) in fp32 (b, h, s) and, for 16-bit
  // inputs, an fp32 dq accumulator of q's shape.
  std::vector<Bytes> temps{static_cast<Bytes>(qs[0] * qs[1] * qs[2]) * 4};
  const bool half = (m_autocast && is_floating(m_tape.dtype(q))) || m_tape.dtype(q) != DType::kFloat32;
  if (half) {
    temps.push_back(tensor_bytes(qs, DType::kFloat32));
  }
  if (m_context_parallel != nullptr && m_context_parallel->degree > 1) {
    if (mask != kNoVar) {  // _scaled_dot_product_ring_efficient_attention
      throw InputError("--cp: ring attention refuses an attention mask (\"attn_bias is not supported yet\")");
    }
    return ring_attention(*this, name, "_scaled_dot_product_efficient_attention", q, k, v,
                          (qs[2] + 31) / 32 * 32, temps, *m_context_parallel);
  }
  return fused_attention(name, "_scaled_dot_product_efficient_attention", q, k, v, mask,
                         (qs[2] + 31) / 32 * 32, std::move(temps));
}

VarId TorchOps::sdpa_math(const std::string& name, VarId q, VarId k, VarId v, double dropout_p) {
  // SDPA is on autocast's lower-precision list: the whole composite runs on the cast operands.
  const VarId qa = autocast_low(name, q);
  const VarId ka = autocast_low(name, k);
  const VarId va = autocast_low(name, v);
  const std::optional<DType> outer = m_autocast;
  m_autocast = std::nullopt;
  const Shape& qs = m_tape.shape(q);  // b, h, s, d
  const std::int64_t s = qs[2];
  const std::int64_t kl = m_tape.shape(k)[2];  // s, or a KV cache's length (one query: is_causal=False)
  const bool causal = s > 1;
  VarId mask = kNoVar;
  if (causal) {
    // attn_mask = ones({L, S}, kBool).tril(); convert_boolean_attn_mask: where(logical_not(mask), -inf, 0)
    const VarId ones = m_tape.constant(name + ".mask_ones", "ones", {s, kl}, DType::kBool);
    const VarId tril = m_tape.constant(name + ".mask_tril", "tril", {s, kl}, DType::kBool);
    m_tape.drop(ones);
    const VarId negated = m_tape.constant(name + ".mask_not", "logical_not", {s, kl}, DType::kBool);
    mask = m_tape.constant(name + ".mask", "where", {s, kl}, m_tape.dtype(qa));
    m_tape.drop({negated, tril});
  }
  const VarId qscaled = scale(name + ".q_scaled", qa);  // query * sqrt(scale)
  const VarId kscaled = scale(name + ".k_scaled", ka);  // key.transpose(-2, -1) * sqrt(scale)
  const VarId kt = m_tape.view(kscaled, {qs[0], qs[1], qs[3], kl}, name + ".k_t");
  const VarId scores = matmul(name + ".scores", qscaled, kt, {qs[0], qs[1], s, kl});
  m_tape.drop({kt, kscaled, qscaled});
  VarId masked = scores;
  if (causal) {
    BackwardRule through;
    through.grads = {GradRule{GradRule::Kind::kPassThrough}, GradRule{GradRule::Kind::kNone}};
    masked = m_tape.inplace(name + ".add_mask", "add_", scores, {mask}, through);  // attn.add_(mask)
    m_tape.drop({scores, mask});
  }
  VarId probs = softmax_last(name + ".softmax", masked);
  m_tape.drop(masked);
  if (dropout_p > 0.0) {
    const auto [dropped, keep] = dropout(name + ".dropout", probs, dropout_p);
    m_tape.drop({keep, probs});
    probs = dropped;
  }
  const VarId out = matmul(name + ".attn_v", probs, va, qs);
  m_tape.drop({probs, qa, ka, va});
  m_autocast = outer;
  return out;
}

// ---- indexing is in torch_ops_index.cpp

// ---- embedding, loss
// ---------------------------------------------------------------------------------------

VarId TorchOps::embedding(const std::string& name, VarId weight, VarId ids) {
  OpCall c;
  c.name = name;
  c.kind = "embedding";
  c.inputs = {weight, ids};
  Shape out = m_tape.shape(ids);
  out.push_back(m_tape.shape(weight).back());
  c.outputs = {OutputSpec{"", out, m_tape.dtype(weight)}};
  c.saved.inputs = {1};
  // embedding_dense_backward: on CUDA, the indices are sorted before grad_weight is allocated
  c.backward.grads = {GradRule{Kind::kAlloc}, GradRule{Kind::kNone}};
  EmbeddingBackwardScratch scratch =
      embedding_dense_backward_scratch(numel(m_tape.shape(ids)), m_tape.shape(weight).back(),
                                       m_tape.dtype(weight), m_tape.cuda_device().compute_capability);
  c.backward.scratch_before_grads = scratch.before_grad.steps();
  c.backward.scratch_after_grads = scratch.after_grad.steps();
  return m_tape.op1(c);
}

VarId TorchOps::gather_last(const std::string& name, VarId a, VarId index) {
  OpCall c;
  c.name = name;
  c.kind = "gather";
  c.inputs = {a, index};
  c.outputs = {OutputSpec{"", with_last(m_tape.shape(a), 1), m_tape.dtype(a)}};
  c.saved.inputs = {1};
  c.backward.grads = {GradRule{Kind::kAlloc}, GradRule{Kind::kNone}};  // zeros(self).scatter_add_
  return m_tape.op1(c);
}

VarId TorchOps::nll_loss(const std::string& name, VarId log_probs, VarId target) {
  const VarId x = autocast_fp32(name, log_probs);
  OpCall c;
  c.name = name;
  c.kind = "nll_loss_forward";
  c.inputs = {x, target};
  c.outputs = {OutputSpec{"", {}, m_tape.dtype(x)}, OutputSpec{"total_weight", {}, m_tape.dtype(x), false}};
  c.saved = SavedSpec{{1}, {1}};
  c.backward.grads = {GradRule{Kind::kAlloc}, GradRule{Kind::kNone}};
  const std::vector<VarId> out = m_tape.op(c);
  m_tape.drop(out[1]);  // total_weight: only the backward node keeps it
  m_tape.drop(x);
  return out[0];
}

VarId TorchOps::layer_norm(const std::string& name, VarId x, VarId weight, VarId bias, bool save_statistics) {
  const VarId xa = autocast_fp32(name, x);
  const Shape rows = with_last(m_tape.shape(x), 1);
  OpCall c;
  c.name = name;
  c.kind = "native_layer_norm";
  c.inputs = {xa, weight, bias};
  c.outputs = {OutputSpec{"", m_tape.shape(x), m_tape.dtype(xa)}};
  c.saved = SavedSpec{{0, 1, 2}, {}};
  if (save_statistics) {
    c.outputs.push_back(OutputSpec{"mean", rows, DType::kFloat32, false});
    c.outputs.push_back(OutputSpec{"rstd", rows, DType::kFloat32, false});
    c.saved.outputs = {1, 2};
  }
  c.flops = 8.0 * numel_d(m_tape.shape(x));
  const std::vector<VarId> out = m_tape.op(c);
  for (std::size_t i = 1; i < out.size(); ++i) {
    m_tape.drop(out[i]);
  }
  m_tape.drop(xa);
  return out[0];
}

}  // namespace vramsim
