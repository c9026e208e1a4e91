"""Decoder-only Transformers in plain torch.nn, written the way vramsim's `torch-modules` code path models them
(sim/models/torch_modules_layers.cpp, sim/hub/hf_config.cpp): Hugging Face's GPT-2 (GPT2LMHeadModel) and
Llama (LlamaForCausalLM) with the model_types written after it that share its layer -- Gemma (GemmaRMSNorm in
fp32 with 1 + weight, GeGLU, embeddings scaled by sqrt(hidden_size), tied lm_head), Gemma-2 (four norms per
layer, soft-capped scores and logits, its 4D mask always built, a sliding-window mask of its own in even
layers) and Phi-3 (fused qkv_proj and gate_up_proj) -- in eager or SDPA attention as transformers 4.48-4.50
calls it, and HF's ForCausalLMLoss.

Where PyTorch offers several ways, this file takes the one the simulator documents:
  * GELU is F.gelu(approximate="tanh") (config "activation": "gelu_pytorch_tanh", the default here) or HF's
    NewGELUActivation written out in Python ("gelu_new", GPT2Config's default); GPT-2's Linear layers are HF's
    Conv1D (weight shaped (in, out), addmm);
  * GPT-2 eager attention reads ONE shared (1, 1, seq, seq) bool tril buffer (HF registers one per layer of
    n_positions^2; the simulator keeps one of the step's length: those buffers are model state older than any
    trace); scores are scaled by a Python float and masked with torch.where against a Python scalar, so no
    0-dim device tensors are made; softmax runs in the scores' dtype (fp32 under autocast), then
    .type(value.dtype);
  * Llama's rotary cos / sin of (1, 1, seq, head_dim) are made once per forward in the embeddings' dtype: here
    by one host-to-device copy each, i.e. exactly the two allocations the simulator counts (HF computes them
    with a few KiB of temporaries on the device);
  * the Llama family's eager path adds the mask of _update_causal_mask: (seq, seq + 1) in the embeddings'
    dtype (full, triu -- not in the Mistral template of Phi-3 --, an in-place product with a comparison),
    expanded over the batch and sliced; Gemma-2's is (seq, seq) and built for SDPA too; SDPA otherwise gets
    is_causal and no mask;
  * SDPA as integrations/sdpa_attention.py calls it: repeat_kv, then .contiguous() on query, key and value
    (copies of the RoPE outputs and of views), the backend PyTorch picks;
  * GPT-2 dropout at HF's four sites (embeddings, attention probabilities, after each block's two output
    projections) when the configuration's "dropout" is above 0 (default 0: none); parameters in HF registration
    order (the order of model.parameters());
  * Python variables as HF's modeling code names them (residual / hidden_states / attn_weights, rebound
    where HF rebinds them), so that every tensor dies when HF's would: e.g. GPT2Block keeps attn_output to its
    end, LlamaRMSNorm keeps `variance` until it returns, eager_attention_forward's repeated key/value states
    live until it returns. One simplification: the attention probabilities die when the attention module
    returns (newer transformers return them to the decoder layer, which drops them only at its end);
  * variable lifetimes as the simulator has them: the token embeddings die right after their first use, and the
    per-forward tensors (position ids, rotary tables, mask) live until the logits exist (HF's models keep
    inputs_embeds (GPT-2 also position_embeds) to the end of their forward, and LlamaModel drops its locals
    before the lm_head runs: small differences the simulator does not model, left out here on purpose).
Activation checkpointing "full" wraps each decoder layer in torch.utils.checkpoint (use_reentrant=False), with
the per-forward tensors (rotary tables, mask) passed as inputs as HF passes position_embeddings.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint


class Conv1D(nn.Module):
    """HF's GPT-2 linear layer: weight (in, out), y = addmm(bias, x2d, weight)."""

    def __init__(self, n_in: int, n_out: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out))
        self.bias = nn.Parameter(torch.empty(n_out))

    def forward(self, x):
        size_out = x.size()[:-1] + (self.weight.size(-1),)
        return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(size_out)


