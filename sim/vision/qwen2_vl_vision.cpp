#include "sim/vision/qwen2_vl_vision.h"
#include "sim/models/llama_rms_norm.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/models/checkpoint_impl.h"

namespace vramsim {
namespace {

using Kind = GradRule::Kind;
using Clip = ModelConfig::VisionPart::Clip;
using Tower = ModelConfig::VisionPart::Tower;

constexpr const char* kVisual = "model.visual.";

bool v2_5(const Clip& c) { return c.tower == Tower::kQwen25Vl; }
std::int64_t head_dim(const Clip& c) { return c.hidden / c.heads; }
std::int64_t patch_elements(const Clip& c) {
  return c.channels * c.temporal_patch_size * c.patch_size * c.patch_size;
}

void push(std::vector<ParameterShape>& out, std::string name, std::vector<std::int64_t> shape) {
  out.push_back(ParameterShape{std::move(name), std::move(shape), -1});
}

// Qwen2RMSNorm.forward (2.5-VL's norm1 / norm2 / ln_q): LlamaRMSNorm's statements.
VarId rms_norm(TorchOps& ops, const std::string& n, VarId x, VarId w) { return llama_rms_norm(ops, n, x, w); }

VarId block_norm(TorchOps& ops, const Clip& c, const std::string& n, VarId x, VarId w, VarId b) {
  return v2_5(c) ? rms_norm(ops, n, x, w) : ops.layer_norm(n, x, w, b);
}

// PatchEmbed.forward: hidden_states.view(-1, C, T, P, P), proj(hidden_states.to(dtype=target_dtype))
// .view(-1, embed_dim): a Conv3d with stride = kernel, one output per patch. cudnn saves the input when the
// weight needs a gradient (derivatives.yaml convolution); the workspace is not modelled.
VarId patch_embed(TorchOps& ops, const Clip& c, VarId pixels, VarId w) {
  EagerTape& t = ops.tape();
  const std::string n = "visual.patch_embed.proj";
  const VarId xa = ops.autocast_operand(n, pixels);  // conv3d is on autocast's lower-precision list
  const VarId wa = ops.autocast_operand(n, w);
  const std::int64_t patches = t.shape(pixels)[0];
  OpCall call;
  call.name = n;
  call.kind = "convolution";
  call.inputs = {xa, wa};
  call.outputs = {OutputSpec{"", {patches, c.hidden}, ops.autocast() ? *ops.autocast() : t.dtype(wa)}};
  if (t.requires_grad(wa)) {
    call.saved.inputs.push_back(0);
  }
  if (t.requires_grad(xa)) {
    call.saved.inputs.push_back(1);
  }
  call.backward.grads = {GradRule{Kind::kAlloc}, GradRule{Kind::kAlloc}};
  call.flops = 2.0 * static_cast<double>(patches) * static_cast<double>(c.hidden * patch_elements(c));
  const VarId y = t.op1(call);
  ops.first_matmul_workspace();
  t.drop({xa, wa});
  return y;
}

// apply_rotary_pos_emb_vision: q.float(), (q * cos) + (rotate_half(q) * sin) in fp32 with cos / sin
// unsqueezed to (n, 1, head_dim), back to q's dtype.
VarId rotary(TorchOps& ops, const std::string& n, VarId x, VarId cos, VarId sin) {
  EagerTape& t = ops.tape();
  const DType dtype = t.dtype(x);
  const VarId x32 = ops.to(n + ".float", x, DType::kFloat32);
  Shape half = t.shape(x32);
  half.back() /= 2;
  const VarId a = ops.mul(n + ".mul_cos", x32, cos);
  const VarId x1 = t.view(x32, half, n + ".x1", GradRule{Kind::kAlloc});  // slice_backward: zeros + copy
  const VarId x2 = t.view(x32, half, n + ".x2", GradRule{Kind::kAlloc});
  const VarId nx2 = ops.neg(n + ".neg", x2);
  const VarId rot = ops.cat_last(n + ".rotate_half", nx2, x1);
  t.drop(nx2);
  const VarId b = ops.mul(n + ".mul_sin", rot, sin);
  t.drop(rot);
  const VarId sum = ops.add(n + ".add", a, b);
  t.drop({a, b, x1, x2, x32});
  const VarId out = ops.to(n + ".to_dtype", sum, dtype);
  t.drop(sum);
  return out;
}

// VisionAttention's attention over `groups` of equal chunks (cu_seqlens: the images, or 2.5-VL's windows).
// flash_attention_2 runs one varlen kernel over all of them. SDPA: torch.split of q / k / v along the
// sequence, sdpa_attention_forward per chunk (contiguous q / k / v, the kernel, transpose(1,
// 2).contiguous()), torch.cat(attn_outputs, dim=1); the chunks of one group run here as one batched kernel of
// the same bytes.
VarId chunked_attention(EmitContext& ctx, const std::string& n, VarId q, VarId k, VarId v,
                        const std::vector<AttentionChunks>& groups) {
  TorchOps& ops = ctx.ops;
  EagerTape& t = ops.tape();
  const Clip& c = ctx.model.vision.clip;
  const std::int64_t heads = c.heads, hd = head_dim(c), seq = t.shape(q)[0];
  if (ctx.attention == AttentionKind::kFlashAttention2) {
    const Shape bshd{1, seq, heads, hd};
    const VarId qv = t.view(q, bshd, n + ".q_varlen");
    const VarId kv = t.view(k, bshd, n + ".k_varlen");
    const VarId vv = t.view(v, bshd, n + ".v_varlen");
    const VarId core = ops.sdpa_flash(n + ".flash_attn_varlen", qv, kv, vv);
    t.drop({qv, kv, vv});
    const VarId out = t.view(core, {seq, c.hidden}, n + ".reshape");
    t.drop(core);
    return out;
  }
  VarId merged = kNoVar;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const std::string gn = fmt::format("{}.chunks{}", n, g);
    const Shape per_chunk{groups[g].chunks, heads, groups[g].length, hd};
    VarId in[3];
    const VarId src[3] = {q, k, v};
    const char* names[3] = {".q", ".k", ".v"};
    for (int i = 0; i < 3; ++i) {
      const VarId split = t.view(src[i], per_chunk, gn + names[i] + "_split");
      in[i] = ops.contiguous(gn + names[i] + "_contiguous", split);
      t.drop(split);
    }
    VarId core;
    switch (ctx.attention) {
      case AttentionKind::kSdpaFlash:
        core = ops.sdpa_flash(gn + ".sdpa", in[0], in[1], in[2]);
        break;
      case AttentionKind::kSdpaEfficient:
        core = ops.sdpa_efficient(gn + ".sdpa", in[0], in[1], in[2]);
        break;
      default:
        core = ops.sdpa_math(gn + ".sdpa", in[0], in[1], in[2], 0.0);
        break;
    }
    t.drop({in[0], in[1], in[2]});
    const VarId transposed = t.view(core, {groups[g].chunks, groups[g].length, heads, hd}, gn + ".transpose");
    const VarId out =
        ops.contiguous(gn + ".transpose_contiguous", transposed, attention_kernel_writes_bshd(ctx.attention));
    t.drop({transposed, core});
    if (merged == kNoVar) {  // torch.cat of the chunks' outputs: a new tensor
      const VarId flat = t.view(out, {groups[g].chunks * groups[g].length, c.hidden}, gn + ".flatten");
      merged = ops.contiguous(n + ".cat", flat);
      t.drop({flat, out});
    } else {
      const VarId flat = t.view(out, {groups[g].chunks * groups[g].length, c.hidden}, gn + ".flatten");
      const VarId grown = ops.cat_dim(n + ".cat", merged, flat, 0);
      t.drop({merged, flat, out});
      merged = grown;
    }
  }
  return merged;
}

// Qwen2VLVisionBlock / Qwen2_5_VLVisionBlock.forward: x + attn(norm1(x)), then x + mlp(norm2(x)).
VarId vision_block(EmitContext& ctx, const VisionParams::Layer& p, int l, VarId x, VarId cos, VarId sin,
                   const std::vector<AttentionChunks>& groups) {
  TorchOps& ops = ctx.ops;
  EagerTape& t = ops.tape();
  const Clip& c = ctx.model.vision.clip;
  const std::string n = fmt::format("visual.blocks.{}", l);
  const std::int64_t seq = t.shape(x)[0], heads = c.heads, hd = head_dim(c);
  const VarId h1 = block_norm(ops, c, n + ".norm1", x, p.ln1_w, p.ln1_b);
  // qkv(hidden_states).reshape(seq, 3, heads, -1).permute(1, 0, 2, 3).unbind(0): three strided views
  const VarId qkv = ops.linear(n + ".attn.qkv", h1, p.q_w, p.q_b);
  t.drop(h1);
  const Shape per_head{seq, heads, hd};
  const VarId q = t.view(qkv, per_head, n + ".attn.q", GradRule{Kind::kAlloc});
  const VarId k = t.view(qkv, per_head, n + ".attn.k", GradRule{Kind::kAlloc});
  const VarId v = t.view(qkv, per_head, n + ".attn.v", GradRule{Kind::kAlloc});
  t.drop(qkv);
  const VarId qr = rotary(ops, n + ".attn.rotary_q", q, cos, sin);
  const VarId kr = rotary(ops, n + ".attn.rotary_k", k, cos, sin);
  t.drop({q, k});
  const VarId attn = chunked_attention(ctx, n + ".attn", qr, kr, v, groups);
  t.drop({qr, kr, v});
  const VarId proj = ops.linear(n + ".attn.proj", attn, p.o_w, p.o_b);
  t.drop(attn);
  const VarId r1 = ops.add(n + ".residual1", x, proj);
  t.drop(proj);
  const VarId h2 = block_norm(ops, c, n + ".norm2", r1, p.ln2_w, p.ln2_b);
  VarId mlp;
  if (v2_5(c)) {  // Qwen2_5_VLMLP: down_proj(act_fn(gate_proj(x)) * up_proj(x)), act_fn SiLU
    const VarId gate = ops.linear(n + ".mlp.gate_proj", h2, p.gate_w, p.gate_b);
    const VarId act = ops.silu(n + ".mlp.act_fn", gate);
    t.drop(gate);
    const VarId up = ops.linear(n + ".mlp.up_proj", h2, p.fc1_w, p.fc1_b);
    const VarId prod = ops.mul(n + ".mlp.mul", act, up);
    t.drop({act, up});
    mlp = ops.linear(n + ".mlp.down_proj", prod, p.fc2_w, p.fc2_b);
    t.drop(prod);
  } else {  // VisionMlp: fc2(QuickGELU(fc1(x))), QuickGELU = x * sigmoid(1.702 x)
    const VarId h = ops.linear(n + ".mlp.fc1", h2, p.fc1_w, p.fc1_b);
    const VarId scaled = ops.scale(n + ".mlp.act.scale", h);
    const VarId gate = ops.sigmoid(n + ".mlp.act.sigmoid", scaled);
    t.drop(scaled);
    const VarId act = ops.mul(n + ".mlp.act.mul", h, gate);
    t.drop({h, gate});
    mlp = ops.linear(n + ".mlp.fc2", act, p.fc2_w, p.fc2_b);
    t.drop(act);
  }
  t.drop(h2);
  const VarId out = ops.add(n + ".residual2", r1, mlp);
  t.drop({r1, mlp});
  return out;
}

// The attention chunks of block l: every image whole, or 2.5-VL's windows outside fullatt_block_indexes.
std::vector<AttentionChunks> block_chunks(const Clip& c, const QwenImageGrid& grid, std::int64_t images,
                                          int l) {
  const bool full = !v2_5(c) || std::find(c.full_attention_layers.begin(), c.full_attention_layers.end(),
                                          l) != c.full_attention_layers.end();
  if (full) {
    return {AttentionChunks{images * grid.grid_t, grid.grid_h * grid.grid_w}};
  }
  std::vector<AttentionChunks> groups = qwen2_5_vl_windows(c, grid);
  for (AttentionChunks& g : groups) {
    g.chunks *= images;
  }
  return groups;
}

// PatchMerger.forward: mlp(ln_q(x).view(-1, hidden * merge^2)), mlp = Linear, GELU, Linear.
VarId patch_merger(EmitContext& ctx, const VisionParams& p, VarId x) {
  TorchOps& ops = ctx.ops;
  EagerTape& t = ops.tape();
  const Clip& c = ctx.model.vision.clip;
  const std::int64_t unit = c.spatial_merge_size * c.spatial_merge_size;
  const VarId normed = block_norm(ops, c, "visual.merger.ln_q", x, p.post_ln_w, p.post_ln_b);
  const VarId grouped = t.view(normed, {t.shape(x)[0] / unit, c.hidden * unit}, "visual.merger.view");
  t.drop(normed);
  const VarId h = ops.linear("visual.merger.mlp.0", grouped, p.proj1_w, p.proj1_b);
  t.drop(grouped);
  const VarId act = ops.gelu("visual.merger.mlp.1", h);
  t.drop(h);
  const VarId out = ops.linear("visual.merger.mlp.2", act, p.proj2_w, p.proj2_b);
  t.drop(act);
  return out;
}

// Qwen2.5-VL's reordering by window: hidden_states.reshape(seq / unit, unit, -1)[window_index].reshape(seq,
// -1), an index (a copy) whose backward scatters into zeros of the input's size.
VarId window_reorder(TorchOps& ops, const std::string& n, VarId x) {
  EagerTape& t = ops.tape();
  OpCall call;
  call.name = n;
  call.kind = "index";
  call.inputs = {x};
  call.outputs = {OutputSpec{"", t.shape(x), t.dtype(x)}};
  call.backward.grads = {GradRule{Kind::kAlloc}};
  return t.op1(call);
}

}  // namespace

