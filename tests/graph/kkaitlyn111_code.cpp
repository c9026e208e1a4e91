// Test fixture: the student model that the kkaitlyn111 recordings in shared/traces/real ran, op by op --
// cs336_basics/transformer.py (TransformerLM) of kkaitlyn111/cs336-assignment1, which cs336-a2-systems'
// benchmark.py imports (`from cs336_basics.transformer import TransformerLM`; its transformer_annotated.py is
// a copy that never runs: it is assigned after the import and misspells nvtx). It mirrors one person's
// script, so it lives with the tests that compare against those recordings, registered as the layer code
// "cs336-kkaitlyn111" (sim/models/layer_code.h) of the test programs.
//
// What a layer allocates in fp32 (b = batch, s = seq, d = d_model, h = heads, f = d_ff; the order matches the
// recorded traces event by event, see test_cs336_recordings.cpp): RMSNorm vector_norm (bs), **2, /d, +eps,
// sqrt (bs; the middle three freed), x/rms (bsd), w*x (bsd; an einsum that runs as bmm: under autocast a bf16
// weight copy, a bf16 x copy and a bf16 product, then .to(float32)); q,k,v (bsd; autocast casts the weight
// before x); arange(s) int64; RoPE per q and k: cos and sin gathered (b*s*hd/2 fp32 each), zeros_like (bsd),
// two slice writes of 2 products + 1 sum (bsd/2 each, freed); ones(s,s) fp32, triu, bool, ~ (the float ones
// and triu freed); Q and K copies for the einsum (bsd each), scores (bhss), /sqrt (bhss), mask == False (bhss
// bool), masked_fill (bhss), max values + indices, x - max (freed), exp, sum, div; V copy, bmm, head merge
// copy (bmm freed), output_proj; q,k,v projections, both rotated tensors, arange and mask freed at return.
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

VarId rmsnorm(EmitContext& c, const std::string& n, VarId x, VarId w) {
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
  // einsum(self.weight, x_normed, "d, b s d -> b s d"): einsum is on autocast's lower-precision list, so
  // both operands are cast; with no dimension summed, ATen's sumproduct_pair multiplies them (at::mul), a
  // pointwise op to torch.compile
  const VarId wl = ops.autocast_operand(n + ".mul_weight", w);
  const VarId xl = ops.autocast_operand(n + ".mul_weight", xn);
  const VarId y = ops.mul(n + ".mul_weight", wl, xl);
  t.drop({wl, xl});
  const VarId out = ops.to(n + ".to_in_dtype", y, in_dtype);  // result.to(in_dtype)
  t.drop({y, xn, rms, norm, x32});
  return out;
}

// Student RoPE.forward(x, token_positions): gathers cos/sin per position, writes the two rotated halves into
// a zeros_like tensor through slice assignment; each x_pairs[..., i] in the two expressions is its own
// select (four select nodes: the recorded backward makes four full-size select gradients per call).
VarId rope(EmitContext& c, const std::string& n, VarId x) {
  TorchOps& ops = c.ops;
  EagerTape& t = ops.tape();
  const Dims d = dims(c);
  const Shape half{d.b, d.h, d.s, d.hd / 2};
  const VarId pairs = t.view(x, {d.b, d.h, d.s, d.hd / 2, 2}, n + ".x_pairs");
  // cos_vals = self.cos_sin_matrix[token_positions, :, 0] -> (b, s, d_k/2), then unsqueeze(1)
  const VarId cos = t.constant(n + ".cos_vals", "index", {d.b, 1, d.s, d.hd / 2}, DType::kFloat32);
  const VarId sin = t.constant(n + ".sin_vals", "index", {d.b, 1, d.s, d.hd / 2}, DType::kFloat32);
  const VarId zeros = t.constant(n + ".rotated", "zeros_like", t.shape(pairs), t.dtype(x));
  // select_backward: a full-size zeros tensor with the half copied in
  const auto select = [&](int i, const std::string& what) {
    return t.view(pairs, half, fmt::format("{}.x_pairs_{}{}", n, i, what), GradRule{Kind::kAlloc});
  };
  // CopySlices backward (torch/csrc/autograd/functions/tensor.cpp): the whole gradient copied into a new
  // tensor (new_empty_strided), the slice's gradient cloned for copy_'s backward, whose gradient for the
  // overwritten values is a zeros_like of the slice (only where the base needs one).
  const Bytes full = tensor_bytes(t.shape(pairs), t.dtype(x));
  BackwardRule first;  // into zeros_like: the base needs no gradient, the copy of the whole is scratch
  first.grads = {GradRule{Kind::kNone}, GradRule{Kind::kAlloc}};
  first.temp_bytes = {full};
  BackwardRule second;  // into the first write's result
  second.grads = {GradRule{Kind::kAlloc}, GradRule{Kind::kAlloc}};
  ScratchScript zeros_like_slice;
  zeros_like_slice.alloc(tensor_bytes(half, t.dtype(x)));
  second.scratch_after_grads = zeros_like_slice.steps();
  // rotated[..., 0] = cos_vals * x_pairs[..., 0] - sin_vals * x_pairs[..., 1]
  VarId x0 = select(0, "a");
  VarId a = ops.mul(n + ".cos_x0", cos, x0);
  VarId x1 = select(1, "a");
  VarId b = ops.mul(n + ".sin_x1", sin, x1);
  VarId r = ops.sub(n + ".rot0", a, b);
  const VarId v1 = t.inplace(n + ".rotated[...,0]", "copy_", zeros, {r}, first);
  t.drop({a, b, r, zeros, x0, x1});
  // rotated[..., 1] = sin_vals * x_pairs[..., 0] + cos_vals * x_pairs[..., 1]
  x0 = select(0, "b");
  a = ops.mul(n + ".sin_x0", sin, x0);
  x1 = select(1, "b");
  b = ops.mul(n + ".cos_x1", cos, x1);
  r = ops.add(n + ".rot1", a, b);
  const VarId v2 = t.inplace(n + ".rotated[...,1]", "copy_", v1, {r}, second);
  t.drop({a, b, r, v1, x0, x1});
  const VarId out = t.view(v2, t.shape(x), n + ".result");  // rotated.reshape(x.shape)
  t.drop({v2, pairs, cos, sin});
  return out;
}

