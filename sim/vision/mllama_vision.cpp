#include "sim/vision/mllama_vision.h"
#include "sim/models/llama_rms_norm.h"

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "sim/models/checkpoint_impl.h"

namespace vramsim {
namespace {

using Kind = GradRule::Kind;
using Mllama = ModelConfig::VisionPart::Mllama;

// The vision part's parameters by name without the leading "model." (mllama_parameters.h's names; the ops
// are named after their modules the same way); cheap to copy into a checkpointed layer's replay.
class Names {
 public:
  explicit Names(const EmitContext& ctx) {
    auto by_name = std::make_shared<std::unordered_map<std::string, VarId>>();
    const EagerTape& t = ctx.ops.tape();
    for (const VarId v : ctx.params.vision.all) {
      by_name->emplace(t.name(v), v);
    }
    m_by_name = std::move(by_name);
  }
  VarId operator()(const std::string& name) const { return m_by_name->at("model." + name); }

 private:
  std::shared_ptr<const std::unordered_map<std::string, VarId>> m_by_name;
};

std::int64_t tile_patches(const Mllama& v) {
  const std::int64_t side = v.image_size / v.patch_size;
  return side * side + 1;
}

// A kernel that writes a new tensor of `shape` from x (F.pad, the reshape of a non-contiguous slice,
// torch.stack): saves nothing; its backward hands x a new gradient.
VarId copy_op(TorchOps& ops, const std::string& name, const std::string& kind, const std::vector<VarId>& in,
              const Shape& shape) {
  EagerTape& t = ops.tape();
  OpCall c;
  c.name = name;
  c.kind = kind;
  c.inputs = in;
  c.outputs = {OutputSpec{"", shape, t.dtype(in[0])}};
  c.backward.grads.assign(in.size(), GradRule{Kind::kAlloc});
  return t.op1(c);
}

// MllamaTextRMSNorm.forward: LlamaRMSNorm's statements.
VarId rms_norm(TorchOps& ops, const std::string& n, VarId x, VarId w) { return llama_rms_norm(ops, n, x, w); }

// gate.tanh() * x (MllamaVisionEncoderLayer's gates, the tile embeddings', the cross-attention layers').
VarId gated(TorchOps& ops, const std::string& n, VarId gate, VarId x) {
  const VarId g = ops.tanh(n + ".tanh", gate);
  const VarId out = ops.mul(n + ".mul", g, x);
  ops.tape().drop(g);
  return out;
}

// MllamaVisionEncoderLayer.forward with MllamaVisionSdpaAttention: q/k/v_proj (no bias), the (b, s, h, d)
// views transposed into F.scaled_dot_product_attention with the additive aspect-ratio mask (the
// memory-efficient kernel: flash takes no mask), transpose(1, 2).contiguous(), o_proj, the gate when gated;
// then the GELU MLP.
VarId vision_layer(EmitContext& ctx, const Names& p, const std::string& n, VarId x, VarId mask, bool gate) {
  TorchOps& ops = ctx.ops;
  EagerTape& t = ops.tape();
  const Mllama& v = ctx.model.vision.mllama;
  const std::int64_t b = t.shape(x)[0], s = t.shape(x)[1], heads = v.heads, hd = v.hidden / v.heads;
  const VarId h1 = ops.layer_norm(n + ".input_layernorm", x, p(n + ".input_layernorm.weight"),
                                  p(n + ".input_layernorm.bias"));
  const VarId q = ops.linear(n + ".self_attn.q_proj", h1, p(n + ".self_attn.q_proj.weight"));
  const VarId k = ops.linear(n + ".self_attn.k_proj", h1, p(n + ".self_attn.k_proj.weight"));
  const VarId val = ops.linear(n + ".self_attn.v_proj", h1, p(n + ".self_attn.v_proj.weight"));
  t.drop(h1);
  const Shape per_head{b, heads, s, hd};
  const VarId qh = t.view(q, per_head, n + ".q_heads");
  const VarId kh = t.view(k, per_head, n + ".k_heads");
  const VarId vh = t.view(val, per_head, n + ".v_heads");
  t.drop({q, k, val});
  const VarId core = ops.sdpa_efficient(n + ".self_attn.sdpa", qh, kh, vh, mask);
  t.drop({qh, kh, vh});
  const VarId transposed = t.view(core, {b, s, v.hidden}, n + ".self_attn.transpose");
  const VarId merged = ops.contiguous(n + ".self_attn.contiguous", transposed,
                                      attention_kernel_writes_bshd(AttentionKind::kSdpaEfficient));
  t.drop({transposed, core});
  VarId attn = ops.linear(n + ".self_attn.o_proj", merged, p(n + ".self_attn.o_proj.weight"));
  t.drop(merged);
  if (gate) {
    const VarId g = gated(ops, n + ".gate_attn", p(n + ".gate_attn"), attn);
    t.drop(attn);
    attn = g;
  }
  const VarId r1 = ops.add(n + ".residual1", x, attn);
  t.drop(attn);
  const VarId h2 =
      ops.layer_norm(n + ".post_attention_layernorm", r1, p(n + ".post_attention_layernorm.weight"),
                     p(n + ".post_attention_layernorm.bias"));
  const VarId f1 = ops.linear(n + ".mlp.fc1", h2, p(n + ".mlp.fc1.weight"), p(n + ".mlp.fc1.bias"));
  t.drop(h2);
  const VarId act = ops.gelu(n + ".mlp.activation_fn", f1);
  t.drop(f1);
  VarId mlp = ops.linear(n + ".mlp.fc2", act, p(n + ".mlp.fc2.weight"), p(n + ".mlp.fc2.bias"));
  t.drop(act);
  if (gate) {
    const VarId g = gated(ops, n + ".gate_ffn", p(n + ".gate_ffn"), mlp);
    t.drop(mlp);
    mlp = g;
  }
  const VarId out = ops.add(n + ".residual2", r1, mlp);
  t.drop({r1, mlp});
  return out;
}

// One encoder layer, inside torch.utils.checkpoint when the tower trains under --checkpointing full
// (gradient_checkpointing_enable() sets MllamaVisionEncoder.gradient_checkpointing too).
VarId run_vision_layer(EmitContext& ctx, const Names& p, const std::string& n, VarId x, VarId mask,
                       bool gate) {
  EagerTape& t = ctx.ops.tape();
  if (ctx.options.checkpointing != Checkpointing::kFull || ctx.options.vision.freeze_tower ||
      !t.grad_enabled()) {
    return vision_layer(ctx, p, n, x, mask, gate);
  }
  if (ctx.options.checkpoint.impl_explicit) {  // --checkpoint-impl named: the towers follow it (as CLIP's)
    t.set_checkpoint_recompute(checkpoint_recompute(ctx.options.checkpoint));
  }
  // the replay runs in backward, after this frame: the body keeps its own copies
  const VarId y =
      t.checkpoint(n + ".checkpoint", {x, mask}, [&ctx, p, n, gate](const std::vector<VarId>& in) {
        return vision_layer(ctx, p, n, in[0], in[1], gate);
      });
  t.set_checkpoint_recompute(CheckpointRecompute::kKeepOutputs);
  return y;
}

// MllamaPrecomputedAspectRatioEmbedding.forward (gated): embedding(aspect_ratio_ids) reshaped to (n, tiles,
// 1, hidden), times gate.tanh(), added to the hidden state.
VarId tile_embedding(EmitContext& ctx, const Names& p, const std::string& n, VarId x, VarId ids) {
  TorchOps& ops = ctx.ops;
  EagerTape& t = ops.tape();
  const Mllama& v = ctx.model.vision.mllama;
  const std::int64_t images = t.shape(ids)[0];
  const VarId e = ops.embedding(n + ".embedding", p(n + ".embedding.weight"), ids);
  const VarId r = t.view(e, {images, v.max_num_tiles, 1, v.hidden}, n + ".reshape");
  t.drop(e);
  const VarId g = gated(ops, n + ".gate", p(n + ".gate"), r);
  t.drop(r);
  const VarId out = ops.add(n + ".add", x, g);
  t.drop(g);
  return out;
}

// MllamaVisionModel.forward up to layernorm_pre: the patch convolution on the pixels cast to the tower's
// dtype, the pre-tile embedding, the class token, MllamaPrecomputedPositionEmbedding ((1 - gate.tanh()) *
// embedding, then gate.tanh() * tile_embedding(aspect_ratio_ids)), layernorm_pre. (images, tiles, 1601,
// hidden).
VarId vision_embeddings(EmitContext& ctx, const Names& p, VarId ids) {
  TorchOps& ops = ctx.ops;
  EagerTape& t = ops.tape();
  const Mllama& v = ctx.model.vision.mllama;
  const std::string m = "vision_model.";
  const Shape& px = t.shape(ctx.pixel_values);
  const std::int64_t images = px[0] * px[1], tiles = v.max_num_tiles, side = v.image_size / v.patch_size;
  const std::int64_t patches = tile_patches(v);
  const VarId w = p(m + "patch_embedding.weight");
  const VarId flat = t.view(ctx.pixel_values, {images * tiles, v.channels, v.image_size, v.image_size},
                            "vision_model.pixel_values_reshape");
  const VarId cast = ops.to("vision_model.pixel_values_to_dtype", flat, t.dtype(w));
  t.drop(flat);
  OpCall conv;  // Conv2d(3, hidden, patch, stride=patch, bias=False); cudnn saves what the other side needs
  conv.name = "vision_model.patch_embedding";
  conv.kind = "convolution";
  conv.inputs = {cast, w};
  conv.outputs = {OutputSpec{"", {images * tiles, v.hidden, side, side}, t.dtype(w)}};
  if (t.requires_grad(w)) {
    conv.saved.inputs.push_back(0);
  }
  conv.backward.grads = {GradRule{Kind::kAlloc}, GradRule{Kind::kAlloc}};
  conv.flops = 2.0 * static_cast<double>(images * tiles * side * side) *
               static_cast<double>(v.hidden * v.channels * v.patch_size * v.patch_size);
  const VarId patch = t.op1(conv);
  t.drop(cast);
  const VarId grid = t.view(patch, {images, tiles, side * side, v.hidden}, "vision_model.flatten_transpose");
  t.drop(patch);
  const VarId pre = tile_embedding(ctx, p, m + "pre_tile_positional_embedding", grid, ids);
  t.drop(grid);
  const VarId rows = t.view(pre, {images * tiles, side * side, v.hidden}, "vision_model.reshape_tiles");
  t.drop(pre);
  const VarId cls =
      t.view(p(m + "class_embedding"), {images * tiles, 1, v.hidden}, "vision_model.cls_expand");
  const VarId with_cls = ops.cat_dim("vision_model.apply_class_embedding", cls, rows, 1);
  t.drop({cls, rows});
  const VarId h = t.view(with_cls, {images, tiles, patches, v.hidden}, "vision_model.reshape_media");
  t.drop(with_cls);
  const std::string g = m + "gated_positional_embedding";
  const VarId gate = ops.tanh(g + ".gate_tanh", p(g + ".gate"));
  const VarId one_minus = ops.neg(g + ".one_minus_gate", gate);  // 1 - gate.tanh()
  const VarId pos = ops.mul(g + ".gated_embedding", one_minus, p(g + ".embedding"));
  t.drop(one_minus);
  const VarId with_pos = ops.add(g + ".add_position", h, pos);
  t.drop({h, pos});
  const VarId tile_e = ops.embedding(g + ".tile_embedding", p(g + ".tile_embedding.weight"), ids);
  const VarId tile_r = t.view(tile_e, {images, tiles, patches, v.hidden}, g + ".tile_reshape");
  t.drop(tile_e);
  const VarId tile_g = ops.mul(g + ".gated_tile", gate, tile_r);
  t.drop({tile_r, gate});
  const VarId with_tile = ops.add(g + ".add_tile", with_pos, tile_g);
  t.drop({with_pos, tile_g});
  const VarId out = ops.layer_norm("vision_model.layernorm_pre", with_tile, p(m + "layernorm_pre.weight"),
                                   p(m + "layernorm_pre.bias"));
  t.drop(with_tile);
  return out;
}

// _prepare_aspect_ratio_attention_mask: a (n, tiles x padded, 1) mask times its transpose (a bmm), times
// finfo(dtype).min, in the tower's dtype; the rest is small.
VarId aspect_ratio_mask(EmitContext& ctx, std::int64_t images, std::int64_t rows, DType dtype) {
  TorchOps& ops = ctx.ops;
  EagerTape& t = ops.tape();
  const VarId outer = t.constant("vision_model.aspect_ratio_mask.matmul", "bmm", {images, rows, rows}, dtype);
  const VarId scaled = ops.scale("vision_model.aspect_ratio_mask.mul_min", outer);
  t.drop(outer);
  const VarId mask = t.view(scaled, {images, 1, rows, rows}, "vision_model.aspect_ratio_mask.unsqueeze");
  t.drop(scaled);
  return mask;
}

// The rest of MllamaVisionModel.forward: pad to a multiple of 8 patches, the local transformer (every
// layer's input kept), layernorm_post, the post-tile embedding, the global transformer, the padding sliced
// off, the intermediate states stacked, and the concatenation: (batch x images, tiles, 1601, output_dim).
VarId vision_model(EmitContext& ctx, const Names& p, VarId ids) {
  TorchOps& ops = ctx.ops;
  EagerTape& t = ops.tape();
  const Mllama& v = ctx.model.vision.mllama;
  const std::string m = "vision_model.";
  const std::int64_t tiles = v.max_num_tiles, patches = tile_patches(v),
                     padded = mllama_padded_tile_patches(ctx.model);
  const VarId embedded = vision_embeddings(ctx, p, ids);
  const std::int64_t images = t.shape(embedded)[0], rows = tiles * padded;
  const VarId pad =
      copy_op(ops, "vision_model.pad", "constant_pad_nd", {embedded}, {images, tiles, padded, v.hidden});
  t.drop(embedded);
  const VarId mask = aspect_ratio_mask(ctx, images, rows, t.dtype(pad));
  std::vector<VarId> states{t.view(pad, {images, rows, v.hidden}, "vision_model.view_sequence")};
  t.drop(pad);
  for (std::int64_t l = 0; l < v.layers; ++l) {  // encoder_states: each layer's input, then the last output
    states.push_back(
        run_vision_layer(ctx, p, fmt::format("{}transformer.layers.{}", m, l), states.back(), mask, false));
  }
  VarId h = ops.layer_norm("vision_model.layernorm_post", states.back(), p(m + "layernorm_post.weight"),
                           p(m + "layernorm_post.bias"));
  const VarId h4 = t.view(h, {images, tiles, padded, v.hidden}, "vision_model.reshape_post");
  t.drop(h);
  const VarId post = tile_embedding(ctx, p, m + "post_tile_positional_embedding", h4, ids);
  t.drop(h4);
  h = t.view(post, {images, rows, v.hidden}, "vision_model.reshape_global");
  t.drop(post);
  for (std::int64_t l = 0; l < v.global_layers; ++l) {
    const VarId y =
        run_vision_layer(ctx, p, fmt::format("{}global_transformer.layers.{}", m, l), h, mask, true);
    t.drop(h);
    h = y;
  }
  t.drop(mask);
  // hidden_state[:, :, :slice_index].reshape(...): a copy of the non-contiguous slice
  const VarId last =
      copy_op(ops, "vision_model.remove_padding", "_unsafe_view", {h}, {images, tiles, patches, v.hidden});
  t.drop(h);
  std::vector<VarId> picked;
  for (const std::int64_t i : v.intermediate_layers) {  // encoder_states[i]: layer i's input
    picked.push_back(states.at(static_cast<std::size_t>(i)));
  }
  const auto n_picked = static_cast<std::int64_t>(picked.size());
  const VarId stacked =
      copy_op(ops, "vision_model.stack_intermediate", "stack", picked, {images, rows, v.hidden, n_picked});
  const VarId sliced = copy_op(ops, "vision_model.intermediate_remove_padding", "_unsafe_view", {stacked},
                               {images, tiles, patches, v.hidden * n_picked});
  t.drop(stacked);
  const VarId out = ops.cat_last("vision_model.cat_intermediate", last, sliced);
  t.drop({last, sliced});
  for (const VarId s : states) {  // the encoder's output tuple goes away with the function
    t.drop(s);
  }
  return out;
}

// _prepare_cross_attention_mask on the int64 (batch, seq, images, tiles) cross_attention_mask:
// repeat_interleave(1601, dim=3) (int64), (1.0 - mask) (float32), .to(dtype), .to(bool), masked_fill (the
// mask kept), != min (bool), .any(-1): the full_text_row_masked_out_mask; then the in-place product.
void cross_attention_mask(EmitContext& ctx, DType dtype) {
  EagerTape& t = ctx.ops.tape();
  const Mllama& v = ctx.model.vision.mllama;
  const TrainingOptions& o = ctx.options;
  const Shape full{o.batch, 1, o.seq, o.vision.images_per_sample * v.max_num_tiles * tile_patches(v)};
  t.begin_op("_prepare_cross_attention_mask.repeat_interleave", "repeat_interleave");
  const TensorId repeated =
      t.allocate("cross_attention_mask.repeat_interleave", tensor_bytes(full, DType::kInt64), DType::kInt64,
                 TensorCategory::kTemporary);
  t.begin_op("_prepare_cross_attention_mask.invert", "rsub");
  const TensorId inverted32 = t.allocate("cross_attention_mask.rsub", tensor_bytes(full, DType::kFloat32),
                                         DType::kFloat32, TensorCategory::kTemporary);
  const TensorId inverted =
      t.allocate("inverted_cross_attn_mask", tensor_bytes(full, dtype), dtype, TensorCategory::kTemporary);
  t.release(inverted32);
  t.begin_op("_prepare_cross_attention_mask.to_bool", "_to_copy");
  const TensorId as_bool = t.allocate("inverted_cross_attn_mask.to_bool", tensor_bytes(full, DType::kBool),
                                      DType::kBool, TensorCategory::kTemporary);
  const VarId mask = t.constant("cross_attention_mask", "masked_fill", full, dtype);
  t.release(as_bool);
  t.release(repeated);
  t.begin_op("_prepare_cross_attention_mask.full_row", "ne");
  const TensorId ne = t.allocate("cross_attention_mask.ne", tensor_bytes(full, DType::kBool), DType::kBool,
                                 TensorCategory::kTemporary);
  const VarId row = t.constant("full_text_row_masked_out_mask", "any", {o.batch, 1, o.seq, 1}, dtype);
  t.release(ne);
  t.release(inverted);
  ctx.cross_attention_mask = mask;
  ctx.full_text_row_masked_out_mask = row;
  ctx.forward_locals.push_back(mask);
  ctx.forward_locals.push_back(row);
}

// Meta's MLP (MllamaTextMLP): down_proj(silu(gate_proj(x)) * up_proj(x)).
VarId text_mlp(TorchOps& ops, const Names& p, const std::string& n, VarId x) {
  EagerTape& t = ops.tape();
  const VarId g = ops.linear(n + ".gate_proj", x, p(n + ".gate_proj.weight"));
  const VarId a = ops.silu(n + ".act_fn", g);
  t.drop(g);
  const VarId u = ops.linear(n + ".up_proj", x, p(n + ".up_proj.weight"));
  const VarId prod = ops.mul(n + ".mul", a, u);
  t.drop({a, u});
  const VarId out = ops.linear(n + ".down_proj", prod, p(n + ".down_proj.weight"));
  t.drop(prod);
  return out;
}

// MllamaTextCrossSdpaAttention.forward: q_proj and q_norm on the text, k_proj / v_proj on
// cross_attention_states, repeat_kv (a copy with fewer key/value heads), k_norm on the repeated keys, the
// contiguous() calls for a CUDA mask, SDPA with the additive mask (memory-efficient kernel), o_proj.
VarId cross_attention(EmitContext& ctx, const Names& p, const std::string& n, VarId x, VarId states,
                      VarId mask) {
  TorchOps& ops = ctx.ops;
  EagerTape& t = ops.tape();
  const ModelConfig& m = ctx.model;
  const std::int64_t b = t.shape(x)[0], s = t.shape(x)[1];
  const std::int64_t kv_rows = numel(t.shape(states)) / m.d_model / b;
  const VarId q = ops.linear(n + ".q_proj", x, p(n + ".q_proj.weight"));
  const VarId qh = t.view(q, {b, m.n_heads, s, m.head_dim}, n + ".q_heads");
  t.drop(q);
  const VarId qn = rms_norm(ops, n + ".q_norm", qh, p(n + ".q_norm.weight"));
  t.drop(qh);
  const VarId k = ops.linear(n + ".k_proj", states, p(n + ".k_proj.weight"));
  const VarId val = ops.linear(n + ".v_proj", states, p(n + ".v_proj.weight"));
  const Shape kv_heads{b, m.n_kv_heads, kv_rows, m.head_dim};
  const VarId kh = t.view(k, kv_heads, n + ".k_heads");
  const VarId vh = t.view(val, kv_heads, n + ".v_heads");
  t.drop({k, val});
  const Shape heads{b, m.n_heads, kv_rows, m.head_dim};
  // repeat_kv: expand + reshape, a copy with groups; the contiguous() before SDPA copies what is still
  // transposed (the query, and keys / values without groups)
  const bool groups = m.n_heads != m.n_kv_heads;
  const VarId kr = groups ? copy_op(ops, n + ".repeat_k", "_unsafe_view", {kh}, heads)
                          : ops.contiguous(n + ".k_contiguous", kh);
  const VarId vr = groups ? copy_op(ops, n + ".repeat_v", "_unsafe_view", {vh}, heads)
                          : ops.contiguous(n + ".v_contiguous", vh);
  t.drop({kh, vh});
  const VarId kn = rms_norm(ops, n + ".k_norm", kr, p(n + ".k_norm.weight"));
  t.drop(kr);
  const VarId qc = ops.contiguous(n + ".q_contiguous", qn);
  t.drop(qn);
  const VarId core = ops.sdpa_efficient(n + ".sdpa", qc, kn, vr, mask);
  t.drop({qc, kn, vr});
  const VarId transposed = t.view(core, {b, s, m.q_dim()}, n + ".transpose");
  const VarId merged = ops.contiguous(n + ".contiguous", transposed,
                                      attention_kernel_writes_bshd(AttentionKind::kSdpaEfficient));
  t.drop({transposed, core});
  const VarId out = ops.linear(n + ".o_proj", merged, p(n + ".o_proj.weight"));
  t.drop(merged);
  return out;
}

// MllamaCrossAttentionDecoderLayer.forward: residual + tanh(cross_attn_attn_gate) * cross_attn(norm(x)),
// then residual + tanh(cross_attn_mlp_gate) * (full_text_row_masked_out_mask[:, 0] * mlp(norm(x))).
VarId cross_layer(EmitContext& ctx, const Names& p, const std::string& n, VarId x, VarId states, VarId mask,
                  VarId row) {
  TorchOps& ops = ctx.ops;
  EagerTape& t = ops.tape();
  const VarId h1 = rms_norm(ops, n + ".input_layernorm", x, p(n + ".input_layernorm.weight"));
  const VarId attn = cross_attention(ctx, p, n + ".cross_attn", h1, states, mask);
  t.drop(h1);
  const VarId ga = gated(ops, n + ".cross_attn_attn_gate", p(n + ".cross_attn_attn_gate"), attn);
  t.drop(attn);
  const VarId r1 = ops.add(n + ".residual1", x, ga);
  t.drop(ga);
  const VarId h2 =
      rms_norm(ops, n + ".post_attention_layernorm", r1, p(n + ".post_attention_layernorm.weight"));
  const VarId mlp = text_mlp(ops, p, n + ".mlp", h2);
  t.drop(h2);
  const VarId row_view = t.view(row, {t.shape(row)[0], t.shape(row)[2], 1}, n + ".full_text_row_select");
  const VarId masked = ops.mul(n + ".full_text_row_mul", row_view, mlp);
  t.drop({row_view, mlp});
  const VarId gm = gated(ops, n + ".cross_attn_mlp_gate", p(n + ".cross_attn_mlp_gate"), masked);
  t.drop(masked);
  const VarId out = ops.add(n + ".residual2", r1, gm);
  t.drop({r1, gm});
  return out;
}

}  // namespace

std::int64_t mllama_padded_tile_patches(const ModelConfig& model) {
  const std::int64_t patches = tile_patches(model.vision.mllama);
  return patches + (8 - patches % 8) % 8;
}

Shape mllama_pixel_values_shape(const ModelConfig& model, const TrainingOptions& options) {
  const Mllama& v = model.vision.mllama;
  return {options.batch, options.vision.images_per_sample, v.max_num_tiles, v.channels, v.image_size,
          v.image_size};
}

void mllama_prepare_cross_attention(EmitContext& ctx) {
  if (ctx.pixel_values == kNoVar || ctx.model.vision.wrapper_model_type != "mllama") {
    return;
  }
  TorchOps& ops = ctx.ops;
  EagerTape& t = ops.tape();
  const Names p(ctx);
  const Shape& px = t.shape(ctx.pixel_values);
  // aspect_ratio_ids (batch, images) int64, reshaped to (batch x images, 1)
  const VarId ids = t.constant("aspect_ratio_ids", "_to_copy", {px[0] * px[1], 1}, DType::kInt64);
  const VarId features = vision_model(ctx, p, ids);
  t.drop(ids);
  const VarId projected = ops.linear("multi_modal_projector", features, p("multi_modal_projector.weight"),
                                     p("multi_modal_projector.bias"));
  t.drop(features);
  const Shape& f = t.shape(projected);
  const VarId states = t.view(projected, {f[0] * f[1], f[2], f[3]}, "cross_attention_states.reshape");
  t.drop(projected);
  ctx.cross_attention_states = states;
  ctx.forward_locals.push_back(states);
  cross_attention_mask(ctx, t.dtype(states));
}

VarId mllama_cross_attention_layers(EmitContext& ctx, int self_layer, VarId x) {
  if (ctx.cross_attention_states == kNoVar) {
    return x;
  }
  EagerTape& t = ctx.ops.tape();
  const std::vector<std::int64_t>& cross = ctx.model.vision.cross_attention_layers;
  for (std::size_t k = 0; k < cross.size(); ++k) {
    // text layer cross[k] runs after cross[k] - k self-attention layers
    if (cross[k] - static_cast<std::int64_t>(k) != self_layer) {
      continue;
    }
    const Names p(ctx);
    const std::string n = fmt::format("language_model.layers.{}", cross[k]);
    std::vector<VarId> in{x, ctx.cross_attention_states, ctx.cross_attention_mask,
                          ctx.full_text_row_masked_out_mask};
    VarId y;
    if (ctx.options.checkpointing == Checkpointing::kFull && t.grad_enabled()) {
      // MllamaTextModel's _gradient_checkpointing_func(decoder_layer.__call__, hidden_states,
      // cross_attention_states, cross_attention_mask, causal_mask, full_text_row_masked_out_mask, ...)
      t.set_checkpoint_recompute(checkpoint_recompute(ctx.options.checkpoint));
      y = t.checkpoint(n + ".checkpoint", in, [&ctx, p, n](const std::vector<VarId>& a) {
        return cross_layer(ctx, p, n, a[0], a[1], a[2], a[3]);
      });
      t.set_checkpoint_recompute(CheckpointRecompute::kKeepOutputs);
    } else {
      y = cross_layer(ctx, p, n, x, in[1], in[2], in[3]);
    }
    t.drop(x);
    x = y;
  }
  return x;
}

}  // namespace vramsim
