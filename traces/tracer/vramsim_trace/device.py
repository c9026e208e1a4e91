"""The simulated CUDA device as the program sees it: `cuda` tensors are meta tensors that say they are on
cuda:0, torch.cuda answers as a machine with one GPU would, and modules, parameters, optimizers and autograd
report what they do to the tracer.

Everything is patched in install() and put back in uninstall(); nothing outside the traced run is touched."""

from __future__ import annotations

import contextlib
import functools
import types
from typing import Any, Callable, List, Tuple

import torch
from torch.overrides import TorchFunctionMode

from .dispatch import UnsupportedOperator, _user_line
from .storage import _REAL_DEVICE, TensorBase, real_device_type

CUDA0 = torch.device("cuda", 0)
CPU = torch.device("cpu")


def _is_cuda_device(d) -> bool:
    if d is None:
        return False
    if isinstance(d, int):
        return True  # a bare index means a CUDA device
    if isinstance(d, str):
        return d.split(":")[0] == "cuda"
    if isinstance(d, torch.device):
        return d.type == "cuda"
    return False


class Patcher:
    """Sets attributes and remembers the old values, to put them back in reverse order."""

    def __init__(self) -> None:
        self._saved: List[Tuple[Any, str, Any, bool]] = []

    def set(self, obj, name: str, value) -> None:
        had = name in vars(obj) if isinstance(obj, type) else hasattr(obj, name)
        self._saved.append((obj, name, getattr(obj, name, None) if had else None, had))
        setattr(obj, name, value)

    def restore(self) -> None:
        for obj, name, old, had in reversed(self._saved):
            if had:
                setattr(obj, name, old)
            else:
                try:
                    delattr(obj, name)
                except AttributeError:
                    pass
        self._saved.clear()


class FakeStream:
    """torch.cuda.Stream on the simulated device: an id the tracer tags allocations with."""

    _next_id = 1

    def __init__(self, device=None, priority: int = 0, **_kw) -> None:
        self.stream_id = FakeStream._next_id
        FakeStream._next_id += 1
        self.device = CUDA0
        self.priority = priority

    def wait_stream(self, _other) -> None:
        pass

    def wait_event(self, _event) -> None:
        pass

    def record_event(self, event=None):
        return event if event is not None else FakeEvent()

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True

    def __eq__(self, other) -> bool:
        return isinstance(other, FakeStream) and other.stream_id == self.stream_id

    def __hash__(self) -> int:
        return hash(self.stream_id)


class FakeEvent:
    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
        pass

    def record(self, stream=None) -> None:
        pass

    def wait(self, stream=None) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True

    def elapsed_time(self, _end) -> float:
        return 0.0


