// The CS336 staff model, op by op: cs336-basics/cs336_basics/model.py (BasicsTransformerLM), the reference
// implementation of Stanford CS336's assignment 1 (MAGMA27's run in shared/traces/real). Each function
// follows its Python line by line; comments quote the line. What a layer allocates in fp32 (b = batch,
// s = seq, d = d_model, h = heads, f = d_ff; the order matches the recorded trace event by event, see
// tests/graph/test_cs336_recordings.cpp):
//   RMSNorm pow(bsd, freed), mean/+eps (bs, freed), rsqrt(bs), x*rms(bsd), w*x(bsd); q,k,v (bsd); RoPE per q
//   and k: 4 products + 2 sums of bsd/2 (products freed), stack (bsd), q/k projections freed; arange(s)
//   int64, causal mask (s*s bool); scores bmm (bhss, freed), /sqrt (bhss, freed), 0-dim -inf + where (bhss,
//   kept until sdpa returns), max values (bhs, freed) + int64 indices (2 bhs), x - max (bhss, freed at
//   return), exp (bhss), sum (bhs), div (bhss); V copy (bsd), bmm (bsd, freed after the head merge copy
//   (bsd)); output_proj (bsd); v projection and arange freed at return; residual (bsd); RMSNorm; w1 (bsf),
//   sigmoid (bsf), mul (bsf), w3 (bsf), mul (bsf), w2 (bsd); residual (bsd); attention and MLP outputs freed
//   at return.
#include <fmt/format.h>

#include "sim/models/layer_code.h"

