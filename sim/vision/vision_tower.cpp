#include "sim/vision/vision_tower.h"

#include <charconv>
#include <cmath>

#include <fmt/format.h>

#include "sim/core/error.h"
#include "sim/finetune/peft_lora.h"
#include "sim/finetune/peft_method.h"
#include "sim/finetune/peft_prompt.h"
#include "sim/models/checkpoint_impl.h"
#include "sim/models/gemma_rms_norm.h"
#include "sim/vision/llava_next_anyres.h"
#include "sim/vision/mllama_parameters.h"
#include "sim/vision/mllama_vision.h"
#include "sim/vision/qwen2_vl_vision.h"

namespace vramsim {
namespace {

using Kind = GradRule::Kind;
using Clip = ModelConfig::VisionPart::Clip;
using Tower = ModelConfig::VisionPart::Tower;

constexpr const char* kTower = "model.vision_tower.vision_model.";
constexpr const char* kProjector = "model.multi_modal_projector.";

std::int64_t positions(const Clip& c) { return c.patches_per_side() * c.patches_per_side() + 1; }

// CLIPVisionEmbeddings.patch_embedding: Conv2d(channels, hidden, kernel_size=patch, stride=patch, bias=False)
// on (n, channels, side, side) -> (n, hidden, side / patch, side / patch). cudnn's convolution saves its
// input when the weight needs a gradient and the weight when the input does (derivatives.yaml convolution);
// its workspace is not modelled.
VarId patch_convolution(TorchOps& ops, const std::string& name, VarId x, VarId w, const Clip& c,
                        VarId bias = kNoVar) {
  EagerTape& t = ops.tape();
  const VarId xa = ops.autocast_operand(name, x);  // conv2d is on autocast's lower-precision list
  const VarId wa = ops.autocast_operand(name, w);
  const VarId ba = bias == kNoVar ? kNoVar : ops.autocast_operand(name, bias);
  const std::int64_t n = t.shape(x)[0], g = c.patches_per_side();
  OpCall call;
  call.name = name;
  call.kind = "convolution";
  call.inputs = {xa, wa};
  if (ba != kNoVar) {  // SigLIP's bias: its gradient is the output gradient summed (nothing saved)
    call.inputs.push_back(ba);
  }
  call.outputs = {OutputSpec{"", {n, c.hidden, g, g}, ops.autocast() ? *ops.autocast() : t.dtype(wa)}};
  if (t.requires_grad(wa)) {
    call.saved.inputs.push_back(0);
  }
  if (t.requires_grad(xa)) {
    call.saved.inputs.push_back(1);
  }
  call.backward.grads = {GradRule{Kind::kAlloc}, GradRule{Kind::kAlloc}};
  if (ba != kNoVar) {
    call.backward.grads.push_back(GradRule{Kind::kAlloc});
  }
  call.flops = 2.0 * static_cast<double>(n * g * g) * static_cast<double>(c.hidden * c.channels) *
               static_cast<double>(c.patch_size * c.patch_size);
  const VarId y = t.op1(call);
  ops.first_matmul_workspace();
  t.drop({xa, wa});
  if (ba != kNoVar) {
    t.drop(ba);
  }
  return y;
}

// CLIPVisionEmbeddings.forward: patch_embedding(pixel_values.to(dtype=target_dtype)).flatten(2).transpose(1,
// 2), torch.cat([class_embedding.expand(n, 1, -1), patch_embeds], dim=1), + position_embedding(position_ids).
VarId clip_embeddings(EmitContext& ctx, const VisionParams& p, VarId pixels, VarId position_ids) {
  TorchOps& ops = ctx.ops;
  EagerTape& t = ops.tape();
  const Clip& c = ctx.model.vision.clip;
  const std::string n = "vision.embeddings";
  const VarId cast = ops.to(n + ".pixel_values_to_dtype", pixels, t.dtype(p.patch_w));
  const VarId conv = patch_convolution(ops, n + ".patch_embedding", cast, p.patch_w, c);
  t.drop(cast);
  const std::int64_t images = t.shape(pixels)[0], g = c.patches_per_side();
  const VarId patches = t.view(conv, {images, g * g, c.hidden}, n + ".flatten_transpose");
  t.drop(conv);
  const VarId cls = t.view(p.class_embedding, {images, 1, c.hidden}, n + ".class_embedding_expand");
  const VarId cat = ops.cat_dim(n + ".cat", cls, patches, 1);
  t.drop({cls, patches});
  const VarId pos = ops.embedding(n + ".position_embedding", p.position_w, position_ids);
  const VarId sum = ops.add(n + ".add_positions", cat, pos);
  t.drop({cat, pos});
  return sum;
}

// CLIPAttention.forward with the SDPA interface (or flash_attention_2): q/k/v_proj, view + transpose to
// heads, the contiguous copies sdpa_attention_forward makes, the non-causal kernel, transpose + reshape back
// and out_proj. The eager interface (softmax of materialized scores) is approximated by SDPA's math kernel.
VarId clip_attention(EmitContext& ctx, const VisionParams::Layer& p, const std::string& n, VarId x) {
  TorchOps& ops = ctx.ops;
  EagerTape& t = ops.tape();
  const Clip& c = ctx.model.vision.clip;
  const Shape& in = t.shape(x);
  const std::int64_t b = in[0], s = in[1], heads = c.heads, hd = c.hidden / c.heads;
  const VarId q = ops.linear(n + ".q_proj", x, p.q_w, p.q_b);
  const VarId k = ops.linear(n + ".k_proj", x, p.k_w, p.k_b);
  const VarId v = ops.linear(n + ".v_proj", x, p.v_w, p.v_b);
  const Shape per_head{b, heads, s, hd};
  const VarId qh = t.view(q, per_head, n + ".q_heads");
  const VarId kh = t.view(k, per_head, n + ".k_heads");
  const VarId vh = t.view(v, per_head, n + ".v_heads");
  t.drop({q, k, v});
  const bool flash = ctx.attention == AttentionKind::kFlashAttention2;
  VarId core;
  if (flash) {  // flash_attn_func reads the (b, s, h, d) projections as they are
    core = ops.sdpa_flash(n + ".flash_attn", qh, kh, vh);
  } else {
    const VarId qc = ops.contiguous(n + ".q_contiguous", qh);
    const VarId kc = ops.contiguous(n + ".k_contiguous", kh);
    const VarId vc = ops.contiguous(n + ".v_contiguous", vh);
    switch (ctx.attention) {
      case AttentionKind::kSdpaFlash:
        core = ops.sdpa_flash(n + ".sdpa", qc, kc, vc);
        break;
      case AttentionKind::kSdpaEfficient:
        core = ops.sdpa_efficient(n + ".sdpa", qc, kc, vc);
        break;
      default:
        core = ops.sdpa_math(n + ".sdpa", qc, kc, vc, 0.0);
        break;
    }
    t.drop({qc, kc, vc});
  }
  t.drop({qh, kh, vh});
  const VarId transposed = t.view(core, {b, s, c.hidden}, n + ".transpose");
  const VarId merged =
      ops.contiguous(n + ".merge_heads", transposed, flash || attention_kernel_writes_bshd(ctx.attention));
  t.drop({transposed, core});
  const VarId out = ops.linear(n + ".out_proj", merged, p.o_w, p.o_b);
  t.drop(merged);
  return out;
}

// CLIPMLP with QuickGELUActivation: fc2(input * torch.sigmoid(1.702 * input)) of fc1(x); SiglipMLP's
// gelu_pytorch_tanh is one kernel that saves its input.
VarId clip_mlp(EmitContext& ctx, const VisionParams::Layer& p, const std::string& n, VarId x) {
  TorchOps& ops = ctx.ops;
  EagerTape& t = ops.tape();
  const VarId h = ops.linear(n + ".fc1", x, p.fc1_w, p.fc1_b);
  if (ctx.model.vision.clip.tower == Tower::kSiglip) {
    const VarId act = ops.gelu(n + ".activation_fn", h);
    t.drop(h);
    const VarId out = ops.linear(n + ".fc2", act, p.fc2_w, p.fc2_b);
    t.drop(act);
    return out;
  }
  const VarId scaled = ops.scale(n + ".quick_gelu.scale", h);
  const VarId gate = ops.sigmoid(n + ".quick_gelu.sigmoid", scaled);
  t.drop(scaled);
  const VarId act = ops.mul(n + ".quick_gelu.mul", h, gate);
  t.drop({h, gate});
  const VarId out = ops.linear(n + ".fc2", act, p.fc2_w, p.fc2_b);
  t.drop(act);
  return out;
}

// CLIPEncoderLayer.forward (and SiglipEncoderLayer.forward, the same statements): residual +
// self_attn(layer_norm1(x)), then residual + mlp(layer_norm2(x)).
VarId clip_layer(EmitContext& ctx, const VisionParams::Layer& p, int l, VarId x) {
  TorchOps& ops = ctx.ops;
  EagerTape& t = ops.tape();
  const std::string n = fmt::format("vision.layers.{}", l);
  const VarId h1 = ops.layer_norm(n + ".layer_norm1", x, p.ln1_w, p.ln1_b);
  const VarId attn = clip_attention(ctx, p, n + ".self_attn", h1);
  t.drop(h1);
  const VarId r1 = ops.add(n + ".residual1", x, attn);
  t.drop(attn);
  const VarId h2 = ops.layer_norm(n + ".layer_norm2", r1, p.ln2_w, p.ln2_b);
  const VarId mlp = clip_mlp(ctx, p, n + ".mlp", h2);
  t.drop(h2);
  const VarId out = ops.add(n + ".residual2", r1, mlp);
  t.drop({r1, mlp});
  return out;
}

// One encoder layer, inside torch.utils.checkpoint when the tower trains under --checkpointing full
// (gradient_checkpointing_enable() covers CLIPEncoder and SiglipEncoder too); a frozen tower saves nothing
// either way. Reentrant unless --checkpoint-impl says otherwise (transformers 4.x's default).
VarId run_clip_layer(EmitContext& ctx, const VisionParams& p, int l, VarId x) {
  const VisionParams::Layer& layer = p.layers[static_cast<std::size_t>(l)];
  if (ctx.options.checkpointing == Checkpointing::kFull && !ctx.options.vision.freeze_tower &&
      ctx.ops.tape().grad_enabled()) {
    EagerTape& t = ctx.ops.tape();
    if (ctx.options.checkpoint.impl_explicit) {  // --checkpoint-impl named: the towers follow it too
      t.set_checkpoint_recompute(checkpoint_recompute(ctx.options.checkpoint));
    }
    const VarId y = t.checkpoint(
        fmt::format("vision.layers.{}.checkpoint", l), {x},
        [&ctx, &layer, l](const std::vector<VarId>& in) { return clip_layer(ctx, layer, l, in[0]); });
    t.set_checkpoint_recompute(CheckpointRecompute::kKeepOutputs);  // the tape's default
    return y;
  }
  return clip_layer(ctx, layer, l, x);
}

AnyresGrid anyres_grid(const ModelConfig& model, const VisionInputs& v) {
  const std::int64_t h = v.image_size == 0 ? model.vision.clip.image_size : v.image_size;
  return llava_next_anyres_grid(model.vision.clip, h, v.image_width == 0 ? h : v.image_width);
}

// LlavaModel.get_image_features: vision_tower(pixel_values, output_hidden_states=True) -- the embeddings,
// then pre_layrnorm, each encoder layer; every hidden state stays in the output tuple until the function
// returns; pooled_output = post_layernorm(last_hidden_state[:, 0, :]) --,
// hidden_states[vision_feature_layer], [:, 1:] under the "default" strategy, multi_modal_projector. The
// layers after the selected one and the pooled output feed nothing the loss reads: their autograd graph dies
// when the outputs do, so they run without recording one here.
VarId image_features(EmitContext& ctx, const VisionParams& p) {
  TorchOps& ops = ctx.ops;
  EagerTape& t = ops.tape();
  const Clip& c = ctx.model.vision.clip;
  const bool grad = t.grad_enabled();
  const bool anyres = !c.grid_pinpoints.empty();  // llava_next: every tile is one batch item of the tower
  const VarId pixels = anyres ? llava_next_flatten_pixels(ctx, ctx.pixel_values) : ctx.pixel_values;
  VarId x = clip_embeddings(ctx, p, pixels, p.position_ids);
  if (anyres) {
    t.drop(pixels);
  }
  const VarId pre = ops.layer_norm("vision.pre_layrnorm", x, p.pre_ln_w, p.pre_ln_b);
  t.drop(x);
  std::vector<VarId> hidden_states{pre};  // encoder_states: (embeddings, layer 0 output, ...)
  const std::int64_t selected = c.feature_layers_run();
  for (int l = 0; l < static_cast<int>(c.layers); ++l) {
    t.set_grad_enabled(grad && l < selected);
    hidden_states.push_back(run_clip_layer(ctx, p, l, hidden_states.back()));
  }
  const std::int64_t images = t.shape(pre)[0];
  const VarId cls = t.view(hidden_states.back(), {images, c.hidden}, "vision.pooled_select");
  const VarId pooled = ops.layer_norm("vision.post_layernorm", cls, p.post_ln_w, p.post_ln_b);
  t.drop(cls);
  t.set_grad_enabled(grad);
  const VarId chosen = hidden_states[static_cast<std::size_t>(selected)];
  const std::int64_t tokens = c.tokens_per_image();
  // selected_image_feature[:, 1:]: a strided slice; F.linear folds it into rows, a copy when several images
  // make it non-contiguous
  VarId features = t.view(chosen, {images, tokens, c.hidden}, "vision.select_features",
                          GradRule{c.drop_cls ? Kind::kAlloc : Kind::kPassThrough});
  if (c.drop_cls && images > 1) {
    const VarId copied = ops.contiguous("vision.select_features_reshape", features);
    t.drop(features);
    features = copied;
  }
  const VarId h1 = ops.linear("multi_modal_projector.linear_1", features, p.proj1_w, p.proj1_b);
  t.drop(features);
  const VarId act = ops.gelu("multi_modal_projector.act", h1);
  t.drop(h1);
  const VarId out = ops.linear("multi_modal_projector.linear_2", act, p.proj2_w, p.proj2_b);
  t.drop(act);
  t.drop(pooled);
  for (const VarId h : hidden_states) {  // image_outputs goes away
    t.drop(h);
  }
  if (anyres) {  // torch.split by image_num_patches, pack_image_features
    return llava_next_pack_image_features(ctx, out, anyres_grid(ctx.model, ctx.options.vision),
                                          images_in_micro_batch(ctx.options));
  }
  return out;
}

// SiglipVisionEmbeddings.forward: patch_embedding(pixel_values.to(dtype=target_dtype)) (a Conv2d with bias),
// .flatten(2).transpose(1, 2), + position_embedding(position_ids). No class token.
VarId siglip_embeddings(EmitContext& ctx, const VisionParams& p) {
  TorchOps& ops = ctx.ops;
  EagerTape& t = ops.tape();
  const Clip& c = ctx.model.vision.clip;
  const std::string n = "vision.embeddings";
  const VarId cast = ops.to(n + ".pixel_values_to_dtype", ctx.pixel_values, t.dtype(p.patch_w));
  const VarId conv = patch_convolution(ops, n + ".patch_embedding", cast, p.patch_w, c, p.patch_b);
  t.drop(cast);
  const std::int64_t images = t.shape(ctx.pixel_values)[0], g = c.patches_per_side();
  // the convolution's bias is added into its output (no other tensor)
  const VarId patches = t.view(conv, {images, g * g, c.hidden}, n + ".flatten_transpose");
  t.drop(conv);
  const VarId pos = ops.embedding(n + ".position_embedding", p.position_w, p.position_ids);
  const VarId sum = ops.add(n + ".add_positions", patches, pos);
  t.drop({patches, pos});
  return sum;
}

// Gemma3Model.get_image_features: vision_tower(pixel_values).last_hidden_state (SiglipVisionTransformer:
// embeddings, the encoder's layers without output_hidden_states, post_layernorm), then
// Gemma3MultiModalProjector.forward: transpose(1, 2).reshape(b, hidden, side, side) (a copy: the transpose is
// not contiguous), AvgPool2d(kernel), flatten(2).transpose(1, 2), mm_soft_emb_norm, matmul with
// mm_input_projection_weight. The pooling head (vision_use_head) is not run (gemma3's configs turn it off).
VarId siglip_image_features(EmitContext& ctx, const VisionParams& p) {
  TorchOps& ops = ctx.ops;
  EagerTape& t = ops.tape();
  const Clip& c = ctx.model.vision.clip;
  VarId x = siglip_embeddings(ctx, p);
  for (int l = 0; l < static_cast<int>(c.layers); ++l) {
    const VarId y = run_clip_layer(ctx, p, l, x);
    t.drop(x);
    x = y;
  }
  const VarId last = ops.layer_norm("vision.post_layernorm", x, p.post_ln_w, p.post_ln_b);
  t.drop(x);
  const std::int64_t images = t.shape(last)[0], side = c.patches_per_side();
  const auto pooled_side =
      static_cast<std::int64_t>(std::llround(std::sqrt(static_cast<double>(c.pooled_tokens))));
  const std::string n = "multi_modal_projector";
  const VarId transposed = t.view(last, {images, c.hidden, side, side}, n + ".transpose");
  const VarId grid = ops.contiguous(n + ".reshape", transposed);
  t.drop({transposed, last});
  OpCall pool;  // avg_pool2d: derivatives.yaml saves self; the backward allocates the input's gradient
  pool.name = n + ".avg_pool";
  pool.kind = "avg_pool2d";
  pool.inputs = {grid};
  pool.outputs = {OutputSpec{"", {images, c.hidden, pooled_side, pooled_side}, t.dtype(grid)}};
  pool.saved.inputs = {0};
  pool.backward.grads = {GradRule{Kind::kAlloc}};
  pool.flops = static_cast<double>(images * c.hidden * side * side);
  const VarId pooled = t.op1(pool);
  t.drop(grid);
  const VarId tokens = t.view(pooled, {images, c.pooled_tokens, c.hidden}, n + ".flatten_transpose");
  t.drop(pooled);
  const VarId normed = gemma_rms_norm(ops, n + ".mm_soft_emb_norm", tokens, p.mm_norm_w);
  t.drop(tokens);
  const VarId out =
      ops.matmul(n + ".mm_input_projection", normed, p.proj1_w, {images, c.pooled_tokens, ctx.model.d_model});
  t.drop(normed);
  return out;
}

void push(std::vector<ParameterShape>& out, std::string name, std::vector<std::int64_t> shape) {
  out.push_back(ParameterShape{std::move(name), std::move(shape), -1});
}

// SiglipVisionModel's and Gemma3MultiModalProjector's parameters (modeling_siglip.py, modeling_gemma3.py):
// SiglipEncoderLayer registers layer_norm1, self_attn (k, v, q, out_proj), layer_norm2, mlp.
void siglip_parameter_shapes(const ModelConfig& model, std::vector<ParameterShape>& out) {
  const Clip& c = model.vision.clip;
  const std::int64_t h = c.hidden, ff = c.intermediate;
  const std::string e = std::string(kTower) + "embeddings.";
  push(out, e + "patch_embedding.weight", {h, c.channels, c.patch_size, c.patch_size});
  push(out, e + "patch_embedding.bias", {h});
  push(out, e + "position_embedding.weight", {c.patches_per_side() * c.patches_per_side(), h});
  for (std::int64_t l = 0; l < c.layers; ++l) {
    const std::string p = fmt::format("{}encoder.layers.{}.", kTower, l);
    push(out, p + "layer_norm1.weight", {h});
    push(out, p + "layer_norm1.bias", {h});
    for (const char* proj : {"k_proj", "v_proj", "q_proj", "out_proj"}) {
      push(out, p + "self_attn." + proj + ".weight", {h, h});
      push(out, p + "self_attn." + proj + ".bias", {h});
    }
    push(out, p + "layer_norm2.weight", {h});
    push(out, p + "layer_norm2.bias", {h});
    push(out, p + "mlp.fc1.weight", {ff, h});
    push(out, p + "mlp.fc1.bias", {ff});
    push(out, p + "mlp.fc2.weight", {h, ff});
    push(out, p + "mlp.fc2.bias", {h});
  }
  push(out, std::string(kTower) + "post_layernorm.weight", {h});
  push(out, std::string(kTower) + "post_layernorm.bias", {h});
  if (c.pooling_head) {  // SiglipMultiheadAttentionPoolingHead: registered, not run
    const std::string hd = std::string(kTower) + "head.";
    push(out, hd + "probe", {1, 1, h});
    push(out, hd + "attention.in_proj_weight", {3 * h, h});
    push(out, hd + "attention.in_proj_bias", {3 * h});
    push(out, hd + "attention.out_proj.weight", {h, h});
    push(out, hd + "attention.out_proj.bias", {h});
    push(out, hd + "layernorm.weight", {h});
    push(out, hd + "layernorm.bias", {h});
    push(out, hd + "mlp.fc1.weight", {ff, h});
    push(out, hd + "mlp.fc1.bias", {ff});
    push(out, hd + "mlp.fc2.weight", {h, ff});
    push(out, hd + "mlp.fc2.bias", {h});
  }
  push(out, std::string(kProjector) + "mm_input_projection_weight", {h, model.d_model});
  push(out, std::string(kProjector) + "mm_soft_emb_norm.weight", {h});
}

// The role of a vision parameter by its name (VisionParams' comment), in the layer it belongs to.
void assign_role(VisionParams& p, const std::string& name, VarId v) {
  static const std::pair<const char*, VarId VisionParams::Layer::*> kLayerRoles[] = {
      {"self_attn.k_proj.weight", &VisionParams::Layer::k_w},
      {"self_attn.k_proj.bias", &VisionParams::Layer::k_b},
      {"self_attn.v_proj.weight", &VisionParams::Layer::v_w},
      {"self_attn.v_proj.bias", &VisionParams::Layer::v_b},
      {"self_attn.q_proj.weight", &VisionParams::Layer::q_w},
      {"self_attn.q_proj.bias", &VisionParams::Layer::q_b},
      {"self_attn.out_proj.weight", &VisionParams::Layer::o_w},
      {"self_attn.out_proj.bias", &VisionParams::Layer::o_b},
      {"attn.qkv.weight", &VisionParams::Layer::q_w},
      {"attn.qkv.bias", &VisionParams::Layer::q_b},
      {"attn.proj.weight", &VisionParams::Layer::o_w},
      {"attn.proj.bias", &VisionParams::Layer::o_b},
      {"layer_norm1.weight", &VisionParams::Layer::ln1_w},
      {"layer_norm1.bias", &VisionParams::Layer::ln1_b},
      {"layer_norm2.weight", &VisionParams::Layer::ln2_w},
      {"layer_norm2.bias", &VisionParams::Layer::ln2_b},
      {"norm1.weight", &VisionParams::Layer::ln1_w},
      {"norm1.bias", &VisionParams::Layer::ln1_b},
      {"norm2.weight", &VisionParams::Layer::ln2_w},
      {"norm2.bias", &VisionParams::Layer::ln2_b},
      {"mlp.fc1.weight", &VisionParams::Layer::fc1_w},
      {"mlp.fc1.bias", &VisionParams::Layer::fc1_b},
      {"mlp.fc2.weight", &VisionParams::Layer::fc2_w},
      {"mlp.fc2.bias", &VisionParams::Layer::fc2_b},
      {"mlp.gate_proj.weight", &VisionParams::Layer::gate_w},
      {"mlp.gate_proj.bias", &VisionParams::Layer::gate_b},
      {"mlp.up_proj.weight", &VisionParams::Layer::fc1_w},
      {"mlp.up_proj.bias", &VisionParams::Layer::fc1_b},
      {"mlp.down_proj.weight", &VisionParams::Layer::fc2_w},
      {"mlp.down_proj.bias", &VisionParams::Layer::fc2_b},
  };
  for (const char* layers : {"encoder.layers.", "blocks."}) {
    const std::size_t at = name.find(layers);
    if (at == std::string::npos || name.find("head.") != std::string::npos) {
      continue;
    }
    const std::size_t index_at = at + std::string_view(layers).size();
    const std::size_t dot = name.find('.', index_at);
    const auto l = static_cast<std::size_t>(std::stoll(name.substr(index_at, dot - index_at)));
    const std::string rest = name.substr(dot + 1);
    for (const auto& [suffix, member] : kLayerRoles) {
      if (rest == suffix) {
        p.layers.at(l).*member = v;
        return;
      }
    }
    return;
  }
  static const std::pair<const char*, VarId VisionParams::*> kRoles[] = {
      {"embeddings.class_embedding", &VisionParams::class_embedding},
      {"embeddings.patch_embedding.weight", &VisionParams::patch_w},
      {"embeddings.patch_embedding.bias", &VisionParams::patch_b},
      {"embeddings.position_embedding.weight", &VisionParams::position_w},
      {"patch_embed.proj.weight", &VisionParams::patch_w},
      {"pre_layrnorm.weight", &VisionParams::pre_ln_w},
      {"pre_layrnorm.bias", &VisionParams::pre_ln_b},
      {"vision_model.post_layernorm.weight", &VisionParams::post_ln_w},
      {"vision_model.post_layernorm.bias", &VisionParams::post_ln_b},
      {"merger.ln_q.weight", &VisionParams::post_ln_w},
      {"merger.ln_q.bias", &VisionParams::post_ln_b},
      {"merger.mlp.0.weight", &VisionParams::proj1_w},
      {"merger.mlp.0.bias", &VisionParams::proj1_b},
      {"merger.mlp.2.weight", &VisionParams::proj2_w},
      {"merger.mlp.2.bias", &VisionParams::proj2_b},
      {"linear_1.weight", &VisionParams::proj1_w},
      {"linear_1.bias", &VisionParams::proj1_b},
      {"linear_2.weight", &VisionParams::proj2_w},
      {"linear_2.bias", &VisionParams::proj2_b},
      {"mm_input_projection_weight", &VisionParams::proj1_w},
      {"mm_soft_emb_norm.weight", &VisionParams::mm_norm_w},
      {"model.image_newline", &VisionParams::image_newline},
  };
  for (const auto& [suffix, member] : kRoles) {
    if (name.ends_with(suffix)) {
      p.*member = v;
      return;
    }
  }
}

// The projector's parameters: trained unless a PEFT method freezes the base model (Qwen's PatchMerger is
// "visual.merger"; LLaMA-Factory names it the multi-modal projector of qwen2_vl too).
bool is_projector(const std::string& name) {
  return name.starts_with(kProjector) || name.starts_with("model.visual.merger.") ||
         name == "model.image_newline";
}

}  // namespace

void llava_vision_parameter_shapes(const ModelConfig& model, std::vector<ParameterShape>& out) {
  mllama_parameter_shapes(model, out);  // mllama: run by mllama_vision.h
  if (!model.vision.simulated()) {
    return;
  }
  const Clip& c = model.vision.clip;
  if (c.tower == Tower::kSiglip) {
    siglip_parameter_shapes(model, out);
    return;
  }
  if (c.tower == Tower::kQwen2Vl || c.tower == Tower::kQwen25Vl) {
    qwen2_vl_vision_parameter_shapes(model, out);
    return;
  }
  if (!c.grid_pinpoints.empty()) {  // named_parameters: LlavaNextModel's own image_newline comes first
    push(out, "model.image_newline", {model.d_model});
  }
  const std::string e = std::string(kTower) + "embeddings.";
  push(out, e + "class_embedding", {c.hidden});
  push(out, e + "patch_embedding.weight", {c.hidden, c.channels, c.patch_size, c.patch_size});
  push(out, e + "position_embedding.weight", {positions(c), c.hidden});
  push(out, std::string(kTower) + "pre_layrnorm.weight", {c.hidden});
  push(out, std::string(kTower) + "pre_layrnorm.bias", {c.hidden});
  for (std::int64_t l = 0; l < c.layers; ++l) {
    const std::string p = fmt::format("{}encoder.layers.{}.", kTower, l);
    for (const char* proj : {"k_proj", "v_proj", "q_proj", "out_proj"}) {  // CLIPAttention.__init__ order
      push(out, p + "self_attn." + proj + ".weight", {c.hidden, c.hidden});
      push(out, p + "self_attn." + proj + ".bias", {c.hidden});
    }
    push(out, p + "layer_norm1.weight", {c.hidden});
    push(out, p + "layer_norm1.bias", {c.hidden});
    push(out, p + "mlp.fc1.weight", {c.intermediate, c.hidden});
    push(out, p + "mlp.fc1.bias", {c.intermediate});
    push(out, p + "mlp.fc2.weight", {c.hidden, c.intermediate});
    push(out, p + "mlp.fc2.bias", {c.hidden});
    push(out, p + "layer_norm2.weight", {c.hidden});
    push(out, p + "layer_norm2.bias", {c.hidden});
  }
  push(out, std::string(kTower) + "post_layernorm.weight", {c.hidden});
  push(out, std::string(kTower) + "post_layernorm.bias", {c.hidden});
  push(out, std::string(kProjector) + "linear_1.weight", {model.d_model, c.hidden});
  if (c.projector_bias) {
    push(out, std::string(kProjector) + "linear_1.bias", {model.d_model});
  }
  push(out, std::string(kProjector) + "linear_2.weight", {model.d_model, model.d_model});
  if (c.projector_bias) {
    push(out, std::string(kProjector) + "linear_2.bias", {model.d_model});
  }
}

VisionParams create_vision_parameters(EagerTape& tape, const ModelConfig& model, DType dtype,
                                      const VisionInputs& vision, bool base_frozen,
                                      const std::function<std::int64_t(std::int64_t)>& resident_numel) {
  VisionParams p;
  std::vector<ParameterShape> shapes;
  llava_vision_parameter_shapes(model, shapes);
  if (shapes.empty()) {
    return p;
  }
  if (!model.vision.simulated()) {
    // mllama (mllama_vision.h): the tower trains unless frozen, the projector and the cross-attention layers
    // unless a PEFT method freezes them; a text-only batch reaches none of them, so no gradient and no
    // optimizer state (mllama_parameters.h): frozen here, which costs the same
    const bool images = vision.images_per_sample > 0;
    for (const ParameterShape& s : shapes) {
      const VarId v =
          tape.parameter(s.name, s.shape, dtype, resident_numel ? resident_numel(numel(s.shape)) : -1);
      p.all.push_back(v);
      const bool tower = s.name.starts_with("model.vision_model.");
      if (images && !base_frozen && !(tower && vision.freeze_tower)) {
        p.trainable.push_back(v);
      } else {
        tape.freeze(v);
      }
    }
    return p;
  }
  const Clip& c = model.vision.clip;
  p.layers.resize(static_cast<std::size_t>(c.layers));
  for (const ParameterShape& s : shapes) {
    const VarId v =
        tape.parameter(s.name, s.shape, dtype, resident_numel ? resident_numel(numel(s.shape)) : -1);
    p.all.push_back(v);
    if (base_frozen || (!is_projector(s.name) && vision.freeze_tower)) {
      tape.freeze(v);
    } else {
      p.trainable.push_back(v);
    }
    assign_role(p, s.name, v);
  }
  if (c.tower == Tower::kClip || c.tower == Tower::kSiglip) {
    // CLIPVisionEmbeddings' / SiglipVisionEmbeddings' position_ids: register_buffer(..., persistent=False),
    // moved with the model
    const std::int64_t n =
        c.tower == Tower::kClip ? positions(c) : c.patches_per_side() * c.patches_per_side();
    p.position_ids =
        tape.input("model.vision_tower.vision_model.embeddings.position_ids", {1, n}, DType::kInt64);
  } else {
    // Qwen2VisionRotaryEmbedding's inv_freq: register_buffer(persistent=False), head_dim / 4 fp32
    p.position_ids =
        tape.input("model.visual.rotary_pos_emb.inv_freq", {c.hidden / c.heads / 4}, DType::kFloat32);
  }
  return p;
}

std::int64_t images_in_micro_batch(const TrainingOptions& options) {
  return options.batch * options.vision.images_per_sample;
}

std::pair<std::int64_t, std::int64_t> parse_image_size(const std::string& text) {
  const auto number = [&text](std::string_view digits) {
    std::int64_t x = -1;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), x);
    if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || x < 0 || x > 65536) {
      throw InputError(
          fmt::format("--image-size '{}': expected pixels per side (0..65536) or HEIGHTxWIDTH", text));
    }
    return x;
  };
  const std::size_t x = text.find('x');
  if (x == std::string::npos) {
    return {number(text), 0};
  }
  const std::int64_t h = number(std::string_view(text).substr(0, x));
  const std::int64_t w = number(std::string_view(text).substr(x + 1));
  if (h == 0 || w == 0) {
    throw InputError(fmt::format("--image-size '{}': a height and a width of at least one pixel", text));
  }
  return {h, w};
}

