// The two CS336 model codes behind the real recordings in shared/traces/real, op by op.
//
// kCs336Basics: the staff model (cs336-basics/cs336_basics/model.py, BasicsTransformerLM; MAGMA27's run).
// kCs336Kkaitlyn111: kkaitlyn111/cs336-assignment1 cs336_basics/transformer.py (TransformerLM), which
//   cs336-a2-systems' benchmark.py imports (`from cs336_basics.transformer import TransformerLM`; its
//   transformer_annotated.py is a copy that never runs: it is assigned after the import and misspells nvtx).
//
// Each function follows its Python line by line; comments quote the line. What a layer allocates in fp32
// (b = batch, s = seq, d = d_model, h = heads, f = d_ff; the order matches the recorded traces event by
// event, see tests/graph/test_cs336_recordings.cpp):
//   staff  : RMSNorm pow(bsd, freed), mean/+eps (bs, freed), rsqrt(bs), x*rms(bsd), w*x(bsd); q,k,v (bsd);
//            RoPE per q and k: 4 products + 2 sums of bsd/2 (products freed), stack (bsd), q/k projections
//            freed; arange(s) int64, causal mask (s*s bool); scores bmm (bhss, freed), /sqrt (bhss, freed),
//            0-dim -inf + where (bhss, kept until sdpa returns), max values (bhs, freed) + int64 indices
//            (2 bhs), x - max (bhss, freed at return), exp (bhss), sum (bhs), div (bhss); V copy (bsd),
//            bmm (bsd, freed after the head merge copy (bsd)); output_proj (bsd); v projection and arange
//            freed at return; residual (bsd); RMSNorm; w1 (bsf), sigmoid (bsf), mul (bsf), w3 (bsf),
//            mul (bsf), w2 (bsd); residual (bsd); attention and MLP outputs freed at return.
//   student: RMSNorm vector_norm (bs), **2, /d, +eps, sqrt (bs; the middle three freed), x/rms (bsd),
//            w*x (bsd; an einsum that runs as bmm: under autocast a bf16 weight copy, a bf16 x copy and a
//            bf16 product, then .to(float32)); q,k,v (bsd; autocast casts the weight before x); arange(s)
//            int64; RoPE per q and k: cos and sin gathered (b*s*hd/2 fp32 each), zeros_like (bsd), two slice
//            writes of 2 products + 1 sum (bsd/2 each, freed); ones(s,s) fp32, triu, bool, ~ (the float ones
//            and triu freed); Q and K copies for the einsum (bsd each), scores (bhss), /sqrt (bhss), mask ==
//            False (bhss bool), masked_fill (bhss), max values + indices, x - max (freed), exp, sum, div; V
//            copy, bmm, head merge copy (bmm freed), output_proj; q,k,v projections, both rotated tensors,
//            arange and mask freed at return.
#include "sim/graph/transformer_parts.h"

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

bool staff(const EmitContext& c) { return c.model.code == ModelCode::kCs336Basics; }

// ---- RMSNorm ----------------------------------------------------------------------------------------------