namespace vramsim {
namespace {

using Kind = GradRule::Kind;

struct Dims {
  std::int64_t b, s, d, h, hd, f;
};

Dims dims(const EmitContext& c) {
  return Dims{c.options.batch, c.options.seq,    c.model.d_model,
              c.model.n_heads, c.model.head_dim, c.model.d_ff};
}

// ---- RMSNorm ----------------------------------------------------------------------------------------------

VarId rmsnorm(EmitContext& c, const std::string& n, VarId x, VarId w) {
  TorchOps& ops = c.ops;
  EagerTape& t = ops.tape();
  const DType in_dtype = t.dtype(x);
  const VarId x32 = ops.to(n + ".to_fp32", x, DType::kFloat32);  // x = x.to(torch.float32)
  const VarId sq = ops.pow2(n + ".pow", x32);                    // x.pow(2)
  const VarId ms = ops.mean_last(n + ".mean", sq);               // .mean(-1, keepdim=True)
  t.drop(sq);
  const VarId me = ops.add_scalar(n + ".add_eps", ms);  // + self.eps
  t.drop(ms);
  const VarId rms = ops.rsqrt(n + ".rsqrt", me);  // rms = torch.rsqrt(...)
  t.drop(me);
  const VarId xn = ops.mul(n + ".mul_rms", x32, rms);  // x = x * rms
  t.drop(x32);
  const VarId y = ops.mul(n + ".mul_weight", w, xn);          // self.weight * x
  const VarId out = ops.to(n + ".to_in_dtype", y, in_dtype);  // .to(in_dtype)
  t.drop({y, xn, rms});
  return out;
}

// ---- RoPE -------------------------------------------------------------------------------------------------

// Staff RotaryEmbedding.forward(x, pos_ids): x1, x2 are strided views; cos/sin index the cache without an
// allocation in the recordings; the rotated halves are stacked and made contiguous.
VarId rope(EmitContext& c, const std::string& n, VarId x) {
  TorchOps& ops = c.ops;
  EagerTape& t = ops.tape();
  const Dims d = dims(c);
  const Shape half{d.b, d.h, d.s, d.hd / 2};
  const Shape table{1, 1, d.s, d.hd / 2};
  // x1, x2 = rearrange(x, "... (half_d xy) -> xy ... half_d", xy=2): a reshape to (..., half_d, 2), a permute
  // and unbind. In backward, unbind's stacks both halves into one full-size gradient, and the reshape of that
  // permuted gradient back to (..., d) copies it.
  const VarId pairs = t.view(x, t.shape(x), n + ".pairs", GradRule{Kind::kAlloc});
  const VarId x1 = t.view(pairs, half, n + ".x1", GradRule{Kind::kAlloc});
  const VarId x2 = t.view(pairs, half, n + ".x2", GradRule{Kind::kNone});
  t.drop(pairs);
  const VarId cos = t.view(c.buffers.rope_cache, table, n + ".cos");
  const VarId sin = t.view(c.buffers.rope_cache, table, n + ".sin");
  const VarId a = ops.mul(n + ".cos_x1", cos, x1);  // x1_rot = cos * x1 - sin * x2
  const VarId b = ops.mul(n + ".sin_x2", sin, x2);
  const VarId x1r = ops.sub(n + ".x1_rot", a, b);
  t.drop({a, b});
  const VarId e = ops.mul(n + ".sin_x1", sin, x1);  // x2_rot = sin * x1 + cos * x2
  const VarId f = ops.mul(n + ".cos_x2", cos, x2);
  const VarId x2r = ops.add(n + ".x2_rot", e, f);
  t.drop({e, f});
  const VarId out =
      ops.cat_last(n + ".stack", x1r, x2r);  // einx.rearrange(... (x_half (1 + 1))).contiguous()
  t.drop({x1r, x2r, x1, x2, cos, sin});
  return out;
}

// ---- attention --------------------------------------------------------------------------------------------

// scaled_dot_product_attention(Q, K, V, mask) as model.py writes it; q, k are the rotated tensors, v the
// view.
VarId sdpa(EmitContext& c, const std::string& n, VarId q, VarId k, VarId v, VarId mask) {
  TorchOps& ops = c.ops;
  EagerTape& t = ops.tape();
  const Dims d = dims(c);
  switch (c.attention) {  // F.scaled_dot_product_attention(is_causal=True), the backend PyTorch picks
    case AttentionKind::kSdpaFlash:
      return ops.sdpa_flash(n + ".sdpa", q, k, v);
    case AttentionKind::kSdpaEfficient:
      return ops.sdpa_efficient(n + ".sdpa", q, k, v);
    case AttentionKind::kSdpaMath:
      return ops.sdpa_math(n + ".sdpa", q, k, v, 0.0);
    default:
      break;
  }
  const Shape scores_shape{d.b, d.h, d.s, d.s};
  // einsum(Q, K, "... query d_k, ... key d_k -> ... query key"): Q and K are contiguous (stack output)
  const VarId kt = t.view(k, {d.b, d.h, d.hd, d.s}, n + ".k_t");
  const VarId raw = ops.matmul(n + ".scores", q, kt, scores_shape);
  t.drop(kt);
  const VarId scaled = ops.scale(n + ".scale", raw);  // / math.sqrt(d_k)
  t.drop(raw);
  const VarId scores =
      ops.where(n + ".where", mask, scaled);  // torch.where(mask, attention_scores, float("-inf"))
  t.drop(scaled);
  // softmax(x, dim=-1): max, subtract, exp, sum, divide
  const auto [mx, idx] = ops.max_last(n + ".softmax.max", scores);
  t.drop(idx);
  const VarId shifted = ops.sub(n + ".softmax.sub_max", scores, mx);
  t.drop(mx);
  const VarId e = ops.exp(n + ".softmax.exp", shifted);  // exponentiated_rescaled_input (kept until return)
  const VarId sum = ops.sum_last(n + ".softmax.sum", e);
  const VarId weights = ops.div(n + ".softmax.div", e, sum);
  t.drop({sum, e});
  t.drop(shifted);  // the local that lives until softmax returns
  // einsum(attention_weights, V): einsum is on autocast's lower-precision list, so it casts the (fp32)
  // weights first; then V, strided (a view of the projection), is copied for bmm
  const VarId wl = ops.autocast_operand(n + ".attn_v", weights);
  const VarId vc = ops.contiguous(n + ".v_contiguous", v);
  const VarId out = ops.matmul(n + ".attn_v", wl, vc, {d.b, d.h, d.s, d.hd});
  t.drop({vc, wl, weights, scores});
  return out;
}

VarId attention(EmitContext& c, int layer, VarId x) {
  TorchOps& ops = c.ops;
  EagerTape& t = ops.tape();
  const Dims d = dims(c);
  const LayerParams& p = c.params.layers[static_cast<std::size_t>(layer)];
  const std::string n = layer_name(layer, "attn");
  const Shape heads{d.b, d.h, d.s, d.hd};
  // Linear: einsum(x, self.weight, ...)
  const VarId qx = ops.linear(n + ".q_proj", x, p.q_w);
  const VarId kx = ops.linear(n + ".k_proj", x, p.k_w);
  const VarId vx = ops.linear(n + ".v_proj", x, p.v_w);
  // rearrange(X, "... seq (heads d) -> ... heads seq d"): views (a reshape and a permute). A gradient that
  // reaches them contiguous in (batch, heads, seq, d) - RoPE's for Q and K, eager attention's bmm for V - is
  // permuted back and the reshape to (..., seq, heads * d) copies it.
  const GradRule copied{Kind::kAlloc};
  const VarId q = t.view(qx, heads, n + ".q_heads", copied);
  const VarId k = t.view(kx, heads, n + ".k_heads", copied);
  const VarId v = t.view(vx, heads, n + ".v_heads",
                         c.attention == AttentionKind::kEager ? copied : GradRule{Kind::kPassThrough});
  VarId mask = kNoVar;
  VarId positions = kNoVar;
  t.drop({qx, kx, vx});  // Q, K, V now name the views
  const VarId qr = rope(c, n + ".rope_q", q);
  t.drop(q);  // Q = self.positional_encoder(Q, ...)
  const VarId kr = rope(c, n + ".rope_k", k);
  t.drop(k);
  // seq = torch.arange(sequence_length); causal_mask = qi >= kj
  positions = t.constant(n + ".arange", "arange", {d.s}, DType::kInt64);
  if (c.attention == AttentionKind::kEager) {
    mask = t.constant(n + ".causal_mask", "ge", {1, 1, d.s, d.s}, DType::kBool);
  }
  VarId core;
  if (c.options.checkpointing == Checkpointing::kSelective) {
    std::vector<VarId> inputs{qr, kr, v};
    if (mask != kNoVar) {
      inputs.push_back(mask);  // an input of the checkpointed function: alive for the replay in backward
    }
    core = t.checkpoint(n + ".core_attention", inputs, [&c, n](const std::vector<VarId>& in) {
      return sdpa(c, n, in[0], in[1], in[2], in.size() > 3 ? in[3] : kNoVar);
    });
  } else {
    core = sdpa(c, n, qr, kr, v, mask);
  }
  // rearrange(attn_output, "batch heads seq d_v -> batch seq (heads d_v)").contiguous(). In backward the
  // gradient comes back through the rearrange permuted, and the eager einsum's reshape to bmm's
  // (batch * heads, seq, d_v) copies it; the fused kernels take it strided.
  const GradRule core_grad{c.attention == AttentionKind::kEager ? Kind::kAlloc : Kind::kPassThrough};
  const VarId transposed = t.view(core, {d.b, d.s, d.h * d.hd}, n + ".transpose", core_grad);
  const VarId merged =
      ops.contiguous(n + ".merge_heads", transposed, attention_kernel_writes_bshd(c.attention));
  t.drop({transposed, core});
  const VarId out = ops.linear(n + ".output_proj", merged, p.o_w);
  t.drop(merged);
  t.drop({qr, kr, v});
  t.drop(positions);
  if (mask != kNoVar) {
    t.drop(mask);
  }
  return out;
}

// ---- MLP --------------------------------------------------------------------------------------------------

VarId swiglu(EmitContext& c, int layer, VarId x) {
  TorchOps& ops = c.ops;
  EagerTape& t = ops.tape();
  const LayerParams& p = c.params.layers[static_cast<std::size_t>(layer)];
  const std::string n = layer_name(layer, "ffn");
  // self.w2(silu(self.w1(x)) * self.w3(x)), silu(x) = x * torch.sigmoid(x)
  const VarId g = ops.linear(n + ".w1", x, p.gate_w);
  const VarId sg = ops.sigmoid(n + ".sigmoid", g);
  const VarId si = ops.mul(n + ".silu", g, sg);
  t.drop({sg, g});
  const VarId u = ops.linear(n + ".w3", x, p.up_w);
  const VarId prod = ops.mul(n + ".mul", si, u);
  t.drop({si, u});
  const VarId y = ops.linear(n + ".w2", prod, p.down_w);
  t.drop(prod);
  return y;
}

VarId cs336_layer(EmitContext& c, int layer, VarId x) {
  EagerTape& t = c.ops.tape();
  const LayerParams& p = c.params.layers[static_cast<std::size_t>(layer)];
  // x_attn = self.attn(self.ln1(x)); attn_sublayer_output = x + x_attn
  const VarId h1 = rmsnorm(c, layer_name(layer, "ln1"), x, p.norm1_w);
  const VarId xa = attention(c, layer, h1);
  t.drop(h1);
  const VarId r1 = c.ops.add(layer_name(layer, "residual_attn"), x, xa);
  // x_ffn = self.ffn(self.ln2(attn_sublayer_output)); ffn_sublayer_output = attn_sublayer_output + x_ffn
  const VarId h2 = rmsnorm(c, layer_name(layer, "ln2"), r1, p.norm2_w);
  const VarId xf = swiglu(c, layer, h2);
  t.drop(h2);
  const VarId r2 = c.ops.add(layer_name(layer, "residual_ffn"), r1, xf);
  t.drop({xa, xf, r1});
  return r2;
}

VarId cs336_final(EmitContext& c, VarId x) {
  const VarId h = rmsnorm(c, "ln_final", x, c.params.final_w);
  const VarId logits = c.ops.linear("lm_head", h, c.params.head);
  c.ops.tape().drop({h, x});  // the layers' output variable lives until the logits exist
  return logits;
}

VarId cs336_loss(EmitContext& c, VarId logits, VarId targets) {
  TorchOps& ops = c.ops;
  EagerTape& t = ops.tape();
  // cross_entropy: torch.mean(torch.gather(-log_softmax(inputs), -1, targets.unsqueeze(-1)))
  const auto [mx, idx] = ops.max_last("loss.log_softmax.max", logits);
  t.drop(idx);
  const VarId x = ops.sub("loss.log_softmax.sub_max", logits, mx);  // x = x - x_max (x_max lives on)
  const VarId e = ops.exp("loss.log_softmax.exp", x);
  const VarId s = ops.sum_last("loss.log_softmax.sum", e);
  t.drop(e);
  const VarId l = ops.log("loss.log_softmax.log", s);
  t.drop(s);
  const VarId lsm = ops.sub("loss.log_softmax", x, l);
  t.drop({l, x, mx});                          // log_softmax returns
  const VarId neg = ops.neg("loss.neg", lsm);  // negative_log_softmax_logits
  t.drop(lsm);
  const VarId g = ops.gather_last("loss.gather", neg, targets);
  const VarId loss = ops.mean_all("loss.mean", g);
  t.drop({g, neg});
  return loss;
}

void add(std::vector<ParameterShape>& out, std::string name, Shape shape, int layer = -1) {
  out.push_back(ParameterShape{std::move(name), std::move(shape), layer});
}

class Cs336Basics final : public LayerCode {
 public:
  std::string_view name() const override { return kCs336BasicsCode; }
  // BasicsTransformerLM: token_embeddings, per layer attn (q, k, v, output_proj), ffn (w1, w2, w3), ln1, ln2;
  // ln_final, lm_head (untied).
  void parameter_shapes(const ModelConfig& m, std::vector<ParameterShape>& out) const override {
    const std::int64_t d = m.d_model;
    add(out, "token_embeddings.weight", {m.vocab_size, d});
    for (int l = 0; l < m.n_layers; ++l) {
      const std::string p = fmt::format("layers.{}.", l);
      add(out, p + "attn.q_proj.weight", {m.q_dim(), d}, l);
      add(out, p + "attn.k_proj.weight", {m.kv_dim(), d}, l);
      add(out, p + "attn.v_proj.weight", {m.kv_dim(), d}, l);
      add(out, p + "attn.output_proj.weight", {d, m.q_dim()}, l);
      add(out, p + "ffn.w1.weight", {m.d_ff, d}, l);
      add(out, p + "ffn.w2.weight", {d, m.d_ff}, l);
      add(out, p + "ffn.w3.weight", {m.d_ff, d}, l);
      add(out, p + "ln1.weight", {d}, l);
      add(out, p + "ln2.weight", {d}, l);
    }
    add(out, "ln_final.weight", {d});
    add(out, "lm_head.weight", {m.vocab_size, d});
  }
  // RotaryEmbedding's _freq_cis_cache buffer, (2, context, head_dim / 2) fp32.
  ModelBuffers create_buffers(EagerTape& tape, const ModelConfig& m, const TrainingOptions&) const override {
    ModelBuffers b;
    b.rope_cache = tape.input("positional_encoder._freq_cis_cache (buffer)",
                              {2, m.max_positions, m.head_dim / 2}, DType::kFloat32);
    return b;
  }
  // token_embeddings(x): self.weight[token_ids] (index; its backward is zeros + index_put_)
  VarId embeddings(EmitContext& c, VarId ids) const override {
    return c.ops.index("token_embeddings", c.params.embed, ids);
  }
  VarId layer(EmitContext& c, int l, VarId x) const override { return cs336_layer(c, l, x); }
  VarId final_norm_and_head(EmitContext& c, VarId x) const override { return cs336_final(c, x); }
  VarId loss(EmitContext& c, VarId logits, VarId targets) const override {
    return cs336_loss(c, logits, targets);
  }
};

}  // namespace

const LayerCode& cs336_basics_code() {
  static const Cs336Basics code;
  return code;
}

}  // namespace vramsim