namespace {
bool qwen(const Clip& c) { return c.tower == Tower::kQwen2Vl || c.tower == Tower::kQwen25Vl; }

QwenImageGrid qwen_image_grid(const ModelConfig& model, const VisionInputs& v) {
  const std::int64_t h = v.image_size == 0 ? kQwenDefaultImageSide : v.image_size;
  const std::int64_t w = v.image_width == 0 ? h : v.image_width;
  return qwen2_vl_image_grid(model.vision.clip, h, w, v.min_pixels == 0 ? kQwenMinPixels : v.min_pixels,
                             v.max_pixels == 0 ? kQwenMaxPixels : v.max_pixels);
}
}  // namespace

std::int64_t vision_tokens_per_image(const ModelConfig& model, const VisionInputs& v) {
  const Clip& c = model.vision.clip;
  if (!c.grid_pinpoints.empty()) {
    return anyres_grid(model, v).tokens();
  }
  return qwen(c) ? qwen_image_grid(model, v).tokens(c.spatial_merge_size) : c.tokens_per_image();
}

Shape pixel_values_shape(const ModelConfig& model, const TrainingOptions& options) {
  if (model.vision.wrapper_model_type == "mllama") {
    return mllama_pixel_values_shape(model, options);
  }
  const Clip& c = model.vision.clip;
  const std::int64_t images = images_in_micro_batch(options);
  if (qwen(c)) {  // Qwen2VLImageProcessor's flatten_patches: one row per patch, fp32
    return {images * qwen_image_grid(model, options.vision).patches(),
            c.channels * c.temporal_patch_size * c.patch_size * c.patch_size};
  }
  if (!c.grid_pinpoints.empty()) {  // LlavaNextImageProcessor: (images, patches, channels, side, side)
    return {images, anyres_grid(model, options.vision).patches(), c.channels, c.image_size, c.image_size};
  }
  return {images, c.channels, c.image_size, c.image_size};
}