// ---- attention --------------------------------------------------------------------------------------------

// scaled_dot_product_attention(Q, K, V, mask) as transformer.py writes it; q, k are the rotated tensors, v
// the view.
VarId sdpa(EmitContext& c, const std::string& n, VarId q, VarId k, VarId v,
           VarId /*mask: its == False copy is what costs*/) {
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
  const VarId scores = ops.masked_fill(n + ".masked_fill", scaled, eq);
  t.drop({scaled, eq});
  // softmax(x, dim=-1): max, subtract, exp, sum, divide
  const auto [mx, idx] = ops.max_last(n + ".softmax.max", scores);
  t.drop(idx);
  const VarId shifted = ops.sub(n + ".softmax.sub_max", scores, mx);
  const VarId e = ops.exp(n + ".softmax.exp", shifted);  // exp_tensor = torch.exp(tensor - max_vals)
  t.drop(shifted);
  const VarId sum = ops.sum_last(n + ".softmax.sum", e);
  const VarId weights = ops.div(n + ".softmax.div", e, sum);
  t.drop({sum, e});
  t.drop(mx);  // the local that lives until softmax returns
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
  // Linear: einsum(self.weight, x, ...): autocast casts the weight first
  const VarId qx = ops.linear(n + ".q_proj", x, p.q_w, kNoVar, true);
  const VarId kx = ops.linear(n + ".k_proj", x, p.k_w, kNoVar, true);
  const VarId vx = ops.linear(n + ".v_proj", x, p.v_w, kNoVar, true);
  // rearrange(X, "... seq (heads d) -> ... heads seq d"): views
  // (backward: the gradient comes back permuted and is reshaped to (b, s, d): a copy)
  const VarId q = t.view(qx, heads, n + ".q_heads", GradRule{Kind::kAlloc});
  const VarId k = t.view(kx, heads, n + ".k_heads", GradRule{Kind::kAlloc});
  const VarId v = t.view(vx, heads, n + ".v_heads", GradRule{Kind::kAlloc});
  VarId mask = kNoVar;
  VarId positions = kNoVar;
  // positions = torch.arange(seq_len).unsqueeze(0).expand(batch_size, -1)
  positions = t.constant(n + ".positions", "arange", {d.s}, DType::kInt64);
  const VarId qr = rope(c, n + ".rope_q", q);
  const VarId kr = rope(c, n + ".rope_k", k);
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
  // Its gradient arrives transposed (b, h, s, d_v viewed from b, s, h, d_v), and the einsum's bmm backward
  // reshapes it to (b*h, s, d_v), which cannot view it: a contiguous copy, made before either bmm gradient.
  const VarId transposed = t.view(core, {d.b, d.s, d.h * d.hd}, n + ".transpose", GradRule{Kind::kAlloc});
  const VarId merged = ops.contiguous(n + ".merge_heads", transposed);
  t.drop({transposed, core});
  const VarId out = ops.linear(n + ".output_proj", merged, p.o_w, kNoVar, true);
  t.drop(merged);
  t.drop({qr, kr, v});
  t.drop({q, k, qx, kx, vx});
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

VarId cs336_layer(EmitContext& c, int layer, VarId x) {
  EagerTape& t = c.ops.tape();
  const LayerParams& p = c.params.layers[static_cast<std::size_t>(layer)];
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
  const VarId logits = c.ops.linear("lm_head", h, c.params.head, kNoVar, true);
  c.ops.tape().drop({h, x});  // the layers' output variable lives until the logits exist
  return logits;
}

// cross_entropy_loss(predicted, target) as the recorded full steps ran it (cs336_basics/training.py lines
// 21-33 in the frames; not the public version of the file, which uses amax and gather): the request sizes
// and kernels of the recording say which ops ran -- max with indices, x - max, exp, sum, indexing with a
// host arange (its device copy, a _to_copy), log, subtraction, mean. The logits come from einsum(weight,
// x), so the reductions over the vocabulary are over the outermost dimension (staging buffers).
VarId cs336_loss(EmitContext& c, VarId logits, VarId targets) {
  TorchOps& ops = c.ops;
  EagerTape& t = ops.tape();
  const auto [maxes, indices] = ops.max_last("loss.max", logits);  // torch.max(predicted, -1, keepdim)
  t.drop(indices);
  const VarId shifted = ops.sub("loss.sub_max", logits, maxes);  // predicted = predicted - max_vals
  const VarId e = ops.exp("loss.exp", shifted);                  // torch.exp(predicted)
  const VarId sumexps = ops.sum_last("loss.sum", e);             // .sum(dim=-1)
  t.drop(e);
  // predicted.view(-1, vocab)[torch.arange(batch * seq), target.view(-1)]
  const Shape& ls = t.shape(logits);
  const std::int64_t rows = ls[0] * ls[1];
  const VarId flat = t.view(shifted, {rows, ls[2]}, "loss.flat");
  const VarId cols = t.view(targets, {rows}, "loss.targets_flat");
  const VarId picked = ops.index_arange_rows("loss.index", flat, cols);
  t.drop({flat, cols});
  const VarId lg = ops.log("loss.log", sumexps);  // torch.log(sum_exp) - target_logits
  const VarId picked_view = t.view(picked, t.shape(lg), "loss.picked");
  const VarId losses = ops.sub("loss.sub", lg, picked_view);
  t.drop(lg);
  const VarId loss = ops.mean_all("loss.mean", losses);  // losses.mean()
  t.drop({losses, picked_view, picked, sumexps, shifted, maxes});
  return loss;
}

void add(std::vector<ParameterShape>& out, std::string name, Shape shape, int layer = -1) {
  out.push_back(ParameterShape{std::move(name), std::move(shape), layer});
}

class Kkaitlyn111 final : public LayerCode {
 public:
  std::string_view name() const override { return "cs336-kkaitlyn111"; }
  // TransformerLM: token_embeddings, per layer ln1, attn (q, k, v, output_proj), ln2, ffn (w1, w2, w3);
  // ln_final, lm_head.
  void parameter_shapes(const ModelConfig& m, std::vector<ParameterShape>& out) const override {
    const std::int64_t d = m.d_model;
    add(out, "token_embeddings.weight", {m.vocab_size, d});
    for (int l = 0; l < m.n_layers; ++l) {
      const std::string p = fmt::format("layers.{}.", l);
      add(out, p + "ln1.weight", {d}, l);
      add(out, p + "attn.q_proj.weight", {m.q_dim(), d}, l);
      add(out, p + "attn.k_proj.weight", {m.kv_dim(), d}, l);
      add(out, p + "attn.v_proj.weight", {m.kv_dim(), d}, l);
      add(out, p + "attn.output_proj.weight", {d, m.q_dim()}, l);
      add(out, p + "ln2.weight", {d}, l);
      add(out, p + "ffn.w1.weight", {m.d_ff, d}, l);
      add(out, p + "ffn.w2.weight", {d, m.d_ff}, l);
      add(out, p + "ffn.w3.weight", {m.d_ff, d}, l);
    }
    add(out, "ln_final.weight", {d});
    add(out, "lm_head.weight", {m.vocab_size, d});
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

const Kkaitlyn111 kCode;
[[maybe_unused]] const bool kRegistered = (register_layer_code(kCode), true);

}  // namespace
}  // namespace vramsim