QwenImageGrid qwen2_vl_image_grid(const Clip& c, std::int64_t height, std::int64_t width,
                                  std::int64_t min_pixels, std::int64_t max_pixels) {
  const std::int64_t factor = c.patch_size * c.spatial_merge_size;
  const double h = static_cast<double>(height), w = static_cast<double>(width);
  if (std::max(h, w) / std::min(h, w) > 200.0) {
    throw InputError(
        fmt::format("--image-size {}x{}: absolute aspect ratio must be smaller than 200 "
                    "(Qwen2VLImageProcessor smart_resize)",
                    height, width));
  }
  const double f = static_cast<double>(factor);
  // round() is Python's: half to even, which std::nearbyint gives in the default rounding mode
  auto h_bar = static_cast<std::int64_t>(std::nearbyint(h / f)) * factor;
  auto w_bar = static_cast<std::int64_t>(std::nearbyint(w / f)) * factor;
  const auto max_px = static_cast<double>(max_pixels), min_px = static_cast<double>(min_pixels);
  if (static_cast<double>(h_bar) * static_cast<double>(w_bar) > max_px) {
    const double beta = std::sqrt(h * w / max_px);
    h_bar = std::max(factor, static_cast<std::int64_t>(std::floor(h / beta / f)) * factor);
    w_bar = std::max(factor, static_cast<std::int64_t>(std::floor(w / beta / f)) * factor);
  } else if (static_cast<double>(h_bar) * static_cast<double>(w_bar) < min_px) {
    const double beta = std::sqrt(min_px / (h * w));
    h_bar = static_cast<std::int64_t>(std::ceil(h * beta / f)) * factor;
    w_bar = static_cast<std::int64_t>(std::ceil(w * beta / f)) * factor;
  }
  QwenImageGrid g;
  g.height = h_bar;
  g.width = w_bar;
  g.grid_t = 1;  // an image's patches are np.tile'd to temporal_patch_size frames: one temporal patch
  g.grid_h = h_bar / c.patch_size;
  g.grid_w = w_bar / c.patch_size;
  return g;
}

