// Decoder layers written with torch.nn modules the way Hugging Face transformers writes GPT-2 (GPT2Block) and
// GPTBigCode, and Llama and the model_types written after it (LlamaDecoderLayer; Mistral, Qwen2, Gemma,
// Gemma-2, Phi-3; the MoE blocks of Mixtral and Qwen2-MoE are in hf_moe.cpp), with eager, SDPA or
// flash_attention_2 attention; and the Megatron-LM accounting of Korthikanti et al. 2022.
//
// Choices where the Python offers several (documented so a reader can check them against a recording):
//   * GPT-2's GELU is what config.json's activation_function says, HF's default gelu_new (NewGELUActivation
//     written out in Python: it saves the input, tanh's result, 0.5 * x and 1 + tanh), or F.gelu (one saved).
//   * The causal mask: GPT-2 reads its registered bool buffer; Llama's eager path adds a (b, 1, s, s) float
//     mask built once per forward; SDPA/flash needs none.
//   * Rotary cos/sin tables are computed once per forward in the embeddings' dtype, as LlamaModel does.
//   * The loss is HF's ForCausalLMLoss: logits.float(), shifted labels, F.cross_entropy.
//
// Note [Megatron accounting]: Korthikanti et al. 2022 (Table 2) count, per layer and in bytes, with 16-bit
// activations and 1-byte dropout masks: attention 11sbh + 5as^2b (LayerNorm output 2sbh, Q and K 4sbh,
// softmax output 2as^2b, its dropout mask as^2b and output 2as^2b, V 2sbh, projection input 2sbh, dropout
// mask sbh), MLP 19sbh (input 2sbh, GELU input 8sbh and output 8sbh, dropout mask sbh), two LayerNorm
// inputs 4sbh: s*b*h*(34 + 5as/h). PyTorch eager saves a little more: each LayerNorm's fp32 mean and rstd
// (16 bytes per token per layer), the scaled and masked scores feed an unfused softmax, and autocast keeps
// fp32 softmax outputs. megatron_accounting=true builds the layer with Megatron's fused kernels as the paper
// counts them: LayerNorm keeps only its input, one scale-mask-softmax kernel keeps only its output.
#include <algorithm>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "sim/compile/torch_compile.h"
#include "sim/core/assert.h"
#include "sim/finetune/peft_trainable_tokens.h"
#include "sim/inference/hf_kv_cache.h"
#include "sim/models/gemma_rms_norm.h"
#include "sim/models/layer_code.h"
#include "sim/models/llama_rms_norm.h"
#include "sim/models/torchtitan_chunked_loss.h"
#include "sim/moe/megatron_moe.h"
#include "sim/moe/torchtitan_moe.h"
#include "sim/parallel/loss_parallel.h"