VarId staff_rmsnorm(EmitContext& c, const std::string& n, VarId x, VarId w) {
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

VarId student_rmsnorm(EmitContext& c, const std::string& n, VarId x, VarId w) {
  TorchOps& ops = c.ops;
  EagerTape& t = ops.tape();
  const DType in_dtype = t.dtype(x);
  const VarId x32 = ops.to(n + ".to_fp32", x, DType::kFloat32);      // x = x.to(torch.float32)
  const VarId norm = ops.vector_norm_last(n + ".vector_norm", x32);  // torch.linalg.vector_norm(x, -1, True)
  const VarId sq = ops.pow2(n + ".pow", norm);                       // norm ** 2
  const VarId dv = ops.scale(n + ".div_d_model", sq);                // / self.d_model
  t.drop(sq);
  const VarId me = ops.add_scalar(n + ".add_eps", dv);  // + self.eps
  t.drop(dv);
  const VarId rms = ops.sqrt(n + ".sqrt", me);  // rms = torch.sqrt(...)
  t.drop(me);
  const VarId xn = ops.div(n + ".div_rms", x32, rms);  // x_normed = x / rms
  // einsum(self.weight, x_normed, "d, b s d -> b s d"): einsum contracts it with bmm over d, so autocast
  // casts both operands and the product is low precision (in fp32 it allocates what a mul would)
  const VarId y = ops.matmul(n + ".mul_weight", w, xn, t.shape(xn), false);
  const VarId out = ops.to(n + ".to_in_dtype", y, in_dtype);  // result.to(in_dtype)
  t.drop({y, xn, rms, norm, x32});
  return out;
}

VarId rmsnorm(EmitContext& c, const std::string& n, VarId x, VarId w) {
  return staff(c) ? staff_rmsnorm(c, n, x, w) : student_rmsnorm(c, n, x, w);
}

// ---- RoPE -------------------------------------------------------------------------------------------------

// Staff RotaryEmbedding.forward(x, pos_ids): x1, x2 are strided views; cos/sin index the cache without an
// allocation in the recordings; the rotated halves are stacked and made contiguous.
VarId staff_rope(EmitContext& c, const std::string& n, VarId x) {
  TorchOps& ops = c.ops;
  EagerTape& t = ops.tape();
  const Dims d = dims(c);
  const Shape half{d.b, d.h, d.s, d.hd / 2};
  const Shape table{1, 1, d.s, d.hd / 2};
  // x1, x2 = rearrange(x, "... (half_d xy) -> xy ... half_d", xy=2): unbind's backward stacks both halves
  // into one full-size gradient.
  const VarId x1 = t.view(x, half, n + ".x1", GradRule{Kind::kAlloc});
  const VarId x2 = t.view(x, half, n + ".x2", GradRule{Kind::kNone});
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

// Student RoPE.forward(x, token_positions): gathers cos/sin per position, writes the two rotated halves into
// a zeros_like tensor through slice assignment.
VarId student_rope(EmitContext& c, const std::string& n, VarId x) {
  TorchOps& ops = c.ops;
  EagerTape& t = ops.tape();
  const Dims d = dims(c);
  const Shape half{d.b, d.h, d.s, d.hd / 2};
  const VarId pairs = t.view(x, {d.b, d.h, d.s, d.hd / 2, 2}, n + ".x_pairs");
  // cos_vals = self.cos_sin_matrix[token_positions, :, 0] -> (b, s, d_k/2), then unsqueeze(1)
  const VarId cos = t.constant(n + ".cos_vals", "index", {d.b, 1, d.s, d.hd / 2}, DType::kFloat32);
  const VarId sin = t.constant(n + ".sin_vals", "index", {d.b, 1, d.s, d.hd / 2}, DType::kFloat32);
  const VarId zeros = t.constant(n + ".rotated", "zeros_like", t.shape(pairs), t.dtype(x));
  // select_backward: each half's gradient becomes a full-size zeros tensor with the half copied in
  const VarId x0 = t.view(pairs, half, n + ".x_pairs_0", GradRule{Kind::kAlloc});
  const VarId x1 = t.view(pairs, half, n + ".x_pairs_1", GradRule{Kind::kAlloc});
  // CopySlices backward: the first write's clones the whole gradient (scratch) and the slice; the second's
  // hands the clone (with its slice zeroed) to the older version and clones its slice.
  const Bytes full = tensor_bytes(t.shape(pairs), t.dtype(x));
  BackwardRule first{{GradRule{Kind::kNone}, GradRule{Kind::kAlloc}}, {full}};
  BackwardRule second{{GradRule{Kind::kAlloc}, GradRule{Kind::kAlloc}}, {}};
  // rotated[..., 0] = cos_vals * x_pairs[..., 0] - sin_vals * x_pairs[..., 1]
  VarId a = ops.mul(n + ".cos_x0", cos, x0);
  VarId b = ops.mul(n + ".sin_x1", sin, x1);
  VarId r = ops.sub(n + ".rot0", a, b);
  const VarId v1 = t.inplace(n + ".rotated[...,0]", "copy_", zeros, {r}, first);
  t.drop({a, b, r, zeros});
  // rotated[..., 1] = sin_vals * x_pairs[..., 0] + cos_vals * x_pairs[..., 1]
  a = ops.mul(n + ".sin_x0", sin, x0);
  b = ops.mul(n + ".cos_x1", cos, x1);
  r = ops.add(n + ".rot1", a, b);
  const VarId v2 = t.inplace(n + ".rotated[...,1]", "copy_", v1, {r}, second);
  t.drop({a, b, r, v1});
  const VarId out = t.view(v2, t.shape(x), n + ".result");  // rotated.reshape(x.shape)
  t.drop({v2, x0, x1, pairs, cos, sin});
  return out;
}

// ---- attention --------------------------------------------------------------------------------------------

// scaled_dot_product_attention(Q, K, V, mask) of each code; q, k are the rotated tensors, v the view.
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
  VarId scores;
  if (staff(c)) {
    // einsum(Q, K, "... query d_k, ... key d_k -> ... query key"): Q and K are contiguous (stack output)
    const VarId kt = t.view(k, {d.b, d.h, d.hd, d.s}, n + ".k_t");
    const VarId raw = ops.matmul(n + ".scores", q, kt, scores_shape);
    t.drop(kt);
    const VarId scaled = ops.scale(n + ".scale", raw);  // / math.sqrt(d_k)
    t.drop(raw);
    scores = ops.where(n + ".where", mask, scaled);  // torch.where(mask, attention_scores, float("-inf"))
    t.drop(scaled);
  } else {
    // torch.einsum("...qd,...kd->...qk", Q, K): both rotated tensors are strided like the projections,
    // so bmm reads contiguous copies of each.
    const VarId qc = ops.contiguous(n + ".q_contiguous", q);
    const VarId kc = ops.contiguous(n + ".k_contiguous", k);
    const VarId kt = t.view(kc, {d.b, d.h, d.hd, d.s}, n + ".k_t");
    const VarId raw = ops.matmul(n + ".scores", qc, kt, scores_shape);
    t.drop({qc, kc, kt});
    const VarId scaled = ops.scale(n + ".scale", raw);  // / np.sqrt(d_k)
    t.drop(raw);
    // masked_fill(mask == False, -1e9): the comparison of the expanded mask is a full-size bool tensor
    const VarId eq = t.constant(n + ".mask_eq_false", "eq", scores_shape, DType::kBool);
    scores = ops.masked_fill(n + ".masked_fill", scaled, eq);
    t.drop({scaled, eq});
  }
  // softmax(x, dim=-1): max, subtract, exp, sum, divide (both codes)
  const auto [mx, idx] = ops.max_last(n + ".softmax.max", scores);
  t.drop(idx);
  const VarId shifted = ops.sub(n + ".softmax.sub_max", scores, mx);
  VarId e;
  if (staff(c)) {
    t.drop(mx);
    e = ops.exp(n + ".softmax.exp", shifted);  // exponentiated_rescaled_input (kept until return)
  } else {
    e = ops.exp(n + ".softmax.exp", shifted);  // exp_tensor = torch.exp(tensor - max_vals)
    t.drop(shifted);
  }
  const VarId sum = ops.sum_last(n + ".softmax.sum", e);
  const VarId weights = ops.div(n + ".softmax.div", e, sum);
  t.drop({sum, e});
  t.drop(staff(c) ? shifted : mx);  // the local that lives until softmax returns
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
  // staff Linear: einsum(x, self.weight, ...); student Linear: einsum(self.weight, x, ...)
  const bool wf = !staff(c);
  const VarId qx = ops.linear(n + ".q_proj", x, p.q_w, kNoVar, wf);
  const VarId kx = ops.linear(n + ".k_proj", x, p.k_w, kNoVar, wf);
  const VarId vx = ops.linear(n + ".v_proj", x, p.v_w, kNoVar, wf);
  // rearrange(X, "... seq (heads d) -> ... heads seq d"): views
  const VarId q = t.view(qx, heads, n + ".q_heads");
  const VarId k = t.view(kx, heads, n + ".k_heads");
  const VarId v = t.view(vx, heads, n + ".v_heads");
  VarId mask = kNoVar;
  VarId positions = kNoVar;
  VarId qr;
  VarId kr;
  if (staff(c)) {
    t.drop({qx, kx, vx});  // Q, K, V now name the views
    qr = staff_rope(c, n + ".rope_q", q);
    t.drop(q);  // Q = self.positional_encoder(Q, ...)
    kr = staff_rope(c, n + ".rope_k", k);
    t.drop(k);
    // seq = torch.arange(sequence_length); causal_mask = qi >= kj
    positions = t.constant(n + ".arange", "arange", {d.s}, DType::kInt64);
    if (c.attention == AttentionKind::kEager) {
      mask = t.constant(n + ".causal_mask", "ge", {1, 1, d.s, d.s}, DType::kBool);
    }
  } else {
    // positions = torch.arange(seq_len).unsqueeze(0).expand(batch_size, -1)
    positions = t.constant(n + ".positions", "arange", {d.s}, DType::kInt64);
    qr = student_rope(c, n + ".rope_q", q);
    kr = student_rope(c, n + ".rope_k", k);
    if (c.attention == AttentionKind::kEager) {
      // torch.triu(torch.ones(seq_len, seq_len), diagonal=1).to(torch.bool); mask = ~mask
      const VarId ones = t.constant(n + ".mask_ones", "ones", {d.s, d.s}, DType::kFloat32);
      const VarId tri = t.constant(n + ".mask_triu", "triu", {d.s, d.s}, DType::kFloat32);
      t.drop(ones);
      const VarId mb = t.constant(n + ".mask_bool", "_to_copy", {d.s, d.s}, DType::kBool);
      t.drop(tri);
      mask = t.constant(n + ".mask", "bitwise_not", {d.s, d.s}, DType::kBool);
      t.drop(mb);
    }
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
  // rearrange(attn_output, "batch heads seq d_v -> batch seq (heads d_v)").contiguous()
  const VarId transposed = t.view(core, {d.b, d.s, d.h * d.hd}, n + ".transpose");
  const VarId merged = ops.contiguous(n + ".merge_heads", transposed);
  t.drop({transposed, core});
  const VarId out = ops.linear(n + ".output_proj", merged, p.o_w, kNoVar, wf);
  t.drop(merged);
  t.drop({qr, kr, v});
  if (!staff(c)) {
    t.drop({q, k, qx, kx, vx});
  }
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
  if (staff(c)) {
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
  // t1 = self.w1(x); t3 = self.w3(x); t2 = torch.sigmoid(t1) * t1; t4 = t2 * t3; return self.w2(t4)
  const VarId t1 = ops.linear(n + ".w1", x, p.gate_w, kNoVar, true);
  const VarId t3 = ops.linear(n + ".w3", x, p.up_w, kNoVar, true);
  const VarId sg = ops.sigmoid(n + ".sigmoid", t1);
  const VarId t2 = ops.mul(n + ".silu", sg, t1);
  t.drop(sg);
  const VarId t4 = ops.mul(n + ".mul", t2, t3);
  const VarId y = ops.linear(n + ".w2", t4, p.down_w, kNoVar, true);
  t.drop({t1, t3, t2, t4});
  return y;
}

}  // namespace

VarId cs336_embeddings(EmitContext& c, VarId ids) {
  // token_embeddings(x): self.weight[token_ids] (index; its backward is zeros + index_put_)
  return c.ops.embedding("token_embeddings", c.params.embed, ids);
}

VarId cs336_layer(EmitContext& c, int layer, VarId x) {
  EagerTape& t = c.ops.tape();
  const LayerParams& p = c.params.layers[static_cast<std::size_t>(layer)];
  if (staff(c)) {
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
  // h = self.ln1(x); h = self.attn(h); x = x + h; h = self.ln2(x); h = self.ffn(h); x = x + h
  const VarId h1 = rmsnorm(c, layer_name(layer, "ln1"), x, p.norm1_w);
  const VarId h2 = attention(c, layer, h1);
  t.drop(h1);
  const VarId x1 = c.ops.add(layer_name(layer, "residual_attn"), x, h2);
  const VarId h3 = rmsnorm(c, layer_name(layer, "ln2"), x1, p.norm2_w);
  t.drop(h2);
  const VarId h4 = swiglu(c, layer, h3);
  t.drop(h3);
  const VarId x2 = c.ops.add(layer_name(layer, "residual_ffn"), x1, h4);
  t.drop({h4, x1});
  return x2;
}

VarId cs336_final(EmitContext& c, VarId x) {
  const VarId h = rmsnorm(c, "ln_final", x, c.params.final_w);
  const VarId logits = c.ops.linear("lm_head", h, c.params.head, kNoVar, !staff(c));
  c.ops.tape().drop({h, x});  // the layers' output variable lives until the logits exist
  return logits;
}

VarId cs336_loss(EmitContext& c, VarId logits, VarId targets) {
  TorchOps& ops = c.ops;
  EagerTape& t = ops.tape();
  if (staff(c)) {
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
  // cross_entropy_loss(predicted, target)
  const VarId maxes = ops.amax_last("loss.amax", logits);        // torch.amax(predicted, -1, keepdim)
  const VarId shifted = ops.sub("loss.sub_max", logits, maxes);  // predicted = predicted - maxes
  const VarId e = ops.exp("loss.exp", shifted);                  // torch.exp(predicted)
  const VarId sumexps = ops.sum_last("loss.sum", e);             // .sum(dim=-1)
  t.drop(e);
  const VarId gathered = ops.gather_last("loss.gather", shifted, targets);  // predicted.gather(...)
  const VarId lg = ops.log("loss.log", sumexps);                            // torch.log(sumexps) - gathered
  const VarId losses = ops.sub("loss.sub", lg, gathered);
  t.drop({lg});
  const VarId loss = ops.mean_all("loss.mean", losses);  // losses.mean()
  t.drop({losses, gathered, sumexps, shifted, maxes});
  return loss;
}

}  // namespace vramsim