std::vector<AttentionChunks> qwen2_5_vl_windows(const Clip& c, const QwenImageGrid& grid) {
  const std::int64_t merge = c.spatial_merge_size;
  const std::int64_t side = c.window_size / merge / c.patch_size;  // vit_merger_window_size
  const std::int64_t llm_h = grid.grid_h / merge, llm_w = grid.grid_w / merge;
  const std::int64_t rows[2][2] = {{llm_h / side, side}, {llm_h % side != 0 ? 1 : 0, llm_h % side}};
  const std::int64_t cols[2][2] = {{llm_w / side, side}, {llm_w % side != 0 ? 1 : 0, llm_w % side}};
  std::vector<AttentionChunks> out;
  for (const auto& r : rows) {
    for (const auto& col : cols) {
      const std::int64_t count = r[0] * col[0] * grid.grid_t;
      if (count > 0 && r[1] * col[1] > 0) {  // unique_consecutive drops the empty windows' lengths
        out.push_back(AttentionChunks{count, r[1] * col[1] * merge * merge});
      }
    }
  }
  return out;
}

void qwen2_vl_vision_parameter_shapes(const ModelConfig& model, std::vector<ParameterShape>& out) {
  const Clip& c = model.vision.clip;
  const std::string v = kVisual;
  const std::int64_t h = c.hidden, ff = c.intermediate;
  push(out, v + "patch_embed.proj.weight",
       {h, c.channels, c.temporal_patch_size, c.patch_size, c.patch_size});
  for (std::int64_t l = 0; l < c.layers; ++l) {
    const std::string b = fmt::format("{}blocks.{}.", v, l);
    push(out, b + "norm1.weight", {h});
    if (!v2_5(c)) {
      push(out, b + "norm1.bias", {h});
    }
    push(out, b + "norm2.weight", {h});
    if (!v2_5(c)) {
      push(out, b + "norm2.bias", {h});
    }
    push(out, b + "attn.qkv.weight", {3 * h, h});
    push(out, b + "attn.qkv.bias", {3 * h});
    push(out, b + "attn.proj.weight", {h, h});
    push(out, b + "attn.proj.bias", {h});
    if (v2_5(c)) {
      push(out, b + "mlp.gate_proj.weight", {ff, h});
      push(out, b + "mlp.gate_proj.bias", {ff});
      push(out, b + "mlp.up_proj.weight", {ff, h});
      push(out, b + "mlp.up_proj.bias", {ff});
      push(out, b + "mlp.down_proj.weight", {h, ff});
      push(out, b + "mlp.down_proj.bias", {h});
    } else {
      push(out, b + "mlp.fc1.weight", {ff, h});
      push(out, b + "mlp.fc1.bias", {ff});
      push(out, b + "mlp.fc2.weight", {h, ff});
      push(out, b + "mlp.fc2.bias", {h});
    }
  }
  const std::int64_t merged = h * c.spatial_merge_size * c.spatial_merge_size;
  push(out, v + "merger.ln_q.weight", {h});
  if (!v2_5(c)) {
    push(out, v + "merger.ln_q.bias", {h});
  }
  push(out, v + "merger.mlp.0.weight", {merged, merged});
  push(out, v + "merger.mlp.0.bias", {merged});
  push(out, v + "merger.mlp.2.weight", {model.d_model, merged});
  push(out, v + "merger.mlp.2.bias", {model.d_model});
}