namespace {

// The image size the tower takes and the image tokens --seq must hold (the simulated towers).
void check_image_tokens(const ModelConfig& model, const TrainingOptions& o) {
  const Clip& c = model.vision.clip;
  const std::string& wrapper = model.vision.wrapper_model_type;
  if (!qwen(c) && c.grid_pinpoints.empty()) {  // llava_next's processor resizes any size into its tiles
    const std::int64_t side = o.vision.image_size == 0 ? c.image_size : o.vision.image_size;
    const std::int64_t width = o.vision.image_width == 0 ? side : o.vision.image_width;
    if (side != c.image_size || width != c.image_size) {
      // CLIPVisionEmbeddings / SiglipVisionEmbeddings.forward without interpolate_pos_encoding (LlavaModel
      // and Gemma3Model do not pass it)
      throw InputError(
          fmt::format("--image-size {}x{}: Input image size ({}*{}) doesn't match model ({}*{}) ({}; {}'s "
                      "images are resized "
                      "to vision_config.image_size)",
                      side, width, side, width, c.image_size, c.image_size,
                      c.tower == Tower::kClip ? "CLIPVisionEmbeddings" : "SiglipVisionEmbeddings", wrapper));
    }
  }
  const std::int64_t per_image = vision_tokens_per_image(model, o.vision);
  const std::int64_t tokens = o.vision.images_per_sample * per_image;
  if (tokens > o.seq) {
    throw InputError(
        fmt::format("--images-per-sample {}: {} image tokens ({} per image) do not fit in --seq {} "
                    "(the language model's sequence, image tokens included)",
                    o.vision.images_per_sample, tokens, per_image, o.seq));
  }
}

// What the vision part is not modelled with (its parameters are outside the language model's layers and
// the techniques' parameter maps).
void refuse_unmodelled(const ModelConfig& model, const TrainingOptions& o) {
  const std::string& wrapper = model.vision.wrapper_model_type;
  if (o.lora.enabled() && !is_prompt_learning(o.lora)) {
    // get_peft_model runs before anything below would: PEFT's refusal of a model_type without default
    // target_modules ("llava" has none) comes first
    (void)lora_target_modules(o.lora, model);
  }
  const auto not_modelled = [&wrapper](const std::string& what) {
    throw InputError(
        fmt::format("{} with a vision-language model ({}): not modelled (vramsim)", what, wrapper));
  };
  if (o.generate_tokens > 0) {
    not_modelled("--generate");
  }
  if (o.pipeline.stages > 1) {
    not_modelled("--pp");
  }
  if (o.tensor_parallel > 1 || o.sequence_parallel) {
    not_modelled("--tp");
  }
  if (o.context_parallel.degree > 1) {
    not_modelled("--cp");
  }
  if (o.compile != CompileMode::kNone) {
    not_modelled("--compile");
  }
  if (o.bnb.format != BnbFormat::kNone) {
    not_modelled("--base-weights");
  }
  if (o.float8.recipe != Float8Recipe::kNone) {
    not_modelled("--float8");
  }
  if (is_prompt_learning(o.lora)) {
    not_modelled(fmt::format("--peft-method {}", peft_method_info(o.lora.method).name));
  }
}

}  // namespace

