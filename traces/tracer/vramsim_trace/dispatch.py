"""The operator-level view: every aten operator the program runs passes through TracingDispatchMode, which
records the device storages it creates and, before that, the ones that died since the last operator.

What the meta device lacks in PyTorch 1.13 is supplied here, with the memory behaviour of the CUDA kernel:
  * foreach operators (_foreach_add_, _foreach_mul, ...): run tensor by tensor; an out-of-place foreach
    allocates all its outputs, as the CUDA kernel does before it launches;
  * GradScaler's _amp_foreach_non_finite_check_and_unscale_ and _amp_update_scale_: in place, nothing to
    allocate;
  * Tensor.item() and friends (aten._local_scalar_dense): a meta tensor has no value; 0 is returned and the
    report says how many values were made up.
Any other operator without a meta kernel stops the trace with its name and the user's line that called it."""

from __future__ import annotations

import traceback


import torch
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

# Operators that take a cuBLAS handle (and with it the handle's workspace) on CUDA.
CUBLAS_OPS = {
    "mm", "addmm", "bmm", "baddbmm", "addbmm", "mv", "addmv", "dot", "vdot", "_addmm_activation",
    "addr", "_scaled_mm",
}


class UnsupportedOperator(RuntimeError):
    pass


def _op_name(func) -> str:
    # "aten.mm.default" -> "aten.mm"; "aten.add.Tensor" -> "aten.add"
    name = str(func)
    parts = name.split(".")
    return ".".join(parts[:2]) if len(parts) >= 2 else name


def _base_name(func) -> str:
    return func._schema.name.split("::")[-1] if hasattr(func, "_schema") else str(func)


def _foreach(func, args, kwargs):
    """Runs a foreach operator one tensor at a time with the per-tensor Tensor method of the same name."""
    name = _base_name(func)[len("_foreach_"):]
    lists = [a for a in args if isinstance(a, (list, tuple))]
    n = len(lists[0])
    method = getattr(torch.Tensor, name, None)
    if method is None and name == "norm":
        method = torch.linalg.vector_norm
    if method is None:
        raise UnsupportedOperator(f"{func} has no per-tensor equivalent")
    outs = []
    for i in range(n):
        a_i = [a[i] if isinstance(a, (list, tuple)) else a for a in args]
        k_i = {k: (v[i] if isinstance(v, (list, tuple)) else v) for k, v in kwargs.items()}
        if name.rstrip("_") in ("addcmul", "addcdiv") and len(a_i) > 3:  # (self, t1, t2, value)
            value = a_i.pop(3)
            k_i["value"] = value.item() if isinstance(value, torch.Tensor) else value
        if not isinstance(a_i[0], torch.Tensor):  # _foreach_pow(scalar, tensors)
            outs.append(torch.pow(a_i[0], a_i[1]))
        else:
            outs.append(method(*a_i, **k_i))
    return None if name.endswith("_") else outs


def _convolution_backward(args, kwargs):
    """convolution_backward (1.13 has no meta kernel): grad_input like input, grad_weight like weight and
    grad_bias of bias_sizes, each only where output_mask asks for it. cuDNN's workspace is not modelled."""
    grad_output, inp, weight, bias_sizes = args[0], args[1], args[2], args[3]
    mask = args[10] if len(args) > 10 else kwargs.get("output_mask", [True, True, True])
    grad_input = torch.empty_like(inp, memory_format=torch.contiguous_format) if mask[0] else None
    grad_weight = torch.empty_like(weight, memory_format=torch.contiguous_format) if mask[1] else None
    grad_bias = (torch.empty(tuple(bias_sizes), dtype=grad_output.dtype, device="meta")
                 if mask[2] and bias_sizes is not None else None)
    return grad_input, grad_weight, grad_bias


def _fallback(func, args, kwargs):
    name = _base_name(func)
    if name == "convolution_backward":
        return _convolution_backward(args, kwargs)
    if name.startswith("_foreach_"):
        return _foreach(func, args, kwargs)
    if name == "_amp_foreach_non_finite_check_and_unscale_":
        return None
    if name == "_amp_update_scale_":
        return args[0]
    if name == "_local_scalar_dense":
        return _made_up_scalar(args[0])
    return NotImplemented


def _made_up_scalar(t: torch.Tensor):
    if t.dtype == torch.bool:
        return False
    if t.is_floating_point():
        return 0.0
    if t.is_complex():
        return 0j
    return 0


def _alias_of_wrapped_number(t: torch.Tensor) -> torch.Tensor:
    """PyTorch 1.13's Python dispatch turns the result of detach() on a wrapped number (a Python scalar
    promoted to a 0-dim tensor, as autograd makes in where's backward) into a Python float; autograd needs a
    tensor. An alias of the same storage is what the CUDA run has."""
    out = torch.ops.aten.alias.default(t)
    return out if isinstance(out, torch.Tensor) else t.as_strided((), ())


def _first_sentence(e: BaseException) -> str:
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    return text.split(". This could be because")[0]


def _user_line() -> str:
    """The innermost frame of the traced program outside torch and this package, as "file:line"."""
    for frame in reversed(traceback.extract_stack()):
        f = frame.filename.replace("\\", "/")
        if "/torch/" in f or "/vramsim_trace/" in f or f.startswith("<"):
            continue
        return f"{frame.filename}:{frame.lineno}"
    return "<unknown line>"


class TracingDispatchMode(TorchDispatchMode):
    def __init__(self, tracer) -> None:
        super().__init__()
        self.tracer = tracer

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = _base_name(func)
        if name == "detach" and args and not isinstance(args[0], torch.Tensor):
            return torch.scalar_tensor(args[0])  # a wrapped number PyTorch 1.13 handed over as a Python scalar
        if name == "_local_scalar_dense" and args and self.tracer.storages.is_device_tensor(args[0]) \
                or name == "_local_scalar_dense" and args and args[0].device.type == "meta":
            self.tracer.made_up_values += 1
            return _made_up_scalar(args[0])
        storages = self.tracer.storages
        try:
            storages.in_kernel += 1  # PyTorch's Python meta kernels must see the meta device
            try:
                out = func(*args, **kwargs)
            finally:
                storages.in_kernel -= 1
        except (NotImplementedError, RuntimeError) as e:
            out = _fallback(func, args, kwargs)
            if out is NotImplemented:
                msg = _first_sentence(e)
                if isinstance(e, NotImplementedError):
                    raise UnsupportedOperator(
                        f"{_op_name(func)} has no meta implementation in PyTorch {torch.__version__} "
                        f"(called from {_user_line()}): {msg}") from None
                if "meta" in msg.lower() or "data-dependent" in msg.lower():
                    raise UnsupportedOperator(f"{_op_name(func)} cannot run without data ({msg}), "
                                              f"called from {_user_line()}") from None
                raise
        if not isinstance(out, torch.Tensor) and name == "detach":
            out = _alias_of_wrapped_number(args[0])
        self.tracer.after_operator(_op_name(func), name, args, out)
        return out