def sdpa_flash(q, k, v):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def sdpa_attention_forward(query, key, value, mask, n_rep: int, attention: str):
    """transformers 4.48-4.50 integrations/sdpa_attention.py: repeat_kv, then .contiguous() on all three
    (copies of RoPE outputs and of views), then SDPA, is_causal when no mask is given. "flash" forces the flash
    backend (the GPU recorder's sdpa_kernel); "sdpa" lets PyTorch pick."""
    key, value = repeat_kv(key, n_rep), repeat_kv(value, n_rep)
    query, key, value = query.contiguous(), key.contiguous(), value.contiguous()
    if attention == "flash" and mask is None:
        return sdpa_flash(query, key, value)
    return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, is_causal=mask is None)


# ---- GPT-2 ---------------------------------------------------------------------------------------------------

def dropout(x, p: float):
    """nn.Dropout in training mode; with p == 0 no dropout layer runs, as the grid's models have none."""
    return F.dropout(x, p, training=True) if p > 0 else x


def gelu_pytorch_tanh(x):
    return F.gelu(x, approximate="tanh")


def gelu_new(x):  # HF's NewGELUActivation.forward, as written there
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class GPT2Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d = cfg["d_model"]
        self.n_heads = cfg["n_heads"]
        self.attention = cfg["attention"]
        self.ln_1 = nn.LayerNorm(d)
        self.attn = nn.Module()
        self.attn.c_attn = Conv1D(d, 3 * d)
        self.attn.c_proj = Conv1D(d, d)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = nn.Module()
        self.mlp.c_fc = Conv1D(d, cfg["d_ff"])
        self.mlp.c_proj = Conv1D(cfg["d_ff"], d)
        self.act = gelu_new if cfg.get("activation", "gelu_pytorch_tanh") == "gelu_new" else gelu_pytorch_tanh
        self.p = cfg.get("dropout", 0.0)  # GPT-2's attn_pdrop = resid_pdrop; 0 = no dropout layer runs

    def _attention(self, hidden_states, causal_mask):  # GPT2Attention.forward with eager_attention_forward
        b, s, d = hidden_states.shape
        hd = d // self.n_heads
        query, key, value = self.attn.c_attn(hidden_states).split(d, dim=2)
        query, key, value = (t.view(b, s, self.n_heads, hd).transpose(1, 2) for t in (query, key, value))
        if self.attention != "math":
            attn_output = sdpa_attention_forward(query, key, value, None, 1, self.attention)
        else:
            attn_weights = torch.matmul(query, key.transpose(-1, -2)) * (1.0 / math.sqrt(hd))
            attn_weights = torch.where(causal_mask, attn_weights, torch.finfo(attn_weights.dtype).min)
            attn_weights = F.softmax(attn_weights, dim=-1).type(value.dtype)  # in the scores' dtype
            attn_weights = dropout(attn_weights, self.p)
            attn_output = torch.matmul(attn_weights, value)
        attn_output = attn_output.transpose(1, 2).contiguous().view(b, s, d)
        attn_output = self.attn.c_proj(attn_output)
        attn_output = dropout(attn_output, self.p)  # resid_dropout
        return attn_output  # attn_weights (the probabilities) live until here, after c_proj

    def forward(self, hidden_states, causal_mask=None):  # GPT2Block.forward
        residual = hidden_states
        hidden_states = self.ln_1(hidden_states)
        attn_output = self._attention(hidden_states, causal_mask)
        hidden_states = attn_output + residual
        residual = hidden_states
        hidden_states = self.ln_2(hidden_states)
        feed_forward_hidden_states = self.mlp.c_proj(self.act(self.mlp.c_fc(hidden_states)))
        feed_forward_hidden_states = dropout(feed_forward_hidden_states, self.p)  # GPT2MLP.dropout
        hidden_states = residual + feed_forward_hidden_states
        return hidden_states