VarId qwen2_vl_image_features(EmitContext& ctx, const VisionParams& p, const QwenImageGrid& grid) {
  TorchOps& ops = ctx.ops;
  EagerTape& t = ops.tape();
  const Clip& c = ctx.model.vision.clip;
  const std::int64_t patches = t.shape(ctx.pixel_values)[0];
  const std::int64_t images = patches / grid.patches(), hd = head_dim(c);
  // get_image_features: pixel_values.type(self.visual.dtype)
  const VarId pixels = ops.to("visual.pixel_values_to_dtype", ctx.pixel_values, t.dtype(p.patch_w));
  VarId x = patch_embed(ops, c, pixels, p.patch_w);
  t.drop(pixels);
  // rot_pos_emb: pos_ids (patches, 2) int64 and the (max_grid, head_dim / 4) table indexed by them, flattened
  // to (patches, head_dim / 2) fp32; forward: emb = cat((rotary_pos_emb, rotary_pos_emb), -1), and
  // position_embeddings = (emb.cos(), emb.sin()); all locals until forward returns.
  t.begin_op("visual.rot_pos_emb", "index");
  std::vector<VarId> locals;
  locals.push_back(t.constant("visual.rot_pos_emb.pos_ids", "stack", {patches, 2}, DType::kInt64));
  locals.push_back(t.constant("visual.rotary_pos_emb", "index", {patches, hd / 2}, DType::kFloat32));
  if (v2_5(c)) {  // rotary_pos_emb[window_index]: reordered with the hidden states
    locals.push_back(
        t.constant("visual.rotary_pos_emb.window_order", "index", {patches, hd / 2}, DType::kFloat32));
    const VarId reordered = window_reorder(ops, "visual.window_index", x);
    t.drop(x);
    x = reordered;
  }
  locals.push_back(t.constant("visual.emb", "cat", {patches, hd}, DType::kFloat32));
  const VarId cos = t.constant("visual.position_embeddings.cos", "cos", {patches, 1, hd}, DType::kFloat32);
  const VarId sin = t.constant("visual.position_embeddings.sin", "sin", {patches, 1, hd}, DType::kFloat32);
  const bool grad = t.grad_enabled();
  const bool checkpoint =
      ctx.options.checkpointing == Checkpointing::kFull && !ctx.options.vision.freeze_tower && grad;
  for (int l = 0; l < static_cast<int>(c.layers); ++l) {
    const VisionParams::Layer& layer = p.layers[static_cast<std::size_t>(l)];
    const std::vector<AttentionChunks> groups = block_chunks(c, grid, images, l);
    VarId y;
    if (checkpoint) {
      // gradient_checkpointing_enable() covers the blocks (self._gradient_checkpointing_func); reentrant
      // unless --checkpoint-impl names the variant (transformers 4.x's default)
      if (ctx.options.checkpoint.impl_explicit) {
        t.set_checkpoint_recompute(checkpoint_recompute(ctx.options.checkpoint));
      }
      y = t.checkpoint(
          fmt::format("visual.blocks.{}.checkpoint", l), {x, cos, sin},
          [&ctx, &layer, l, groups](const std::vector<VarId>& in) {
            return vision_block(ctx, layer, l, in[0], in[1], in[2], groups);
          },
          nullptr, 1);  // position_embeddings is a tuple: not a tensor argument
      t.set_checkpoint_recompute(CheckpointRecompute::kKeepOutputs);  // the tape's default
    } else {
      y = vision_block(ctx, layer, l, x, cos, sin, groups);
    }
    t.drop(x);
    x = y;
  }
  VarId merged = patch_merger(ctx, p, x);
  t.drop(x);
  if (v2_5(c)) {  // hidden_states[reverse_indices, :]: back to the patches' order
    const VarId ordered = window_reorder(ops, "visual.reverse_indices", merged);
    t.drop(merged);
    merged = ordered;
  }
  t.drop({cos, sin});
  for (const VarId v : locals) {
    t.drop(v);
  }
  const std::int64_t tokens = grid.tokens(c.spatial_merge_size);
  const VarId out = t.view(merged, {images, tokens, ctx.model.d_model}, "visual.split_per_image");
  t.drop(merged);
  return out;
}

}  // namespace vramsim