namespace vramsim {
namespace {

using Kind = GradRule::Kind;

bool megatron(const EmitContext& c) {
  return c.options.megatron_accounting && c.model.family == ModelFamily::kGpt2;
}

enum class DropoutSite : std::uint8_t { kEmbeddings, kAttention, kResidual };

// Whether the model's code has a dropout module at `site`: GPT-2 and GPTBigCode have all three, Phi-3 the
// attention and residual ones (resid_attn_dropout, resid_mlp_dropout), Llama and the others only the
// attention probabilities.
bool has_dropout_site(const ModelConfig& m, DropoutSite site) {
  // Phi and Starcoder2: resid_dropout / residual_dropout on both branches, embd_pdrop / embedding_dropout
  return site == DropoutSite::kAttention || m.family == ModelFamily::kGpt2 ||
         (site == DropoutSite::kResidual && m.model_type == "phi3") || m.model_type == "phi" ||
         m.model_type == "starcoder2";
}

// nn.Dropout in training (model.train()): the output and a bool mask, saved for backward.
VarId maybe_dropout(EmitContext& c, const std::string& n, VarId x, DropoutSite site) {
  if (!has_dropout_site(c.model, site)) {
    return x;
  }
  const DropoutRates& m = c.model.dropout;
  const double model_rate = site == DropoutSite::kEmbeddings  ? m.embeddings
                            : site == DropoutSite::kAttention ? m.attention
                                                              : m.residual;
  const double p = c.options.dropout > 0.0 ? c.options.dropout : model_rate;
  if (p <= 0.0 || c.options.inference) {
    return x;
  }
  const auto [y, mask] = c.ops.dropout(n, x, p);
  c.ops.tape().drop({mask, x});
  return y;
}

// LlamaRMSNorm.forward
VarId hf_rmsnorm(EmitContext& c, const std::string& n, VarId x, VarId w) {
  return llama_rms_norm(c.ops, n, x, w);
}

VarId norm(EmitContext& c, const std::string& n, VarId x, VarId w, VarId b) {
  switch (c.model.norm) {
    case NormKind::kLayerNorm:
      return c.ops.layer_norm(n, x, w, b, !megatron(c));
    case NormKind::kGemmaRmsNorm:
      return gemma_rms_norm(c.ops, n, x, w);
    case NormKind::kRmsNorm:
      break;
  }
  return hf_rmsnorm(c, n, x, w);
}

// tanh(x / cap) * cap, as Gemma-2 writes soft-capping (attention scores and final logits).
VarId softcap(EmitContext& c, const std::string& n, VarId x) {
  TorchOps& ops = c.ops;
  EagerTape& t = ops.tape();
  const VarId divided = ops.scale(n + ".div_cap", x);
  const VarId th = ops.tanh(n + ".tanh", divided);
  t.drop(divided);
  const VarId out = ops.scale(n + ".mul_cap", th);
  t.drop(th);
  return out;
}

// apply_rotary_pos_emb: (x * cos) + (rotate_half(x) * sin), rotate_half = cat((-x2, x1), dim=-1)
VarId hf_rope(EmitContext& c, const std::string& n, VarId x) {
  TorchOps& ops = c.ops;
  EagerTape& t = ops.tape();
  Shape half = t.shape(x);
  half.back() /= 2;
  const VarId a = ops.mul(n + ".mul_cos", x, c.rope_cos);
  const VarId x1 = t.view(x, half, n + ".x1", GradRule{Kind::kAlloc});  // slice_backward: zeros + copy
  const VarId x2 = t.view(x, half, n + ".x2", GradRule{Kind::kAlloc});
  const VarId nx2 = ops.neg(n + ".neg", x2);
  const VarId rot = ops.cat_last(n + ".rotate_half", nx2, x1);
  t.drop(nx2);
  const VarId b = ops.mul(n + ".mul_sin", rot, c.rope_sin);
  t.drop(rot);
  const VarId out = ops.add(n + ".add", a, b);
  t.drop({a, b, x1, x2});
  return out;
}

// repeat_kv: expand + reshape, a copy when there are fewer key/value heads than query heads.
VarId repeat_kv(EmitContext& c, const std::string& n, VarId x) {
  if (c.model.n_kv_heads == c.model.n_heads || c.model.model_type == "gpt_bigcode") {
    c.ops.tape().hold(x);
    return x;
  }
  Shape s = c.ops.tape().shape(x);
  s[1] = c.model.n_heads;
  const VarId expanded = c.ops.tape().view(x, s, n + ".expand");
  const VarId out = c.ops.contiguous(n, expanded);
  c.ops.tape().drop(expanded);
  return out;
}

// integrations/sdpa_attention.py (transformers 4.48-4.50): key and value through repeat_kv; then
// query.contiguous(), key.contiguous(), value.contiguous() -- copies of the RoPE outputs (or of the views of
// GPT-2's c_attn), except key/value that repeat_kv's reshape already made contiguous; then
// F.scaled_dot_product_attention(..., attn_mask=mask, is_causal=mask is None).
VarId sdpa_attention(EmitContext& c, const std::string& n, VarId q, VarId k, VarId v, VarId mask) {
  TorchOps& ops = c.ops;
  EagerTape& t = ops.tape();
  const bool repeated = c.model.n_kv_heads != c.model.n_heads && c.model.model_type != "gpt_bigcode";
  const VarId kr = repeat_kv(c, n + ".repeat_k", k);
  const VarId vr = repeat_kv(c, n + ".repeat_v", v);
  // A single query position's transposed view is contiguous; the cache's concatenated or static states are.
  const bool single_query = t.shape(q)[2] == 1;
  const bool cached = c.kv_cache != nullptr && c.kv_cache->returns_contiguous();
  const VarId qc = ops.contiguous(n + ".q_contiguous", q, single_query);
  const VarId kc = ops.contiguous(n + ".k_contiguous", kr, repeated || cached);
  const VarId vc = ops.contiguous(n + ".v_contiguous", vr, repeated || cached);
  t.drop({kr, vr});
  const double p = c.options.inference       ? 0.0
                   : c.options.dropout > 0.0 ? c.options.dropout
                                             : c.model.dropout.attention;
  VarId out;
  switch (c.attention) {
    case AttentionKind::kSdpaFlash:
      out = ops.sdpa_flash(n + ".sdpa", qc, kc, vc);
      break;
    case AttentionKind::kSdpaEfficient:
      out = ops.sdpa_efficient(n + ".sdpa", qc, kc, vc, mask);
      break;
    default:
      out = ops.sdpa_math(n + ".sdpa", qc, kc, vc, p);
      break;
  }
  t.drop({qc, kc, vc});
  return out;
}

// The attention core from per-head q [b,h,s,hd], k, v [b,h_kv,s,hd] (all strided views) to [b,h,s,hd];
// `mask` is GPT-2's bool buffer or Llama's additive mask (kNoVar for flash). With `locals` given, eager
// attention hands the caller what outlives the core: eager_attention_forward's repeated key/value states,
// alive until it returns (after the caller's transpose copy), and the probabilities (attn_weights, returned
// to the attention module, which drops them when it returns); otherwise they die here.
struct EagerLocals {
  VarId key = kNoVar, value = kNoVar, probs = kNoVar;
};

VarId core_attention(EmitContext& c, const std::string& n, VarId q, VarId k, VarId v, VarId mask,
                     EagerLocals* locals = nullptr) {
  TorchOps& ops = c.ops;
  EagerTape& t = ops.tape();
  const std::int64_t b = c.options.batch, s = c.options.seq, h = c.model.n_heads, hd = c.model.head_dim;
  if (c.attention ==
      AttentionKind::kFlashAttention2) {  // flash_attn_func reads grouped k/v heads as they are
    return ops.sdpa_flash(n + ".flash_attn", q, k, v);
  }
  if (c.attention != AttentionKind::kEager) {
    return sdpa_attention(c, n, q, k, v, mask);
  }
  // GPTBigCode's multi-query attention folds the heads into the query's rows and reads its one key/value head
  // as it is; the others call repeat_kv (a copy only with fewer key/value heads).
  const bool mha = c.model.n_kv_heads == c.model.n_heads || c.model.model_type == "gpt_bigcode";
  const VarId kr = repeat_kv(c, n + ".repeat_k", k);
  const VarId vr = repeat_kv(c, n + ".repeat_v", v);
  // torch.matmul(a, b) under autocast: the autocast kernel (above matmul's decomposition) casts both operands
  // and holds the casts until matmul returns; a cast keeps the strides, so matmul then reads contiguous
  // copies of the strided ones (bmm takes the transposed, contiguous repeat_kv output as it is).
  const auto operand = [&](const std::string& name, VarId a, bool strided) {
    if (strided) {
      return ops.contiguous(name, a);
    }
    t.hold(a);
    return a;
  };
  const auto autocast_matmul = [&](const std::string& name, VarId x, bool x_strided, VarId y, bool y_strided,
                                   const Shape& out) {
    const VarId xa = ops.autocast_low(name, x);
    const VarId ya = ops.autocast_low(name, y);
    const VarId xc = operand(name + ".a_contiguous", xa, x_strided);
    const VarId yc = operand(name + ".b_contiguous", ya, y_strided);
    const VarId r = ops.matmul(name, xc, yc, out);
    t.drop({xc, yc, xa, ya});
    return r;
  };
  const std::int64_t kl = t.shape(k)[2];  // s, or the cache's key length
  const bool cached = c.kv_cache != nullptr && c.kv_cache->returns_contiguous();
  const VarId scores =
      autocast_matmul(n + ".scores", q, s > 1, kr, mha && !cached, {b, h, s, kl});  // query @ key^T
  VarId probs;
  if (megatron(c)) {  // one fused scale-mask-softmax kernel, output in the activation dtype
    probs = ops.softmax_last(n + ".scale_mask_softmax", scores, t.dtype(scores));
    t.drop(scores);
  } else {
    VarId scaled = ops.scale(n + ".scale", scores);
    t.drop(scores);
    if (c.model.attn_logit_softcapping > 0.0) {  // Gemma-2
      const VarId capped = softcap(c, n + ".softcap", scaled);
      t.drop(scaled);
      scaled = capped;
    }
    VarId masked;
    if (c.model.family == ModelFamily::kGpt2) {
      // self.bias[:, :, key_length - query_length : key_length, :key_length]
      const VarId window = t.view(mask, {1, 1, s, kl}, n + ".causal_bias_slice");
      masked = ops.where(n + ".causal_where", window, scaled);
      t.drop(window);
    } else {
      masked = ops.add(n + ".add_mask", scaled, mask);
    }
    t.drop(scaled);
    // Llama and its descendants: softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype) (after
    // RoPE with the embeddings' cos/sin, query is fp32 under autocast); GPT-2: softmax(attn_weights, dim=-1)
    // in the scores' dtype (fp32 under autocast, whose list has softmax), then .type(value.dtype). The old
    // attn_weights go when the statement rebinds the name, after the conversion.
    const VarId p32 = c.model.softmax_in_fp32 ? ops.softmax_last(n + ".softmax", masked, DType::kFloat32)
                                              : ops.softmax_last(n + ".softmax", masked);
    const DType probs_dtype = c.model.family == ModelFamily::kGpt2 ? t.dtype(v) : t.dtype(q);
    probs = ops.to(n + ".softmax_to_dtype", p32, probs_dtype);
    t.drop({p32, masked});
  }
  probs = maybe_dropout(c, n + ".attn_dropout", probs, DropoutSite::kAttention);
  const VarId out = autocast_matmul(n + ".attn_v", probs, false, vr, mha && !cached,
                                    {b, h, s, hd});  // attn_weights @ value
  if (locals != nullptr) {
    *locals = {kr, vr, probs};
  } else {
    t.drop({kr, vr, probs});
  }
  return out;
}

// DeepseekV3Attention.forward up to the attention call: q from q_b_proj(q_a_layernorm(q_a_proj(x))) (or
// q_proj), split into the no-RoPE and RoPE parts; compressed_kv = kv_a_proj_with_mqa(x), split into the
// latent (through kv_a_layernorm and kv_b_proj, then split into k_pass and value) and one shared rotary key;
// RoPE on q_rot and k_rot, k_rot expanded over the heads, then query = cat(q_pass, q_rot), key = cat(k_pass,
// k_rot). Returns (query, key, value) as [b, h, s, qk_head_dim] and [b, h, s, v_head_dim].
std::tuple<VarId, VarId, VarId> mla_qkv(EmitContext& c, const std::string& n, const LayerParams& p, VarId x) {
  TorchOps& ops = c.ops;
  EagerTape& t = ops.tape();
  const ModelConfig::Mla& a = c.model.mla;
  const std::int64_t b = c.options.batch, s = c.options.seq, h = c.model.n_heads;
  const std::int64_t qk = a.qk_nope_head_dim + a.qk_rope_head_dim;
  const auto split = [&t](VarId v, Shape shape, const std::string& name) {
    return t.view(v, std::move(shape), name, GradRule{GradRule::Kind::kAlloc});
  };
  VarId qx;
  if (p.q_a_w != kNoVar) {
    const VarId qa = ops.linear(n + ".q_a_proj", x, p.q_a_w);
    const VarId qn = norm(c, n + ".q_a_layernorm", qa, p.q_a_norm_w, kNoVar);
    t.drop(qa);
    qx = ops.linear(n + ".q_b_proj", qn, p.q_b_w);
    t.drop(qn);
  } else {
    qx = ops.linear(n + ".q_proj", x, p.q_w);
  }
  const VarId q_states = t.view(qx, {b, h, s, qk}, n + ".q_heads");
  t.drop(qx);
  const VarId q_pass = split(q_states, {b, h, s, a.qk_nope_head_dim}, n + ".q_pass");
  const VarId q_rot = split(q_states, {b, h, s, a.qk_rope_head_dim}, n + ".q_rot");
  t.drop(q_states);
  const VarId compressed = ops.linear(n + ".kv_a_proj_with_mqa", x, p.kv_a_w);
  const VarId k_latent = split(compressed, {b, s, a.kv_lora_rank}, n + ".k_pass_latent");
  const VarId k_rot = split(compressed, {b, 1, s, a.qk_rope_head_dim}, n + ".k_rot");
  t.drop(compressed);
  const VarId kn = norm(c, n + ".kv_a_layernorm", k_latent, p.kv_a_norm_w, kNoVar);
  t.drop(k_latent);
  const VarId kv = ops.linear(n + ".kv_b_proj", kn, p.kv_b_w);
  t.drop(kn);
  const VarId kv_heads = t.view(kv, {b, h, s, a.qk_nope_head_dim + a.v_head_dim}, n + ".kv_heads");
  t.drop(kv);
  const VarId k_pass = split(kv_heads, {b, h, s, a.qk_nope_head_dim}, n + ".k_pass");
  const VarId value = split(kv_heads, {b, h, s, a.v_head_dim}, n + ".value");
  t.drop(kv_heads);
  const VarId q_roped = hf_rope(c, n + ".rope_q", q_rot);
  const VarId k_roped = hf_rope(c, n + ".rope_k", k_rot);
  t.drop({q_rot, k_rot});
  const VarId k_expanded = t.view(k_roped, {b, h, s, a.qk_rope_head_dim}, n + ".k_rot_expand");
  t.drop(k_roped);
  const VarId query = ops.cat_last(n + ".query_cat", q_pass, q_roped);
  const VarId key = ops.cat_last(n + ".key_cat", k_pass, k_expanded);
  t.drop({q_pass, q_roped, k_pass, k_expanded});
  return {query, key, value};
}

VarId attention(EmitContext& c, int layer, VarId x) {
  TorchOps& ops = c.ops;
  EagerTape& t = ops.tape();
  const LayerParams& p = c.params.layers[static_cast<std::size_t>(layer)];
  const std::int64_t b = c.options.batch, s = c.options.seq, hd = c.model.head_dim;
  const std::string n = layer_name(layer, "attn");
  const Shape q_heads{b, c.model.n_heads, s, hd};
  const Shape kv_heads{b, c.model.n_kv_heads, s, hd};
  VarId q, k, v;
  const bool gpt2 = c.model.family == ModelFamily::kGpt2;
  if (p.qkv_w != kNoVar) {
    // GPT-2: c_attn(hidden).split(); _split_heads: view + permute. Phi-3: qkv = self.qkv_proj(hidden);
    // query_states = qkv[..., :query_pos], ...: slices, then view + transpose.
    const VarId xin = prepare_module_input(c, n, x);
    const VarId qkv = column_parallel_linear(c, n + (gpt2 ? ".c_attn" : ".qkv_proj"), xin, p.qkv_w, p.qkv_b);
    drop_module_input(c, xin, x);
    q = t.view(qkv, q_heads, n + ".q_heads");
    k = t.view(qkv, kv_heads, n + ".k_heads");
    v = t.view(qkv, kv_heads, n + ".v_heads");
    t.drop(qkv);
  } else if (c.model.mla.kv_lora_rank > 0) {
    std::tie(q, k, v) = mla_qkv(c, n, p, x);
  } else {  // q_proj(hidden).view(hidden_shape).transpose(1, 2)
    const VarId xin = prepare_module_input(c, n, x);
    VarId qx = column_parallel_linear(c, n + ".q_proj", xin, p.q_w, p.q_b);
    VarId kx = column_parallel_linear(c, n + ".k_proj", xin, p.k_w, p.k_b);
    const VarId vx = column_parallel_linear(c, n + ".v_proj", xin, p.v_w, p.v_b);
    drop_module_input(c, xin, x);
    if (c.model.qk_norm == ModelConfig::QkNorm::kWholeProjection) {  // OLMo-2: q_norm(q_proj(x))
      const VarId qn = norm(c, n + ".q_norm", qx, p.q_norm_w, kNoVar);
      const VarId kn = norm(c, n + ".k_norm", kx, p.k_norm_w, kNoVar);
      t.drop({qx, kx});
      qx = qn;
      kx = kn;
    }
    q = t.view(qx, q_heads, n + ".q_heads");
    k = t.view(kx, kv_heads, n + ".k_heads");
    v = t.view(vx, kv_heads, n + ".v_heads");
    t.drop({qx, kx, vx});
    if (c.model.qk_norm == ModelConfig::QkNorm::kPerHead) {  // Qwen3 / Gemma3: q_norm(q.view(...)) per head
      const VarId qn = norm(c, n + ".q_norm", q, p.q_norm_w, kNoVar);
      const VarId kn = norm(c, n + ".k_norm", k, p.k_norm_w, kNoVar);
      t.drop({q, k});
      q = qn;
      k = kn;
    }
  }
  if (c.rope_cos != kNoVar && c.model.mla.kv_lora_rank == 0) {
    const VarId qr = hf_rope(c, n + ".rope_q", q);
    const VarId kr = hf_rope(c, n + ".rope_k", k);
    t.drop({q, k});
    q = qr;
    k = kr;
  }
  if (c.kv_cache != nullptr) {  // key_states, value_states = past_key_values.update(...)
    std::tie(k, v) = c.kv_cache->update(c, layer, k, v);
  }
  if (c.model.mla.kv_lora_rank > 0 && c.model.mla.v_head_dim < hd) {
    // value_states = F.pad(value_states, [0, qk_head_dim - v_head_dim]) (DeepSeek-V3's flash path; taken for
    // every attention kernel here, see README)
    Shape pad = t.shape(v);
    pad.back() = hd - c.model.mla.v_head_dim;
    const VarId zeros = t.constant(n + ".v_pad_zeros", "zeros", pad, t.dtype(v));
    const VarId padded = ops.cat_last(n + ".v_pad", v, zeros);
    t.drop({zeros, v});
    v = padded;
  }
  const VarId mask = c.model.family == ModelFamily::kGpt2 ? c.buffers.causal_mask : c.additive_mask;
  VarId core;
  EagerLocals locals;
  if (c.options.checkpointing == Checkpointing::kSelective) {
    // the mask is an input of the checkpointed function, so the replay in backward finds it alive
    std::vector<VarId> inputs{q, k, v};
    if (mask != kNoVar) {
      inputs.push_back(mask);
    }
    core = t.checkpoint(n + ".core_attention", inputs, [&c, n](const std::vector<VarId>& in) {
      return core_attention(c, n, in[0], in[1], in[2], in.size() > 3 ? in[3] : kNoVar);
    });
  } else {
    core = core_attention(c, n, q, k, v, mask, &locals);
  }
  // transpose(1, 2).contiguous(), then a view to (b, s, heads * head_dim): a copy unless the kernel wrote
  // its output as (b, s, heads, head_dim) already (attention_kernel_writes_bshd)
  const VarId transposed = t.view(core, {b, s, c.model.q_dim()}, n + ".transpose");
  VarId merged = ops.contiguous(n + ".merge_heads", transposed, attention_kernel_writes_bshd(c.attention));
  t.drop({transposed, core});
  if (c.model.mla.kv_lora_rank > 0 && c.model.mla.v_head_dim < hd) {
    // attn_output[:, :, :, :v_head_dim].reshape(batch, seq, -1): a copy of the strided slice
    const VarId sliced = t.view(merged, {b, s, c.model.n_heads * c.model.mla.v_head_dim}, n + ".v_slice",
                                GradRule{GradRule::Kind::kAlloc});
    const VarId copied = ops.contiguous(n + ".v_slice_reshape", sliced);
    t.drop({sliced, merged});
    merged = copied;
  }
  for (VarId v_local : {locals.key, locals.value}) {  // eager_attention_forward returns
    if (v_local != kNoVar) {
      t.drop(v_local);
    }
  }
  const std::string o_name = n + (gpt2 ? ".c_proj" : ".o_proj");
  const VarId out = row_parallel_linear(c, o_name, merged, p.o_w, p.o_b);
  t.drop({merged, q, k, v});  // the module returns: its locals go
  if (locals.probs != kNoVar) {
    t.drop(locals.probs);
  }
  return maybe_dropout(c, n + ".resid_dropout", out, DropoutSite::kResidual);
}

// ACT2FN[hidden_act] of a gated MLP: nn.SiLU or GELUTanh / GELUActivation (F.gelu): one saved input each.
VarId gated_act(EmitContext& c, const std::string& n, VarId gate) {
  return c.model.gated_activation == GatedActivation::kSilu ? c.ops.silu(n + ".silu", gate)
                                                            : c.ops.gelu(n + ".gelu", gate);
}

// NewGELUActivation.forward: 0.5 * input * (1.0 + torch.tanh(sqrt(2 / pi) * (input + 0.044715 *
// torch.pow(input, 3.0)))), evaluated as Python does (the left factor 0.5 * input first).
VarId hf_gelu_new(EmitContext& c, const std::string& n, VarId x) {
  TorchOps& ops = c.ops;
  EagerTape& t = ops.tape();
  const VarId half = ops.scale(n + ".half", x);
  const VarId cube = ops.pow3(n + ".pow", x);
  const VarId scaled = ops.scale(n + ".mul_coeff", cube);
  t.drop(cube);
  const VarId inner = ops.add(n + ".add_input", x, scaled);
  t.drop(scaled);
  const VarId arg = ops.scale(n + ".mul_sqrt_2_over_pi", inner);
  t.drop(inner);
  const VarId th = ops.tanh(n + ".tanh", arg);
  t.drop(arg);
  const VarId one_plus = ops.add_scalar(n + ".add_one", th);
  t.drop(th);
  const VarId out = ops.mul(n + ".mul", half, one_plus);
  t.drop({half, one_plus});
  return out;
}

VarId mlp(EmitContext& c, int layer, VarId x) {
  TorchOps& ops = c.ops;
  EagerTape& t = ops.tape();
  const LayerParams& p = c.params.layers[static_cast<std::size_t>(layer)];
  const std::string n = layer_name(layer, "mlp");
  if (c.model.mlp == MlpKind::kGelu) {  // c_proj(act(c_fc(x))), dropout
    const VarId xin = prepare_module_input(c, n, x);
    const VarId f = column_parallel_linear(c, n + ".c_fc", xin, p.fc1_w, p.fc1_b);
    drop_module_input(c, xin, x);
    const VarId g = c.model.gelu == GeluKind::kNew && !megatron(c) ? hf_gelu_new(c, n + ".gelu_new", f)
                                                                   : ops.gelu(n + ".gelu", f);
    t.drop(f);
    const VarId y = row_parallel_linear(c, n + ".c_proj", g, p.fc2_w, p.fc2_b);
    t.drop(g);
    return maybe_dropout(c, n + ".dropout", y, DropoutSite::kResidual);
  }
  if (c.model.moe.sparse(layer)) {
    switch (c.options.moe.impl) {
      case MoeImpl::kMegatron:
        return megatron_moe(c, layer, x);
      case MoeImpl::kTorchtitan:
        return torchtitan_moe(c, layer, x);
      case MoeImpl::kTransformers:
        break;
    }
    return hf_sparse_moe(c, layer, x);
  }
  if (p.gate_up_w != kNoVar) {
    // Phi3MLP: up_states = self.gate_up_proj(hidden_states); gate, up_states = up_states.chunk(2, dim=-1);
    // up_states = up_states * self.activation_fn(gate); return self.down_proj(up_states)
    const VarId xin = prepare_module_input(c, n, x);
    const VarId fused = column_parallel_linear(c, n + ".gate_up_proj", xin, p.gate_up_w);
    drop_module_input(c, xin, x);
    Shape half = t.shape(fused);
    half.back() /= 2;
    const VarId gate = t.view(fused, half, n + ".gate", GradRule{GradRule::Kind::kAlloc});
    const VarId up = t.view(fused, half, n + ".up", GradRule{GradRule::Kind::kAlloc});
    t.drop(fused);
    const VarId act = gated_act(c, n, gate);
    const VarId prod = ops.mul(n + ".mul", up, act);
    t.drop({act, up, gate});
    const VarId y = row_parallel_linear(c, n + ".down_proj", prod, p.down_w);
    t.drop(prod);
    return maybe_dropout(c, n + ".resid_mlp_dropout", y, DropoutSite::kResidual);
  }
  return row_parallel_output(c, n + ".down_proj", hf_gated_mlp(c, n, x, {p.gate_w, p.up_w, p.down_w}));
}

}  // namespace

namespace {

// torchtitan's TP plan with float8 (parallelize_llama.py apply_tp): tensorwise runs torchao's float8 tensor
// parallelism (float8_linear.h float8_module_input), rowwise regular TP (DTensor's bf16 all-gathers,
// sequence_all_gather) around Float8Linears that cast their local inputs.
bool float8_tensor_parallel(const EmitContext& c) {
  return c.options.float8.recipe == Float8Recipe::kTensorwise && c.options.tensor_parallel > 1;
}
bool float8_regular_tensor_parallel(const EmitContext& c) {
  return c.options.float8.recipe == Float8Recipe::kRowwise && c.options.tensor_parallel > 1;
}

}  // namespace

VarId prepare_module_input(EmitContext& c, const std::string& module, VarId x) {
  if (float8_tensor_parallel(c)) {
    return float8_module_input(c.ops, module + ".prepare_float8_input", x,
                               c.options.sequence_parallel ? c.options.tensor_parallel : 1);
  }
  if (float8_regular_tensor_parallel(c) && c.options.sequence_parallel) {  // PrepareModuleInput
    return sequence_all_gather(c.ops.tape(), module + ".prepare_input", x, c.options.tensor_parallel);
  }
  return x;
}

VarId float8_rowwise_parallel_input(EmitContext& c, const std::string& name, VarId x) {
  return float8_tensor_parallel(c) ? float8_module_input(c.ops, name, x, 1) : x;
}

void drop_module_input(EmitContext& c, VarId prepared, VarId x) {
  if (prepared != x) {
    c.ops.tape().drop(prepared);
  }
}

VarId column_parallel_linear(EmitContext& c, const std::string& name, VarId x, VarId w, VarId bias) {
  // a float8 module input is already gathered (DTensor's redistribute, not Megatron's buffer); the output
  // layer, which float8 leaves in bf16, gathers its input as before
  const bool prepared = (float8_tensor_parallel(c) && c.ops.tape().dtype(x) == DType::kUInt8) ||
                        (float8_regular_tensor_parallel(c) && c.ops.tape().shape(x).size() == 3 &&
                         c.ops.tape().shape(x)[1] == c.options.seq);
  if (!c.options.sequence_parallel || prepared) {
    return c.ops.linear(name, x, w, bias);
  }
  const int tp = c.options.tensor_parallel;
  const VarId result = c.ops.sequence_parallel_linear(name, x, w, bias, tp);
  const LoraAdapter* adapter = c.ops.plain_lora_adapter(w);
  if (adapter == nullptr) {
    return result;
  }
  // PEFT's LoraParallelLinear on a ColumnParallelLinear under sequence parallelism (peft/tuners/lora/
  // tp_layer.py, megatron_config.sequence_parallel): lora_A, an nn.Linear, runs on the rank's slice x;
  // lora_B, a ColumnParallelLinear of the same config, gathers lora_A's [b, s/tp, r] output along the
  // sequence and gives [b, s, out/tp], added to the base's result.
  TorchOps& ops = c.ops;
  return peft_lora_forward(ops, name, x, result, *adapter, ops.lora_options(), ops.lora_training(), {},
                           [&ops, tp](const std::string& n, VarId in, VarId wb) {
                             return ops.sequence_parallel_linear(n, in, wb, kNoVar, tp);
                           });
}

VarId row_parallel_linear(EmitContext& c, const std::string& name, VarId x, VarId w, VarId bias) {
  const VarId in = float8_rowwise_parallel_input(c, name, x);
  const LoraAdapter* adapter = c.options.sequence_parallel ? c.ops.plain_lora_adapter(w) : nullptr;
  if (adapter == nullptr) {
    const VarId y = c.ops.linear(name, in, w, bias);
    drop_module_input(c, in, x);
    return row_parallel_output(c, name, y);
  }
  // PEFT's LoraParallelLinear on a RowParallelLinear under sequence parallelism: the base's output is
  // reduce-scattered to the rank's slice first; lora_A, a RowParallelLinear of the same config, multiplies
  // the rank's input columns and reduce-scatters its partial [b, s, r] to [b, s/tp, r]; lora_B, an nn.Linear,
  // gives [b, s/tp, out], added to the slice.
  TorchOps& ops = c.ops;
  const VarId result = row_parallel_output(c, name, ops.base_linear(name, in, w, bias));
  const int tp = c.options.tensor_parallel;
  const VarId y = peft_lora_forward(ops, name, in, result, *adapter, ops.lora_options(), ops.lora_training(),
                                    [&ops, tp](const std::string& n, VarId input, VarId wa) {
                                      const VarId partial = ops.linear(n, input, wa);
                                      const VarId slice =
                                          ops.reduce_scatter_sequence(n + ".reduce_scatter", partial, tp);
                                      ops.tape().drop(partial);
                                      return slice;
                                    });
  drop_module_input(c, in, x);
  return y;
}

VarId row_parallel_output(EmitContext& c, const std::string& name, VarId y) {
  if (!c.options.sequence_parallel) {
    return y;
  }
  const VarId shard = c.ops.reduce_scatter_sequence(name + ".reduce_scatter", y, c.options.tensor_parallel);
  c.ops.tape().drop(y);
  return shard;
}

// down_proj(act_fn(gate_proj(x)) * up_proj(x)); gate_proj and up_proj are column-parallel (the experts of
// a sparse MoE block never run sequence-parallel: validate() refuses it).
VarId hf_gated_mlp(EmitContext& c, const std::string& n, VarId x, const LayerParams::Expert& w) {
  TorchOps& ops = c.ops;
  EagerTape& t = ops.tape();
  const VarId xin = prepare_module_input(c, n, x);
  const VarId gate = column_parallel_linear(c, n + ".gate_proj", xin, w.gate_w);
  const VarId act = gated_act(c, n, gate);
  t.drop(gate);
  const VarId up = column_parallel_linear(c, n + ".up_proj", xin, w.up_w);
  drop_module_input(c, xin, x);
  const VarId prod = ops.mul(n + ".mul", act, up);
  t.drop({act, up});
  const VarId prod_in = float8_rowwise_parallel_input(c, n + ".down_proj", prod);
  const VarId y = ops.linear(n + ".down_proj", prod_in, w.down_w);
  drop_module_input(c, prod_in, prod);
  t.drop(prod);
  return y;
}

namespace {

// _update_causal_mask / _prepare_4d_causal_attention_mask_with_cache_position: a (s, target) mask in the
// embeddings' dtype -- torch.full(min), torch.triu (the Llama template; the Mistral one skips it), then
// `causal_mask *= torch.arange(target) > cache_position.reshape(-1, 1)` in place. Returns the (s, target)
// mask.
VarId causal_mask_template(EmitContext& c, std::int64_t s, std::int64_t target, DType dtype) {
  EagerTape& t = c.ops.tape();
  VarId full = t.constant("causal_mask.full", "full", {s, target}, dtype);
  if (!c.model.mistral_mask) {
    const VarId upper = t.constant("causal_mask.triu", "triu", {s, target}, dtype);
    t.drop(full);
    full = upper;
  }
  const VarId positions = t.constant("causal_mask.arange", "arange", {target}, DType::kInt64);
  const VarId later = t.constant("causal_mask.gt", "gt", {s, target}, DType::kBool);
  t.drop({positions, later});
  return full;
}

// Training (no padding, no cache): the template expanded over the batch (a view) and sliced to [..., :s] by
// each layer; target is s + 1 (no 2D mask given), s for Gemma-2. Under generate(), which passes the
// (b, past + s) attention_mask, target is the mask's length (the static cache's max_cache_len) and the 2D
// mask is merged in: causal_mask.clone() of the expanded (b, 1, s, target) view, padding_mask = causal_mask
// + attention_mask[:, None, None, :], the (padding_mask == 0) bools, and masked_fill's result copied back in
// place. Returns the (b, 1, s, key length) mask.
VarId causal_mask(EmitContext& c, DType dtype) {
  EagerTape& t = c.ops.tape();
  const std::int64_t b = c.options.batch, s = c.options.seq;
  if (c.kv_cache == nullptr) {
    const VarId full = causal_mask_template(c, s, c.model.always_builds_mask ? s : s + 1, dtype);
    const VarId sliced = t.view(full, {b, 1, s, s}, "causal_mask.expand[..., :s]");
    t.drop(full);
    return sliced;
  }
  const std::int64_t target = c.kv_cache->key_length(s);
  const VarId full = causal_mask_template(c, s, target, dtype);
  const Shape batched{b, 1, s, target};
  const VarId cloned = t.constant("causal_mask.clone", "clone", batched, dtype);
  t.drop(full);
  const VarId padding = t.constant("causal_mask.padding_mask", "add", batched, dtype);
  const VarId is_zero = t.constant("causal_mask.padding_mask_eq", "eq", batched, DType::kBool);
  const VarId filled = t.constant("causal_mask.masked_fill", "masked_fill", batched, dtype);
  t.drop({padding, is_zero, filled});
  if (c.attention == AttentionKind::kEager || c.attention == AttentionKind::kFlashAttention2) {
    return cloned;
  }
  // attn_implementation "sdpa" with a 2D attention_mask on CUDA: AttentionMaskConverter._unmask_unattended,
  // causal_mask.mul(~torch.all(causal_mask == min_dtype, dim=-1, keepdim=True)) rebinds the mask
  const Shape rows{b, 1, s, 1};
  const VarId is_min = t.constant("causal_mask.unmask_eq", "eq", batched, DType::kBool);
  const VarId all = t.constant("causal_mask.unmask_all", "all", rows, DType::kBool);
  t.drop(is_min);
  const VarId attend = t.constant("causal_mask.unmask_not", "bitwise_not", rows, DType::kBool);
  t.drop(all);
  const VarId unmasked = t.constant("causal_mask.unmask_unattended", "mul", batched, dtype);
  t.drop({attend, cloned});
  return unmasked;
}

// Gemma2DecoderLayer.forward, sliding-window layers (even ones) without flash_attention_2:
// torch.tril(torch.ones_like(attention_mask, dtype=torch.bool), diagonal=-sliding_window) materialises the
// expanded (b, 1, s, s) mask as bools, twice; torch.where(...) makes the layer's own mask of the dtype.
VarId gemma2_sliding_mask(EmitContext& c, int layer, VarId mask) {
  EagerTape& t = c.ops.tape();
  const Shape full{c.options.batch, 1, c.options.seq, c.options.seq};
  const VarId ones = t.constant(layer_name(layer, "sliding_mask.ones_like"), "ones_like", full, DType::kBool);
  const VarId lower = t.constant(layer_name(layer, "sliding_mask.tril"), "tril", full, DType::kBool);
  t.drop(ones);
  // where(cond, python scalar, mask): the scalar becomes a 0-dim device tensor for the call
  const VarId scalar =
      t.constant(layer_name(layer, "sliding_mask.scalar"), "scalar_tensor", {}, DType::kFloat32);
  const VarId out = t.constant(layer_name(layer, "sliding_mask.where"), "where", full, t.dtype(mask));
  t.drop({scalar, lower});
  return out;
}

// Gemma2DecoderLayer.forward: residual = hidden_states; input_layernorm; self_attn; post_attention_layernorm;
// residual + hidden_states; residual = hidden_states; pre_feedforward_layernorm; mlp;
// post_feedforward_layernorm; residual + hidden_states. `hidden_states` is rebound at every step.
VarId gemma2_layer(EmitContext& c, int layer, VarId x) {
  EagerTape& t = c.ops.tape();
  const LayerParams& p = c.params.layers[static_cast<std::size_t>(layer)];
  const VarId model_mask = c.additive_mask;
  if (layer % 2 == 0 && model_mask != kNoVar && c.model.model_type == "gemma2") {  // its own mask
    c.additive_mask = gemma2_sliding_mask(c, layer, model_mask);
  }
  const VarId h = norm(c, layer_name(layer, "input_layernorm"), x, p.norm1_w, kNoVar);
  const VarId a = attention(c, layer, h);
  t.drop(h);
  if (c.additive_mask != model_mask) {
    t.drop(c.additive_mask);
    c.additive_mask = model_mask;
  }
  const VarId an = norm(c, layer_name(layer, "post_attention_layernorm"), a, p.norm2_w, kNoVar);
  t.drop(a);
  const VarId x1 = c.ops.add(layer_name(layer, "residual_attn"), x, an);
  t.drop(an);
  const VarId h2 = norm(c, layer_name(layer, "pre_feedforward_layernorm"), x1, p.norm3_w, kNoVar);
  const VarId m = mlp(c, layer, h2);
  t.drop(h2);
  const VarId mn = norm(c, layer_name(layer, "post_feedforward_layernorm"), m, p.norm4_w, kNoVar);
  t.drop(m);
  const VarId x2 = c.ops.add(layer_name(layer, "residual_mlp"), x1, mn);
  t.drop({mn, x1});
  return x2;
}

// GraniteDecoderLayer: hidden_states = residual + hidden_states * self.residual_multiplier (a product of
// its own unless the multiplier is 1). Takes over the caller's reference to `x`.
VarId granite_residual_scale(EmitContext& c, const std::string& n, VarId x) {
  if (c.model.residual_multiplier == 1.0) {
    return x;
  }
  const VarId y = c.ops.scale(n, x);
  c.ops.tape().drop(x);
  return y;
}

// Olmo2DecoderLayer.forward: residual = hidden_states; self_attn; post_attention_layernorm; residual +
// hidden_states; residual = hidden_states; mlp; post_feedforward_layernorm; residual + hidden_states.
VarId olmo2_layer(EmitContext& c, int layer, VarId x) {
  EagerTape& t = c.ops.tape();
  const LayerParams& p = c.params.layers[static_cast<std::size_t>(layer)];
  const VarId a = attention(c, layer, x);
  const VarId an = norm(c, layer_name(layer, "post_attention_layernorm"), a, p.norm2_w, kNoVar);
  t.drop(a);
  const VarId x1 = c.ops.add(layer_name(layer, "residual_attn"), x, an);
  t.drop(an);
  const VarId m = mlp(c, layer, x1);
  const VarId mn = norm(c, layer_name(layer, "post_feedforward_layernorm"), m, p.norm4_w, kNoVar);
  t.drop(m);
  const VarId x2 = c.ops.add(layer_name(layer, "residual_mlp"), x1, mn);
  t.drop({mn, x1});
  return x2;
}

// PhiDecoderLayer.forward: residual = hidden_states; hidden_states = input_layernorm(hidden_states);
// attn_outputs = resid_dropout(self_attn(hidden_states)); feed_forward_hidden_states =
// resid_dropout(mlp(hidden_states)); hidden_states = attn_outputs + feed_forward_hidden_states + residual.
// FalconDecoderLayer (parallel_attn): ln_attn / ln_mlp (or one input_layernorm for both), attention, MLP,
// mlp_output += attention_output (taken out of place here), residual + mlp_output.
VarId parallel_layer(EmitContext& c, int layer, VarId x) {
  EagerTape& t = c.ops.tape();
  const LayerParams& p = c.params.layers[static_cast<std::size_t>(layer)];
  const bool two = c.model.parallel_two_norms;
  const VarId h = norm(c, layer_name(layer, two ? "ln_attn" : "input_layernorm"), x, p.norm1_w, p.norm1_b);
  VarId h_mlp = h;
  if (two) {
    h_mlp = norm(c, layer_name(layer, "ln_mlp"), x, p.norm2_w, p.norm2_b);
  } else {
    t.hold(h_mlp);
  }
  const VarId a = attention(c, layer, h);
  const VarId m = mlp(c, layer, h_mlp);
  t.drop({h, h_mlp});
  const VarId sum = c.ops.add(layer_name(layer, "attn_plus_mlp"), a, m);
  t.drop({a, m});
  const VarId out = c.ops.add(layer_name(layer, "residual"), sum, x);
  t.drop(sum);
  return out;
}

}  // namespace

namespace {

// LlamaModel.forward (and its descendants) before the layers: cache_position / position_ids, the causal
// mask from the embeddings' dtype, the rotary cos / sin of (1, s, head_dim) in that dtype for every layer.
// GPT-2's layers need none of these (its causal mask is a buffer).
void torch_modules_forward_locals(EmitContext& c, DType dtype) {
  EagerTape& t = c.ops.tape();
  const std::int64_t s = c.options.seq;
  // Qwen2-VL's M-RoPE: get_rope_index's (3, batch, seq) position ids (temporal, height, width)
  const VarId positions = c.model.vision.mrope ? t.constant("position_ids", "get_rope_index",
                                                            {3, c.options.batch, s}, DType::kInt64)
                                               : t.constant("position_ids", "arange", {1, s}, DType::kInt64);
  c.forward_locals.push_back(positions);
  if (c.model.family == ModelFamily::kGpt2) {
    return;
  }
  // a static cache's unwritten positions, or a left-padded batch's padding (attention_mask has zeros)
  const bool cache_mask = c.kv_cache != nullptr && (c.kv_cache->needs_mask() || left_padded(c.options));
  if (c.attention == AttentionKind::kEager ||
      ((c.model.always_builds_mask || cache_mask) && c.attention != AttentionKind::kFlashAttention2)) {
    c.additive_mask = causal_mask(c, dtype);
    c.forward_locals.push_back(c.additive_mask);
  }
  // DeepSeek-V3 rotates qk_rope_head_dim of each head; Phi's partial rotary factor is not modelled (README)
  const std::int64_t rotary = c.model.mla.kv_lora_rank > 0 ? c.model.mla.qk_rope_head_dim : c.model.head_dim;
  c.rope_cos = t.constant("rotary_emb.cos", "cos", {1, 1, s, rotary}, dtype);
  c.rope_sin = t.constant("rotary_emb.sin", "sin", {1, 1, s, rotary}, dtype);
  c.forward_locals.push_back(c.rope_cos);
  c.forward_locals.push_back(c.rope_sin);
}

// Then Gemma's hidden_states * normalizer (a 0-dim CPU tensor: no device memory besides the product).
VarId torch_modules_embeddings(EmitContext& c, VarId ids) {
  TorchOps& ops = c.ops;
  EagerTape& t = ops.tape();
  const std::int64_t s = c.options.seq;
  const bool gpt2 = c.model.family == ModelFamily::kGpt2;
  const std::string embed_name = gpt2 ? "transformer.wte" : "model.embed_tokens";
  VarId tok = kNoVar;
  if (c.params.trainable_tokens.empty()) {
    tok = ops.embedding(embed_name, c.params.embed, ids);
  } else {  // TrainableTokensLayer: F.embedding(x, W.index_copy(...)) (peft_trainable_tokens.h)
    const VarId merged = trainable_tokens_weight(ops, embed_name, c.params.embed, c.params.trainable_tokens);
    tok = ops.embedding(embed_name, merged, ids);
    t.drop(merged);
  }
  const bool kbit = c.options.bnb.format != BnbFormat::kNone && c.options.bnb.prepare_kbit_training;
  const bool reentrant = c.options.checkpoint.impl == CheckpointImpl::kReentrant &&
                         (c.options.checkpointing == Checkpointing::kFull ||
                          c.options.checkpointing == Checkpointing::kSelectiveOp);
  if ((kbit || reentrant) && t.grad_enabled() &&
      !t.requires_grad(tok)) {  // a trained embedding's output has it
    // model.enable_input_require_grads(): a forward hook on the input embeddings calls
    // output.requires_grad_(True), so that the first reentrant checkpoint has an input that requires grad
    // (CheckpointFunction's output requires grad only then). prepare_model_for_kbit_training calls it;
    // transformers' gradient_checkpointing_enable() calls it for PEFT models, and Answer.AI's fsdp_qlora
    // train.py calls it under --reentrant_checkpointing True.
    t.requires_grad_(tok);
  }
  if (gpt2) {
    const VarId positions = t.constant("position_ids", "arange", {1, s}, DType::kInt64);
    c.forward_locals.push_back(positions);
    const VarId pos = ops.embedding("transformer.wpe", c.params.pos, positions);
    const VarId x = ops.add("transformer.embeddings_add", tok, pos);
    t.drop({tok, pos});
    return maybe_dropout(c, "transformer.drop", x, DropoutSite::kEmbeddings);
  }
  torch_modules_forward_locals(c, t.dtype(tok));
  VarId x = tok;
  if (c.model.scale_embeddings || c.model.embedding_multiplier != 1.0) {  // Gemma; Granite
    x = ops.scale("model.embed_scale", tok);
    t.drop(tok);
  }
  return maybe_dropout(c, "model.embed_dropout", x, DropoutSite::kEmbeddings);
}

VarId torch_modules_layer(EmitContext& c, int layer, VarId x) {
  EagerTape& t = c.ops.tape();
  const LayerParams& p = c.params.layers[static_cast<std::size_t>(layer)];
  const bool gpt2 = c.model.family == ModelFamily::kGpt2;
  // residual = hidden_states; hidden_states = norm(hidden_states); ...; hidden_states = residual + ...
  // Variable lifetimes as HF writes the two layers: GPT2Block binds the attention's result to `attn_output`
  // (alive to the end) and keeps ln_1's / ln_2's output in `hidden_states` until the residual sum rebinds it;
  // LlamaDecoderLayer rebinds `hidden_states` at every step.
  if (c.model.sandwich_norms) {
    return gemma2_layer(c, layer, x);
  }
  if (c.model.post_norms_only) {
    return olmo2_layer(c, layer, x);
  }
  if (c.model.parallel_block) {
    return parallel_layer(c, layer, x);
  }
  const VarId h = norm(c, layer_name(layer, gpt2 ? "ln_1" : "input_layernorm"), x, p.norm1_w, p.norm1_b);
  VarId a = attention(c, layer, h);
  if (!gpt2) {
    t.drop(h);
  }
  a = granite_residual_scale(c, layer_name(layer, "attn_residual_multiplier"), a);
  const VarId x1 = c.ops.add(layer_name(layer, "residual_attn"), a, x);
  if (gpt2) {
    t.drop(h);
  } else {
    t.drop(a);
  }
  const VarId h2 =
      norm(c, layer_name(layer, gpt2 ? "ln_2" : "post_attention_layernorm"), x1, p.norm2_w, p.norm2_b);
  VarId m = mlp(c, layer, h2);
  if (!gpt2) {
    t.drop(h2);
  }
  m = granite_residual_scale(c, layer_name(layer, "mlp_residual_multiplier"), m);
  const VarId x2 = c.ops.add(layer_name(layer, "residual_mlp"), x1, m);
  if (gpt2) {
    t.drop({h2, a});
  }
  t.drop({m, x1});
  return x2;
}

bool chunked_loss(const EmitContext& c) {
  return c.options.loss == LossKind::kChunkedCrossEntropy &&
         (c.kv_cache == nullptr || !c.kv_cache->keeps_last_logits()) && !c.options.inference &&
         !c.options.forward_only;
}

// torchtune's TransformerDecoder with set_num_output_chunks(k): [self.output(chunk) for chunk in
// h.chunk(k, dim=1)], a list of logits chunks (kept in c.logit_chunks). Returns the first chunk with one
// more reference, for the training loop's `logits` variable.
VarId torchtune_chunked_output(EmitContext& c, VarId h) {
  EagerTape& t = c.ops.tape();
  const std::int64_t s = c.options.seq;
  const std::int64_t k = std::min<std::int64_t>(c.options.loss_chunks, s);
  const std::int64_t per = (s + k - 1) / k;  // torch.chunk: ceil(s / k) positions, the last one shorter
  const Shape hs = t.shape(h);
  for (std::int64_t start = 0; start < s; start += per) {
    Shape cs = hs;
    cs[1] = std::min(per, s - start);
    const std::string n = fmt::format("output.chunk{}", c.logit_chunks.size());
    const VarId hc = t.view(h, cs, n + ".hidden");
    VarId logits = column_parallel_linear(c, n, hc, c.params.head, c.params.head_b);
    t.drop(hc);
    if (c.model.final_logit_softcapping > 0.0) {
      const VarId capped = softcap(c, n + ".final_logit_softcapping", logits);
      t.drop(logits);
      logits = capped;
    }
    c.logit_chunks.push_back(logits);
  }
  t.drop(h);
  t.hold(c.logit_chunks.front());
  return c.logit_chunks.front();
}

// torchtune's CEWithChunkedOutputLoss: the sum over chunks of F.cross_entropy(logits_chunk.float(),
// labels_chunk, reduction="sum") (compute_cross_entropy; compiled on its own with --compile: compile_loss),
// divided by the number of tokens. The recipe then deletes the list.
VarId torchtune_chunked_loss(EmitContext& c, VarId targets) {
  TorchOps& ops = c.ops;
  EagerTape& t = ops.tape();
  VarId total = kNoVar;
  for (std::size_t i = 0; i < c.logit_chunks.size(); ++i) {
    const std::string n = fmt::format("loss.chunk{}", i);
    const VarId chunk = c.logit_chunks[i];
    const VarId labels =
        t.constant(n + ".labels", "view", {c.options.batch, t.shape(chunk)[1]}, t.dtype(targets));
    const auto compute_cross_entropy = [&]() {  // F.cross_entropy(logits.float(), labels, reduction="sum")
      const VarId lf = ops.to(n + ".logits_float", chunk, DType::kFloat32);
      const VarId lsm = ops.log_softmax_last(n + ".cross_entropy.log_softmax", lf);
      const VarId out = ops.nll_loss(n + ".cross_entropy.nll_loss", lsm, labels);
      t.drop({lsm, lf});
      return out;
    };
    // torchtune's compile_loss: loss.compute_cross_entropy = torch.compile(loss.compute_cross_entropy), one
    // graph per chunk (the chunking and the sum stay eager)
    const VarId part =
        c.options.compile_loss && c.inductor != nullptr
            ? compiled_call(t, n + ".compiled_cross_entropy", compute_cross_entropy, *c.inductor)
            : compute_cross_entropy();
    t.drop(labels);
    if (total == kNoVar) {
      total = part;
    } else {
      const VarId sum = ops.add(n + ".total_loss", total, part);
      t.drop({total, part});
      total = sum;
    }
  }
  const VarId loss = ops.scale("loss.total_loss.div_num_tokens", total);
  t.drop(total);
  for (VarId logits : c.logit_chunks) {  // del logits (the training loop's reference goes with it too)
    t.drop(logits);
  }
  c.logit_chunks.clear();
  return loss;
}

VarId torch_modules_final(EmitContext& c, VarId x) {
  const bool gpt2 = c.model.family == ModelFamily::kGpt2;
  const VarId h = norm(c, gpt2 ? "transformer.ln_f" : "model.norm", x, c.params.final_w, c.params.final_b);
  c.ops.tape().drop(x);  // hidden_states = self.norm(hidden_states) rebinds it before lm_head runs
  if (chunked_loss(c)) {
    return torchtune_chunked_output(c, h);
  }
  VarId head_in = h;
  if (c.kv_cache != nullptr && c.kv_cache->keeps_last_logits()) {  // generate's logits_to_keep=1
    head_in = c.ops.tape().view(h, {c.options.batch, 1, c.model.d_model}, "hidden_states[:, -1:, :]");
    c.ops.tape().drop(h);
  }
  VarId head = c.params.head;
  const bool tied_tokens = !c.params.trainable_tokens.empty() && head == c.params.embed;
  if (tied_tokens) {  // the tied lm_head's TrainableTokensLayer: F.linear(x, W.index_copy(...))
    head = trainable_tokens_weight(c.ops, "lm_head", head, c.params.trainable_tokens);
  }
  VarId logits = column_parallel_linear(c, "lm_head", head_in, head, c.params.head_b);
  c.ops.tape().drop(head_in);
  if (tied_tokens) {
    c.ops.tape().drop(head);
  }
  if (c.model.logits_scaling != 1.0) {  // GraniteForCausalLM: logits = logits / self.config.logits_scaling
    const VarId scaled = c.ops.scale("logits_scaling", logits);
    c.ops.tape().drop(logits);
    logits = scaled;
  }
  if (c.model.final_logit_softcapping > 0.0) {  // Gemma2ForCausalLM: logits / cap; tanh; * cap
    const VarId capped = softcap(c, "final_logit_softcapping", logits);
    c.ops.tape().drop(logits);
    logits = capped;
  }
  if (c.options.logits_dtype == LogitsDtype::kFp32) {
    // torchtitan before PR 642: `output = self.output(h).float()`; transformers < 4.45: `logits =
    // logits.float()`. The _to_copy saves nothing, so the projection's output goes with its local.
    const VarId upcast = c.ops.to("logits.float", logits, DType::kFloat32);
    c.ops.tape().drop(logits);
    logits = upcast;
  }
  return logits;
}

// transformers before huggingface/transformers#35646 (merged 2025-01, after 4.48.0), in ForCausalLMLoss
// (4.46-4.48) and before that in each *ForCausalLM.forward, after `logits = logits.float()` (`lf`):
//   shift_logits = logits[..., :-1, :].contiguous()   # an fp32 copy of b x (s - 1) x V
//   shift_labels = labels[..., 1:].contiguous()
//   loss = cross_entropy(shift_logits.view(-1, V), shift_labels.view(-1))
// The slice saves nothing, so the copy and `lf` die when the loss returns (log_softmax keeps its own output);
// in backward the copy's gradient passes through the clone and slice_backward makes a zero-filled b x s x V
// gradient of `lf` and copies it in.
VarId shift_logits_cross_entropy(EmitContext& c, VarId lf, VarId targets) {
  TorchOps& ops = c.ops;
  EagerTape& t = ops.tape();
  Shape shifted_shape = t.shape(lf);
  SIM_ASSERT(shifted_shape.size() >= 2);         // [..., s, V]
  shifted_shape[shifted_shape.size() - 2] -= 1;  // the sequence dimension; --seq >= 2 (request_args)
  const VarId sliced = t.view(lf, shifted_shape, "loss.shift_logits.slice", GradRule{GradRule::Kind::kAlloc});
  const VarId shift_logits = ops.contiguous("loss.shift_logits", sliced);
  Shape label_shape = t.shape(targets);
  label_shape.back() -= 1;
  const VarId shift_labels = t.constant("loss.shift_labels", "clone", label_shape, t.dtype(targets));
  const VarId lsm = ops.log_softmax_last("loss.cross_entropy.log_softmax", shift_logits);
  const VarId loss = ops.nll_loss("loss.cross_entropy.nll_loss", lsm, shift_labels);
  t.drop({lsm, shift_labels, shift_logits, sliced, lf});
  return loss;
}

VarId torch_modules_loss(EmitContext& c, VarId logits, VarId targets) {
  if (chunked_loss(c)) {
    return torchtune_chunked_loss(c, targets);
  }
  if (c.options.loss == LossKind::kTorchtitanChunkedCrossEntropy) {
    return torchtitan_chunked_loss(c, logits, targets);
  }
  TorchOps& ops = c.ops;
  EagerTape& t = ops.tape();
  if (c.options.loss_parallel) {
    // torchtitan's loss_fn: F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1)) with the labels
    // the data loader shifted, inside loss_parallel() (loss_parallel.h).
    const VarId lf = ops.to("loss.logits_float", logits, DType::kFloat32);
    const VarId loss = loss_parallel_cross_entropy(ops, "loss.cross_entropy", lf, targets);
    t.drop(lf);
    return loss;
  }
  const std::int64_t b = c.options.batch, s = c.options.seq;
  if (c.options.compile_loss && c.inductor != nullptr) {
    // torchtitan's build_cross_entropy_loss: torch.compile(cross_entropy_loss), one graph of
    // F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1)) over the data loader's shifted labels
    // (torchtitan/components/loss.py); labels.flatten(0, 1) is a view of the batch's labels.
    return compiled_call(
        t, "compiled_loss",
        [&]() {
          const VarId lf = ops.to("loss.logits_float", logits, DType::kFloat32);
          const VarId lsm = ops.log_softmax_last("loss.cross_entropy.log_softmax", lf);
          const VarId out = ops.nll_loss("loss.cross_entropy.nll_loss", lsm, targets);
          t.drop({lsm, lf});
          return out;
        },
        *c.inductor);
  }
  const VarId lf = ops.to("loss.logits_float", logits, DType::kFloat32);  // logits = logits.float()
  if (c.options.loss == LossKind::kCrossEntropyShiftLogits) {
    return shift_logits_cross_entropy(c, lf, targets);
  }
  // labels = F.pad(labels, (0, 1), value=-100); shift_labels = labels[..., 1:].contiguous()
  const VarId padded = t.constant("loss.labels_pad", "constant_pad_nd", {b, s + 1}, t.dtype(targets));
  const VarId shifted = t.constant("loss.shift_labels", "clone", {b, s}, t.dtype(targets));
  const VarId lsm = ops.log_softmax_last("loss.cross_entropy.log_softmax", lf);  // F.cross_entropy
  const VarId loss = ops.nll_loss("loss.cross_entropy.nll_loss", lsm, shifted);
  t.drop({lsm, shifted, lf, padded});  // `labels` (padded) is a local of the loss function until it returns
  return loss;
}

class TorchModules final : public LayerCode {
 public:
  std::string_view name() const override { return kTorchModulesCode; }
  void parameter_shapes(const ModelConfig& m, std::vector<ParameterShape>& out) const override {
    transformers_parameter_shapes(m, out);
  }
  // GPT-2 registers a (1, 1, n_positions, n_positions) bool tril buffer per attention module for its eager
  // path; we keep one of the step's sequence length, shared (the per-module copies are model state older than
  // any trace).
  ModelBuffers create_buffers(EagerTape& tape, const ModelConfig& m,
                              const TrainingOptions& o) const override {
    ModelBuffers b;
    if (m.family == ModelFamily::kGpt2 && o.attention == AttentionKind::kEager) {
      const std::int64_t positions = o.seq + o.generate_tokens;  // generate() reads past the prompt
      b.causal_mask = tape.input("causal_mask (buffer)", {1, 1, positions, positions}, DType::kBool);
    }
    return b;
  }
  VarId embeddings(EmitContext& c, VarId ids) const override { return torch_modules_embeddings(c, ids); }
  bool forward_locals(EmitContext& c, DType hidden_dtype) const override {
    torch_modules_forward_locals(c, hidden_dtype);
    return true;
  }
  VarId layer(EmitContext& c, int l, VarId x) const override { return torch_modules_layer(c, l, x); }
  VarId final_norm_and_head(EmitContext& c, VarId x) const override { return torch_modules_final(c, x); }
  VarId loss(EmitContext& c, VarId logits, VarId targets) const override {
    return torch_modules_loss(c, logits, targets);
  }
  bool follows_transformers() const override { return true; }
};

}  // namespace

const LayerCode& torch_modules_code() {
  static const TorchModules code;
  return code;
}

}  // namespace vramsim