class GPT2LMHeadModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.transformer = nn.Module()
        self.transformer.wte = nn.Embedding(cfg["vocab_size"], cfg["d_model"])
        self.transformer.wpe = nn.Embedding(cfg["max_positions"], cfg["d_model"])
        self.transformer.h = nn.ModuleList(GPT2Block(cfg) for _ in range(cfg["n_layers"]))
        self.transformer.ln_f = nn.LayerNorm(cfg["d_model"])
        if cfg["attention"] == "math":
            s = cfg["seq"]
            self.register_buffer("causal_mask", torch.empty(1, 1, s, s, dtype=torch.bool))

    def init_on_device(self):
        """Values for parameters made with to_empty(): in place, so nothing is allocated."""
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name.endswith("ln_f.weight"):
                    p.fill_(1.0)
                elif name.endswith(".bias"):
                    p.zero_()
                else:
                    p.normal_(0.0, 0.02)
            if hasattr(self, "causal_mask"):
                s = self.cfg["seq"]
                host = torch.tril(torch.ones(1, 1, s, s, dtype=torch.bool, device="cpu"))
                self.causal_mask.copy_(host)  # a host-to-device copy: nothing allocated on the device

    def forward(self, ids):
        s = ids.shape[1]
        tok = self.transformer.wte(ids)
        position_ids = torch.arange(s, device=ids.device).unsqueeze(0)
        x = tok + self.transformer.wpe(position_ids)
        del tok
        x = dropout(x, self.cfg.get("dropout", 0.0))  # GPT2Model.drop (embd_pdrop)
        mask = self.causal_mask[:, :, :s, :s] if hasattr(self, "causal_mask") else None
        for block in self.transformer.h:
            if self.cfg["checkpointing"] == "full":
                x = checkpoint(block, x, mask, use_reentrant=False)
            else:
                x = block(x, mask)
        h = self.transformer.ln_f(x)
        del x
        return F.linear(h, self.transformer.wte.weight)  # tied lm_head; position_ids lives until here


# ---- Llama ---------------------------------------------------------------------------------------------------

class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(d))
        self.eps = eps

    def forward(self, x):  # LlamaRMSNorm.forward, line by line
        in_dtype = x.dtype
        x = x.to(torch.float32)
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.eps)
        return self.weight * x.to(in_dtype)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin):
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def repeat_kv(x, n_rep: int):
    if n_rep == 1:
        return x
    b, kv, s, hd = x.shape
    return x[:, :, None, :, :].expand(b, kv, n_rep, s, hd).reshape(b, kv * n_rep, s, hd)


class GemmaRMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(d))
        self.eps = eps

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):  # GemmaRMSNorm.forward
        output = self._norm(x.float())
        output = output * (1.0 + self.weight.float())
        return output.type_as(x)


def softcap(x, cap: float):  # Gemma-2's soft-capping, as its modeling code writes it
    x = x / cap
    x = torch.tanh(x)
    return x * cap


