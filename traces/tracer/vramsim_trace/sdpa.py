"""torch.nn.functional.scaled_dot_product_attention on the simulated GPU: the backend PyTorch's CUDA
dispatcher would pick, and what that backend allocates, saves for backward and frees.

Selection (aten/src/ATen/native/transformers/cuda/sdp_utils.cpp, in priority order; each only when enabled by
torch.backends.cuda.*_sdp_enabled() / sdpa_kernel):
  * flash (FlashAttention-2): fp16/bf16, no attn_mask, head_dim <= 256, equal q/k/v head dims, same number
    of heads in q and k/v, compute capability >= 8.0;
    (both fused kernels allocate their output as (batch, seq, heads, head_dim) and return it transposed, so
    the model's transpose(1, 2).contiguous() afterwards copies nothing)
    forward: out and logsumexp (batch, heads, seq_q) fp32, both saved with q, k, v;
    backward: dq, dk, dv, plus softmax_d (batch, heads, seq_q rounded up to 128) fp32 and the fp32 dq
    accumulator (batch, seq_q rounded to 128, heads, head_dim rounded to 32), freed when it returns;
  * memory-efficient (CUTLASS): fp32/fp16/bf16, attn_mask allowed, same number of heads;
    forward: out and logsumexp (batch, heads, seq_q rounded up to 32) fp32, saved with q, k, v (and mask);
    backward: dq, dk, dv, delta (batch, heads, seq_q) fp32 and, for 16-bit inputs, an fp32 dq accumulator
    (batch, seq_q, heads, head_dim), freed when it returns;
  * math: the composite (q @ k^T * scale, mask, softmax, dropout, @ v) run op by op under autograd.
Dropout in flash / memory-efficient regenerates its mask from the Philox state: nothing mask-sized is kept."""

from __future__ import annotations

import math
from typing import Optional

import torch

_ENABLED = {"flash": True, "efficient": True, "math": True}


def set_enabled(backends) -> None:
    for k in _ENABLED:
        _ENABLED[k] = k in backends


def _enabled(name: str) -> bool:
    if not _ENABLED[name]:
        return False
    probe = {"flash": "flash_sdp_enabled", "efficient": "mem_efficient_sdp_enabled", "math": "math_sdp_enabled"}
    fn = getattr(torch.backends.cuda, probe[name], None)
    return True if fn is None else bool(fn())


def _round_up(x: int, m: int) -> int:
    return (x + m - 1) // m * m


def choose_backend(q, k, v, attn_mask, compute_capability: int) -> str:
    same_heads = q.shape[-3] == k.shape[-3] == v.shape[-3] if q.dim() >= 3 else True
    if (_enabled("flash") and q.dtype in (torch.float16, torch.bfloat16) and attn_mask is None
            and q.shape[-1] <= 256 and q.shape[-1] == k.shape[-1] == v.shape[-1] and same_heads
            and compute_capability >= 8):
        return "flash"
    if _enabled("efficient") and q.dtype in (torch.float32, torch.float16, torch.bfloat16) and same_heads:
        return "efficient"
    return "math"


def _empty(shape, dtype, tracer):
    with tracer.device_scope():  # on the simulated GPU (a bare device="meta" is the program's own meta tensor)
        return torch.empty(tuple(shape), dtype=dtype, device="meta")


class _FusedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, attn_mask, backend, tracer):
        ctx.backend, ctx.tracer = backend, tracer
        ctx.has_mask = attn_mask is not None
        lse_seq = q.shape[-2] if backend == "flash" else _round_up(q.shape[-2], 32)
        with tracer.op_label(f"aten._scaled_dot_product_{'flash' if backend == 'flash' else 'efficient'}_attention"):
            if q.dim() >= 3:  # written as (..., seq, heads, head_dim) and returned transposed
                out = _empty(q.shape[:-3] + (q.shape[-2], q.shape[-3], v.shape[-1]), q.dtype, tracer)
                out = out.transpose(-3, -2)
            else:
                out = _empty(q.shape[:-1] + (v.shape[-1],), q.dtype, tracer)
            lse = _empty(q.shape[:-2] + (lse_seq,), torch.float32, tracer)
        if attn_mask is not None:
            ctx.save_for_backward(q, k, v, out, lse, attn_mask)
        else:
            ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v = ctx.saved_tensors[:3]
        tracer = ctx.tracer
        with tracer.op_label(f"aten._scaled_dot_product_{ctx.backend}_attention_backward"):
            dq = _empty(q.shape, q.dtype, tracer)
            dk = _empty(k.shape, k.dtype, tracer)
            dv = _empty(v.shape, v.dtype, tracer)
            batch_heads = tuple(q.shape[:-2])
            seq_q, head_dim = q.shape[-2], q.shape[-1]
            if ctx.backend == "flash":
                seq_r = _round_up(seq_q, 128)
                softmax_d = _empty(batch_heads + (seq_r,), torch.float32, tracer)
                dq_accum = _empty(batch_heads[:-1] + (seq_r, q.shape[-3], _round_up(head_dim, 32)), torch.float32,
                                  tracer)
                del softmax_d, dq_accum
            else:
                delta = _empty(batch_heads + (seq_q,), torch.float32, tracer)
                accum = _empty(q.shape, torch.float32, tracer) if q.dtype != torch.float32 else None
                del delta, accum
        return dq, dk, dv, None, None, None


def _math(tracer, q, k, v, attn_mask, dropout_p, is_causal, scale):
    if q.shape[-3] != k.shape[-3]:  # grouped-query attention: PyTorch's math path repeats k and v
        rep = q.shape[-3] // k.shape[-3]
        k = k.repeat_interleave(rep, dim=-3)
        v = v.repeat_interleave(rep, dim=-3)
    attn = torch.matmul(q, k.transpose(-2, -1)) * scale
    if is_causal:
        with tracer.device_scope():
            causal = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device="meta").tril()
        attn = attn.masked_fill(causal.logical_not(), float("-inf"))
    if attn_mask is not None:
        attn = attn.masked_fill(attn_mask.logical_not(), float("-inf")) if attn_mask.dtype == torch.bool \
            else attn + attn_mask
    attn = torch.softmax(attn, dim=-1)
    if dropout_p > 0.0:
        attn = torch.nn.functional.dropout(attn, p=dropout_p)
    return torch.matmul(attn, v)


def scaled_dot_product_attention(tracer, compute_capability: int, query, key, value, attn_mask=None,
                                 dropout_p: float = 0.0, is_causal: bool = False,
                                 scale: Optional[float] = None, enable_gqa: bool = False):
    scale = scale if scale is not None else 1.0 / math.sqrt(query.shape[-1])
    backend = choose_backend(query, key, value, attn_mask, compute_capability)
    tracer.sdpa_backends[backend] = tracer.sdpa_backends.get(backend, 0) + 1
    if backend == "math":
        return _math(tracer, query, key, value, attn_mask, dropout_p, is_causal, scale)
    return _FusedAttention.apply(query, key, value, attn_mask, backend, tracer)
