"""CUDA autocast, emulated for the simulated device (meta tensors carry no AutocastCUDA dispatch key).

The casting rules follow PyTorch's CUDA autocast lists (aten/src/ATen/autocast_mode.cpp):
  * lower precision (fp16/bf16): matmuls, linear, convolutions, baddbmm/addmm/bmm, einsum, SDPA;
  * fp32: pow, exp/log family, norms (layer_norm, group_norm), losses (nll_loss, cross_entropy's parts, mse,
    ...), logsumexp, ...;
  * fp32 through the op's dtype argument (softmax, log_softmax, sum, cumsum, prod, norm): no separate cast,
    the op computes and returns fp32;
  * promote to the widest input type: cat, stack, addcmul, addcdiv, index_put, scatter_add, dot, ...
Casts of fp32 leaf tensors that require grad (the parameters) to the lower-precision type are cached until the
outermost autocast region exits, as torch's autocast weight cache does.

The rules are applied where the program calls a torch function (TorchFunctionMode), not inside C++
composites: F.cross_entropy is cast as a whole to fp32, which allocates what autocast's log_softmax(dtype=fp32)
allocates inside it."""

from __future__ import annotations

from typing import List, Optional

import torch

LOWER = {
    "linear", "matmul", "__matmul__", "__rmatmul__", "mm", "bmm", "addmm", "addbmm", "baddbmm", "addmv",
    "mv", "addr", "einsum", "chain_matmul", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
    "conv_transpose2d", "conv_transpose3d", "prelu", "scaled_dot_product_attention", "_addmm_activation",
}
FP32 = {
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt",
    "sinh", "tan", "pow", "__pow__", "__rpow__", "softplus", "layer_norm", "group_norm", "frobenius_norm",
    "nuclear_norm", "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss", "nll_loss",
    "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss",
    "margin_ranking_loss", "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss",
    "multi_margin_loss", "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm", "logsumexp",
    "cross_entropy", "cross_entropy_loss", "rms_norm",
}
FP32_SET_DTYPE = {"softmax", "log_softmax", "sum", "cumsum", "cumprod", "prod"}
PROMOTE = {"addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "grid_sampler", "index_put",
           "scatter_add", "tensordot", "stack", "cat", "concat", "concatenate", "index_copy", "vdot"}


class _State:
    def __init__(self, enabled: bool, dtype: torch.dtype, cache_enabled: bool) -> None:
        self.enabled = enabled
        self.dtype = dtype
        self.cache_enabled = cache_enabled


class AutocastEmulation:
    """The autocast state stack of the simulated CUDA device and the casts it makes."""

    def __init__(self, tracer, is_device_tensor) -> None:
        self.tracer = tracer
        self.is_device_tensor = is_device_tensor
        self.stack: List[_State] = []
        self.cache = {}  # id(param) -> (param, cast)
        self.casts = 0

    @property
    def state(self) -> Optional[_State]:
        return self.stack[-1] if self.stack else None

    def enabled(self) -> bool:
        return bool(self.stack) and self.stack[-1].enabled

    def push(self, enabled: bool, dtype: Optional[torch.dtype], cache_enabled: Optional[bool]) -> None:
        outer = self.stack[-1] if self.stack else None
        if dtype is None:
            dtype = outer.dtype if outer else torch.float16
        if cache_enabled is None:
            cache_enabled = outer.cache_enabled if outer else True
        self.stack.append(_State(enabled, dtype, cache_enabled))

    def pop(self) -> None:
        self.stack.pop()
        if not any(s.enabled for s in self.stack):
            self.cache.clear()  # torch.clear_autocast_cache() when the outermost region exits

    # ---- casting ---------------------------------------------------------------------------------------

    def _eligible(self, t) -> bool:
        return (isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64
                and self.is_device_tensor(t))

    def _cast(self, t, dtype: torch.dtype, state: _State):
        if not self._eligible(t) or t.dtype == dtype:
            return t
        cacheable = (state.cache_enabled and dtype == state.dtype and t.dtype == torch.float32
                     and t.requires_grad and t.is_leaf and not t._is_view())
        if cacheable:
            hit = self.cache.get(id(t))
            if hit is not None and hit[0] is t:
                return hit[1]
        self.casts += 1
        with self.tracer.op_label("autocast/aten._to_copy"):
            out = t.to(dtype)
        if cacheable:
            self.cache[id(t)] = (t, out)
        return out

    def _map(self, args, kwargs, fn):
        def conv(a):
            if isinstance(a, (list, tuple)) and any(isinstance(x, torch.Tensor) for x in a):
                return type(a)(fn(x) for x in a)
            return fn(a)

        return tuple(conv(a) for a in args), {k: conv(v) for k, v in kwargs.items()}

    def apply(self, name: str, args, kwargs):
        """Returns (args, kwargs) with autocast's casts made, for the torch function called `name`."""
        state = self.state
        if state is None or not state.enabled:
            return args, kwargs
        if name in LOWER:
            return self._map(args, kwargs, lambda t: self._cast(t, state.dtype, state))
        if name in FP32:
            return self._map(args, kwargs, lambda t: self._cast(t, torch.float32, state))
        if name in FP32_SET_DTYPE:
            first = next((a for a in args if isinstance(a, torch.Tensor)), None)
            if self._eligible(first) and first.dtype != torch.float32 and kwargs.get("dtype") is None:
                if not (name in ("softmax", "log_softmax") and len(args) > 3):  # dtype given positionally
                    kwargs = dict(kwargs)
                    kwargs["dtype"] = torch.float32
            return args, kwargs
        if name in PROMOTE:
            flat = [a for a in args if isinstance(a, torch.Tensor)]
            for a in args:
                if isinstance(a, (list, tuple)):
                    flat += [x for x in a if isinstance(x, torch.Tensor)]
            dtypes = [t.dtype for t in flat if self._eligible(t)]
            if len(set(dtypes)) > 1:
                widest = torch.float32 if torch.float32 in dtypes else dtypes[0]
                return self._map(args, kwargs, lambda t: self._cast(t, widest, state))
        return args, kwargs