class LlamaDecoderLayer(nn.Module):
    """LlamaDecoderLayer and the model_types written after it: "gemma" (GemmaRMSNorm, GeGLU), "gemma2" (+ four
    norms, soft-capped scores, a sliding-window mask of its own in even layers), "phi3" (fused qkv_proj and
    gate_up_proj; o_proj registered first)."""

    def __init__(self, cfg, layer_idx: int = 0):
        super().__init__()
        d, hd = cfg["d_model"], cfg["head_dim"]
        self.model_type = cfg.get("model_type", "llama")
        self.layer_idx = layer_idx
        self.n_heads, self.n_kv_heads, self.head_dim = cfg["n_heads"], cfg["n_kv_heads"], hd
        self.attention = cfg["attention"]
        self.self_attn = nn.Module()
        if self.model_type == "phi3":
            self.self_attn.o_proj = nn.Linear(self.n_heads * hd, d, bias=False)
            self.self_attn.qkv_proj = nn.Linear(d, (self.n_heads + 2 * self.n_kv_heads) * hd, bias=False)
        else:
            self.self_attn.q_proj = nn.Linear(d, self.n_heads * hd, bias=False)
            self.self_attn.k_proj = nn.Linear(d, self.n_kv_heads * hd, bias=False)
            self.self_attn.v_proj = nn.Linear(d, self.n_kv_heads * hd, bias=False)
            self.self_attn.o_proj = nn.Linear(self.n_heads * hd, d, bias=False)
        self.mlp = nn.Module()
        if self.model_type == "phi3":
            self.mlp.gate_up_proj = nn.Linear(d, 2 * cfg["d_ff"], bias=False)
        else:
            self.mlp.gate_proj = nn.Linear(d, cfg["d_ff"], bias=False)
            self.mlp.up_proj = nn.Linear(d, cfg["d_ff"], bias=False)
        self.mlp.down_proj = nn.Linear(cfg["d_ff"], d, bias=False)
        norm = GemmaRMSNorm if self.model_type in ("gemma", "gemma2") else RMSNorm
        self.input_layernorm = norm(d)
        self.post_attention_layernorm = norm(d)
        if self.model_type == "gemma2":
            self.pre_feedforward_layernorm = norm(d)
            self.post_feedforward_layernorm = norm(d)
        self.act = (lambda x: F.gelu(x, approximate="tanh")) if self.model_type in ("gemma", "gemma2") else F.silu

    def _attention(self, hidden_states, cos, sin, mask):  # LlamaAttention.forward
        b, s, _ = hidden_states.shape
        a = self.self_attn
        if self.model_type == "phi3":  # Phi3Attention: one projection, sliced
            qkv = a.qkv_proj(hidden_states)
            query_pos = self.n_heads * self.head_dim
            kv = self.n_kv_heads * self.head_dim
            query_states = qkv[..., :query_pos].view(b, s, -1, self.head_dim).transpose(1, 2)
            key_states = qkv[..., query_pos:query_pos + kv].view(b, s, -1, self.head_dim).transpose(1, 2)
            value_states = qkv[..., query_pos + kv:].view(b, s, -1, self.head_dim).transpose(1, 2)
            del qkv
        else:
            query_states = a.q_proj(hidden_states).view(b, s, -1, self.head_dim).transpose(1, 2)
            key_states = a.k_proj(hidden_states).view(b, s, -1, self.head_dim).transpose(1, 2)
            value_states = a.v_proj(hidden_states).view(b, s, -1, self.head_dim).transpose(1, 2)
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
        n_rep = self.n_heads // self.n_kv_heads
        if self.attention != "math":
            attn_output = sdpa_attention_forward(query_states, key_states, value_states, mask, n_rep, self.attention)
        else:  # eager_attention_forward(module, query, key, value, ...): the caller keeps key/value_states
            key_rep, value_rep = repeat_kv(key_states, n_rep), repeat_kv(value_states, n_rep)
            attn_weights = torch.matmul(query_states, key_rep.transpose(2, 3)) * (self.head_dim ** -0.5)
            if self.model_type == "gemma2":
                attn_weights = softcap(attn_weights, 50.0)
            attn_weights = attn_weights + mask
            attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query_states.dtype)
            attn_output = torch.matmul(attn_weights, value_rep)
            attn_output = attn_output.transpose(1, 2).contiguous()
            del key_rep, value_rep  # eager_attention_forward returns
        if self.attention != "math":
            attn_output = attn_output.transpose(1, 2).contiguous()
        attn_output = attn_output.reshape(b, s, -1)
        attn_output = a.o_proj(attn_output)
        return attn_output  # attn_weights live until here, after o_proj

    def _mlp(self, hidden_states):
        m = self.mlp
        if self.model_type == "phi3":  # Phi3MLP.forward
            up_states = m.gate_up_proj(hidden_states)
            gate, up_states = up_states.chunk(2, dim=-1)
            up_states = up_states * self.act(gate)
            return m.down_proj(up_states)
        return m.down_proj(self.act(m.gate_proj(hidden_states)) * m.up_proj(hidden_states))  # LlamaMLP.forward

    def forward(self, hidden_states, cos, sin, mask=None):  # LlamaDecoderLayer.forward
        if self.model_type == "gemma2":
            return self._gemma2_forward(hidden_states, cos, sin, mask)
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states = self._attention(hidden_states, cos, sin, mask)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self._mlp(hidden_states)
        hidden_states = residual + hidden_states
        return hidden_states

    def _gemma2_forward(self, hidden_states, cos, sin, attention_mask):  # Gemma2DecoderLayer.forward
        if self.layer_idx % 2 == 0 and attention_mask is not None:  # sliding-window layer (4.48)
            min_dtype = torch.finfo(attention_mask.dtype).min
            sliding_window_mask = torch.tril(torch.ones_like(attention_mask, dtype=torch.bool), diagonal=-4096)
            attention_mask = torch.where(sliding_window_mask, min_dtype, attention_mask)
            del sliding_window_mask
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states = self._attention(hidden_states, cos, sin, attention_mask)
        del attention_mask
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.pre_feedforward_layernorm(hidden_states)
        hidden_states = self._mlp(hidden_states)
        hidden_states = self.post_feedforward_layernorm(hidden_states)
        hidden_states = residual + hidden_states
        return hidden_states


class LlamaForCausalLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model_type = cfg.get("model_type", "llama")
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["d_model"])
        self.model.layers = nn.ModuleList(LlamaDecoderLayer(cfg, i) for i in range(cfg["n_layers"]))
        gemma = self.model_type in ("gemma", "gemma2")
        self.model.norm = GemmaRMSNorm(cfg["d_model"]) if gemma else RMSNorm(cfg["d_model"])
        if not gemma:  # Gemma ties lm_head to the embeddings
            self.lm_head = nn.Linear(cfg["d_model"], cfg["vocab_size"], bias=False)

    def init_on_device(self):
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("layernorm.weight") or name == "model.norm.weight":
                    p.fill_(1.0)
                else:
                    p.normal_(0.0, 0.02)
        # Rotary tables on the host (made here, outside the meta-device context of build_model); each forward
        # copies them to the device (see the module docstring).
        hd = self.cfg["head_dim"]
        inv_freq = 1.0 / (10000.0 ** (torch.arange(0, hd, 2, dtype=torch.float32, device="cpu") / hd))
        freqs = torch.outer(torch.arange(self.cfg["seq"], dtype=torch.float32, device="cpu"), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self._cos_host = emb.cos()[None, None]
        self._sin_host = emb.sin()[None, None]

    def _causal_mask(self, s, dtype, dev, cache_position):
        """_update_causal_mask in training without padding: (s, target) in the embeddings' dtype, expanded over
        the batch (a view) and sliced to [..., :s]; target is s + 1, s for Gemma-2. The Mistral template
        (Mistral, Mixtral, Qwen2-MoE, Phi-3) has no triu."""
        target = s if self.model_type == "gemma2" else s + 1
        causal_mask = torch.full((s, target), torch.finfo(dtype).min, dtype=dtype, device=dev)
        if self.model_type != "phi3":
            causal_mask = torch.triu(causal_mask, diagonal=1)
        causal_mask *= torch.arange(target, device=dev) > cache_position.reshape(-1, 1)
        return causal_mask[None, None, :, :s].expand(self.cfg["batch"], 1, -1, -1)

    def forward(self, ids):
        b, s = ids.shape
        dev = ids.device
        tok = self.model.embed_tokens(ids)
        cache_position = torch.arange(s, device=dev)
        position_ids = cache_position.unsqueeze(0)  # noqa: F841  (made as HF makes it)
        mask = None
        if self.cfg["attention"] == "math" or self.model_type == "gemma2":
            mask = self._causal_mask(s, tok.dtype, dev, cache_position)
        cos = self._cos_host[:, :, :s].to(dev, tok.dtype)
        sin = self._sin_host[:, :, :s].to(dev, tok.dtype)
        if self.model_type in ("gemma", "gemma2"):  # hidden_states * normalizer (a CPU 0-dim tensor in HF)
            x = tok * (self.cfg["d_model"] ** 0.5)
        else:
            x = tok
        del tok
        for layer in self.model.layers:
            if self.cfg["checkpointing"] == "full":
                x = checkpoint(layer, x, cos, sin, mask, use_reentrant=False)
            else:
                x = layer(x, cos, sin, mask)
        h = self.model.norm(x)
        del x
        head = self.model.embed_tokens.weight if self.model_type in ("gemma", "gemma2") else self.lm_head.weight
        logits = F.linear(h, head)
        if self.model_type == "gemma2":  # final_logit_softcapping
            del h
            logits = softcap(logits, 30.0)
        return logits  # the per-forward tensors (rotary tables, mask) live until here


def causal_lm_loss(logits, labels):
    """HF ForCausalLMLoss: fp32 logits, labels padded with -100 and shifted, mean cross entropy."""
    logits = logits.float()
    labels = F.pad(labels, (0, 1), value=-100)
    shift_labels = labels[..., 1:].contiguous()
    return F.cross_entropy(logits.view(-1, logits.size(-1)), shift_labels.view(-1), ignore_index=-100)


def build_model(cfg):
    """The model on the meta device; the caller moves it with to_empty() and calls init_on_device()."""
    with torch.device("meta"):
        return GPT2LMHeadModel(cfg) if cfg["family"] == "gpt2" else LlamaForCausalLM(cfg)