class DeviceFunctionMode(TorchFunctionMode):
    """Torch-function level: maps device="cuda" to the meta device, moves tensors between host and device,
    applies CUDA autocast, and routes scaled_dot_product_attention to the emulated backends."""

    def __init__(self, session) -> None:
        super().__init__()
        self.s = session
        T = torch.Tensor
        self.special = {
            T.to: self._to_method,
            T.cuda: self._cuda_method,
            T.cpu: self._cpu_method,
            T.pin_memory: lambda args, kwargs: args[0],
            T.is_pinned: lambda args, kwargs: False,
            T.record_stream: self._record_stream,
            T.get_device: lambda args, kwargs: 0 if self.s.tracer.storages.is_device_tensor(args[0]) else -1,
            T.numpy: self._needs_values("Tensor.numpy()"),
            T.repeat_interleave: self._repeat_interleave,
            T.backward: self._backward,
            torch.nn.functional.dropout: self._dropout,
            torch.dropout: self._dropout,
            torch.repeat_interleave: self._repeat_interleave,
            T.tolist: self._needs_values("Tensor.tolist()"),
        }

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        handler = self.special.get(func)
        if handler is not None:
            return handler(args, kwargs)
        if self.s.autocast.enabled():
            args, kwargs = self.s.autocast.apply(getattr(func, "__name__", ""), args, kwargs)
        device = kwargs.get("device")
        if device is not None and _is_cuda_device(device):
            kwargs = dict(kwargs)
            kwargs["device"] = "meta"
            with self.s.tracer.device_scope():  # empty_like(host_tensor, device="cuda") is on the device
                return func(*args, **kwargs)
        if device is not None and torch.device(device).type == "meta":
            with self.s.tracer.host_scope():  # the program's own meta tensors (`with torch.device("meta")`)
                return func(*args, **kwargs)
        return func(*args, **kwargs)

    # ---- host <-> device ------------------------------------------------------------------------------

    def _to_method(self, args, kwargs):
        src = args[0]
        kwargs = dict(kwargs)
        copy = bool(kwargs.pop("copy", False))  # _parse_to does not take it
        rest = list(args[1:])
        if len(rest) >= 4 and isinstance(rest[3], bool):  # to(device, dtype, non_blocking, copy)
            copy = copy or rest.pop(3)
        device, dtype, non_blocking, memory_format = torch._C._nn._parse_to(*rest, **kwargs)
        return self.s.move(src, device, dtype, copy, memory_format)

    def _cuda_method(self, args, kwargs):
        return self.s.move(args[0], CUDA0, None, False, None)

    def _cpu_method(self, args, kwargs):
        return self.s.move(args[0], CPU, None, False, None)

    def _record_stream(self, args, kwargs):
        self.s.record_stream_calls += 1
        return None

    def _backward(self, args, kwargs):
        """Tensor.backward with this mode active again: a handler runs with its mode popped, and backward runs
        program code (checkpoint recomputation, hooks) that must still see the simulated device and autocast."""
        names = ("gradient", "retain_graph", "create_graph", "inputs")
        call = dict(zip(names, args[1:]))
        call.update(kwargs)
        with self:
            return torch.autograd.backward(args[0], call.get("gradient"), call.get("retain_graph"),
                                           call.get("create_graph", False), inputs=call.get("inputs"))

    def _dropout(self, args, kwargs):
        """dropout in training on the GPU takes the fused kernel (Dropout.cpp, is_fused_kernel_acceptable:
        a CUDA input and 0 < p < 1): native_dropout, an output and a bool mask it keeps for backward. On the
        meta device PyTorch would take the composite path (a mask of the input's dtype and a multiply)."""
        call = dict(zip(("input", "p", "training", "inplace"), args))
        call.update(kwargs)
        if "train" in call:  # torch.dropout(input, p, train)
            call["training"] = call.pop("train")
        x, p = call["input"], float(call.get("p", 0.5))
        training, inplace = bool(call.get("training", True)), bool(call.get("inplace", False))
        if (training and 0.0 < p < 1.0 and not inplace and isinstance(x, torch.Tensor)
                and self.s.tracer.storages.is_device_tensor(x) and x.numel() > 0):
            return torch.native_dropout(x, p, True)[0]
        if training and 0.0 < p < 1.0:
            return torch.nn.functional.dropout(x, p, training, inplace)
        return x

    def _repeat_interleave(self, args, kwargs):
        """repeat_interleave with an int count: the meta kernel needs the (data) repeats tensor it builds, so
        the same output is made by expand + reshape (one allocation of the output's size, as on CUDA; the
        small int64 index CUDA builds is not modelled)."""
        t = args[0]
        repeats = args[1] if len(args) > 1 else kwargs.get("repeats")
        dim = args[2] if len(args) > 2 else kwargs.get("dim")
        if not isinstance(repeats, int) or real_device_type(t) != "meta":
            return TensorBase.repeat_interleave(*args, **kwargs)
        if dim is None:
            t, dim = t.reshape(-1), 0
        dim = dim % t.dim()
        shape = list(t.shape)
        expanded = t.unsqueeze(dim + 1).expand(*shape[:dim + 1], repeats, *shape[dim + 1:])
        shape[dim] *= repeats
        return expanded.reshape(shape)

    def _needs_values(self, what: str) -> Callable:
        def handler(args, kwargs):
            t = args[0]
            if real_device_type(t) == "meta":
                raise UnsupportedOperator(f"{what} needs the values of a tensor on the simulated GPU "
                                          f"(called from {_user_line()})")
            return getattr(TensorBase, what.split(".")[1].rstrip("()"))(t)

        return handler


def device_property(storages):
    def get(self):
        d = _REAL_DEVICE.__get__(self)
        if d.type != "meta" or storages.in_kernel:
            return d
        return CPU if not storages.is_device_tensor(self) else CUDA0

    return property(get)