void check_vision_options(const ModelConfig& model, const TrainingOptions& o) {
  if (model.vision.simulated()) {
    check_image_tokens(model, o);
  } else if (model.vision.wrapper_model_type != "mllama") {  // mllama: mllama_vision.h
    return;
  }
  refuse_unmodelled(model, o);
}

VarId merge_image_features(EmitContext& ctx, VarId inputs_embeds) {
  // mllama's images reach the language model through cross-attention, not its embeddings (mllama_vision.h)
  if (ctx.pixel_values == kNoVar || ctx.model.vision.wrapper_model_type == "mllama") {
    return inputs_embeds;
  }
  TorchOps& ops = ctx.ops;
  EagerTape& t = ops.tape();
  const Clip& clip = ctx.model.vision.clip;
  const VarId projected = qwen(clip)                     ? qwen2_vl_image_features(ctx, ctx.params.vision,
                                                                                   qwen_image_grid(ctx.model, ctx.options.vision))
                          : clip.tower == Tower::kSiglip ? siglip_image_features(ctx, ctx.params.vision)
                                                         : image_features(ctx, ctx.params.vision);
  const Shape& emb = t.shape(inputs_embeds);
  const std::int64_t images = t.shape(projected)[0], tokens = t.shape(projected)[1];
  // torch.cat(image_features, dim=0).to(inputs_embeds.device, inputs_embeds.dtype): one new tensor
  const VarId flat_view = t.view(projected, {images * tokens, emb[2]}, "image_features.list");
  // llava_next's pack already made that cat (llava_next_pack_image_features)
  const VarId cat = ops.contiguous("image_features.cat", flat_view, !clip.grid_pinpoints.empty());
  t.drop({flat_view, projected});
  const VarId features = ops.to("image_features.to_dtype", cat, t.dtype(inputs_embeds));
  t.drop(cat);
  // get_placeholder_mask: input_ids == image_token_id (bools of (b, s)),
  // unsqueeze(-1).expand_as(inputs_embeds); its check inputs_embeds[special_image_mask].numel() indexes with
  // the expanded mask: nonzero's int64 (n, 3) indices and the selected elements, freed at once.
  t.begin_op("get_placeholder_mask", "eq");
  const VarId mask = t.constant("special_image_mask", "eq", {emb[0], emb[1], 1}, DType::kBool);
  const std::int64_t selected = images * tokens * emb[2];
  t.begin_op("get_placeholder_mask.check", "index");
  const Bytes index_bytes = tensor_bytes({selected, 3}, DType::kInt64);
  const TensorId indices =
      t.allocate("special_image_mask.nonzero", index_bytes, DType::kInt64, TensorCategory::kTemporary);
  const TensorId picked =
      t.allocate("inputs_embeds[special_image_mask]", tensor_bytes({selected}, t.dtype(inputs_embeds)),
                 t.dtype(inputs_embeds), TensorCategory::kTemporary);
  t.release(picked);
  t.release(indices);
  // inputs_embeds.masked_scatter(mask, features): a contiguous clone, then masked_scatter__cuda
  // (aten/src/ATen/native/cuda/IndexKernel.cpp): maskPrefixSum = at::empty(self.sizes(), kLong) and
  // launch_masked_scatter_kernel's mask.contiguous() of the expanded mask, freed when it returns. Backward
  // (derivatives.yaml): self's gradient grad.masked_fill(mask, 0); source's masked_scatter_backward ->
  // grad.masked_select(mask), whose index with the bool mask makes nonzero's (n, 3) int64 indices.
  OpCall c;
  c.name = "inputs_embeds.masked_scatter";
  c.kind = "masked_scatter";
  c.inputs = {inputs_embeds, mask, features};
  c.outputs = {OutputSpec{"", emb, t.dtype(inputs_embeds)}};
  c.scratch_bytes = {tensor_bytes(emb, DType::kInt64), tensor_bytes(emb, DType::kBool)};
  c.saved.inputs = {1};
  c.backward.grads = {GradRule{Kind::kAlloc}, GradRule{Kind::kNone}, GradRule{Kind::kAlloc}};
  c.backward.temp_bytes = {index_bytes};
  const VarId merged = t.op1(c);
  t.drop({mask, features, inputs_embeds});
  return merged;
}

}  // namespace vramsim
