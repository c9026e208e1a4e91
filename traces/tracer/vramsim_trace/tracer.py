"""The tracer: runs a program with CUDA simulated on the meta device and records, in program order, every
device storage it allocates and frees, tagged with operator, module path, layer, phase and category."""

from __future__ import annotations

import re
import weakref
from contextlib import contextmanager
from typing import Dict, Optional

import torch
import torch.utils._pytree as pytree

from .dispatch import CUBLAS_OPS
from .output import Allocation, TraceLog
from .phases import PhaseTracker, layer_of
from .storage import StorageTable, real_device_type, storage_key, storage_nbytes, storage_of


def cublas_workspace_bytes(compute_capability_major: int, env_config: Optional[str]) -> int:
    """The workspace PyTorch gives each cuBLAS handle (per thread) and stream, through the caching allocator
    (aten/src/ATen/cuda/CublasHandlePool.cpp, parseChosenWorkspaceSize): CUBLAS_WORKSPACE_CONFIG as the sum
    of SIZE KiB x COUNT over its ":SIZE:COUNT" pairs; without it ":4096:2:16:8" (8 MiB + 128 KiB), and
    32 MiB on compute capability 9.x-12.x (Hopper, Blackwell)."""
    default = 4096 * 8 * 1024 if compute_capability_major in (9, 10, 11, 12) else 4096 * 1024 * 2 + 16 * 1024 * 8
    if not env_config:
        return default
    pairs = re.findall(r":([0-9]+):([0-9]+)", env_config)
    if not pairs:
        return default  # PyTorch warns and keeps the default
    return sum(int(size) * 1024 * int(count) for size, count in pairs)


class Tracer:
    def __init__(self, workspace_bytes: int = 32 * 1024 * 1024) -> None:
        self.log = TraceLog()
        self.storages = StorageTable()
        self.phases = PhaseTracker(self.log)
        self.workspace_bytes = workspace_bytes
        self.sdpa_backends = {}  # backend -> calls
        self.made_up_values = 0  # Tensor.item() and friends answered with 0
        self.operators = 0
        self._next_index = 0
        self._host_scope = 0
        self._input_scope = 0
        self._device_scope = 0
        self._stream = 0
        self._label: Optional[str] = None  # op name for allocations made inside op_label()
        self._workspaces = set()  # (thread, stream) pairs that have their cuBLAS workspace
        # In creation order (a WeakSet's order would change from run to run, and with it the names of tied
        # parameters): id -> weak reference.
        self._modules: "Dict[int, weakref.ref]" = {}
        self._optimizers: "Dict[int, weakref.ref]" = {}

    def add_module(self, m: torch.nn.Module) -> None:
        self._modules[id(m)] = weakref.ref(m, lambda _r, k=id(m): self._modules.pop(k, None))

    def add_optimizer(self, opt) -> None:
        self._optimizers[id(opt)] = weakref.ref(opt, lambda _r, k=id(opt): self._optimizers.pop(k, None))

    @staticmethod
    def _alive(refs):
        return [o for o in (r() for r in list(refs.values())) if o is not None]

    # ---- scopes set by the device facade ------------------------------------------------------------------

    @contextmanager
    def _counter(self, attr: str):
        setattr(self, attr, getattr(self, attr) + 1)
        try:
            yield
        finally:
            setattr(self, attr, getattr(self, attr) - 1)

    def host_scope(self):
        """New meta storages made inside are host-side (parameters built on the CPU, copies to the host)."""
        return self._counter("_host_scope")

    def device_scope(self):
        """New meta storages made inside are on the device (copies from the host to the device)."""
        return self._counter("_device_scope")

    def input_scope(self):
        """Storages made inside are host-to-device copies of the program's data: category "input"."""
        return self._counter("_input_scope")

    @contextmanager
    def op_label(self, label: str):
        """Allocations made inside are tagged `label` instead of the aten operator (emulated kernels)."""
        outer, self._label = self._label, label
        try:
            yield
        finally:
            self._label = outer

    # ---- the operator hook -----------------------------------------------------------------------------

    def after_operator(self, op: str, base_name: str, args, out) -> None:
        self.operators += 1
        self.collect_frees()
        outputs = [t for t in pytree.tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        if not outputs:
            return
        any_device_input = any(
            isinstance(a, torch.Tensor) and self.storages.is_device_tensor(a) for a in pytree.tree_flatten(args)[0])
        any_meta_input = any(
            isinstance(a, torch.Tensor) and real_device_type(a) == "meta" for a in pytree.tree_flatten(args)[0])
        # Outputs of an operator that read only host-side meta tensors stay host-side (e.g. computing on
        # parameters before they move to the GPU).
        if self._device_scope > 0:
            host = False
        elif self._host_scope > 0:
            host = True
        else:
            host = any_meta_input and not any_device_input
        for t in outputs:
            if real_device_type(t) != "meta":
                continue
            s = storage_of(t)
            key = storage_key(s)
            if host or self.storages.is_host_key(key):
                if host and not self.storages.is_host_key(key) and self.storages.lookup(key) is None:
                    self.storages.mark_host(t)
                continue
            self._record_storage(s, key, op)
        if base_name in CUBLAS_OPS and any_device_input:
            self._cublas_workspace()

    def _record_storage(self, s, key: int, op: str) -> None:
        nbytes = storage_nbytes(s)
        known = self.storages.lookup(key)
        if known is not None:
            if known[2] == nbytes:
                return
            # resize_ of a live storage: the CUDA allocator hands out a new block and frees the old one.
            self.log.free(self.storages.remove(key))
        if nbytes == 0:
            return  # the caching allocator is not called for empty tensors
        a = self._new_allocation(nbytes, op)
        if self._input_scope > 0:
            a.promote("input")
        self.storages.add(s, a)
        self.log.alloc(a)

    def _new_allocation(self, nbytes: int, op: str) -> Allocation:
        path = self.phases.module_path
        op = self._label or op
        a = Allocation(index=self._next_index, size_bytes=nbytes, stream=self._stream,
                       op=f"{path}/{op}" if path else op, layer=layer_of(path),
                       phase=self.phases.current_phase)
        self._next_index += 1
        return a

    def _cublas_workspace(self) -> None:
        thread = "autograd" if self.phases.current_phase == "backward" else "main"
        key = (thread, self._stream)
        if key in self._workspaces or self.workspace_bytes <= 0:
            return
        self._workspaces.add(key)
        a = self._new_allocation(self.workspace_bytes, f"cublas_workspace.{thread}_thread")
        a.promote("workspace")
        self.log.alloc(a)  # held by the handle until the process ends: never freed

    def collect_frees(self) -> None:
        for a in self.storages.expired():
            self.log.free(a)

    # ---- categories ----------------------------------------------------------------------------------------

    def mark_saved(self, t: torch.Tensor) -> None:
        """Autograd saved `t` for backward (saved_tensors_hooks' pack hook)."""
        if real_device_type(t) == "meta":
            a = self.storages.live_allocation(t)
            if a is not None:
                a.promote("activation")

    def _promote(self, t, category: str, name: str = "") -> None:
        if isinstance(t, torch.Tensor) and real_device_type(t) == "meta":
            a = self.storages.live_allocation(t)
            if a is not None:
                a.promote(category)
                if name and a.category == category and not a.named:
                    a.op = f"{name}/{a.op}"  # "h.0.attn.c_attn.weight.grad/aten.mm"
                    a.named = True

    def scan_model_state(self) -> None:
        """Parameters, buffers and gradients of every module built so far, and every optimizer's state."""
        param_names = {}
        for m in self._alive(self._modules):
            prefix = self.phases.module_name(m)
            if prefix is None:
                continue  # not under the model that ran: named once it runs
            prefix = prefix + "." if prefix else ""
            for key, p in m._parameters.items():
                if p is not None:
                    param_names.setdefault(id(p), prefix + key)
                    self._promote(p, "parameter", param_names[id(p)])
                    if p.grad is not None:
                        self._promote(p.grad, "gradient", param_names[id(p)] + ".grad")
            for key, b in m._buffers.items():
                if b is not None:
                    self._promote(b, "parameter", prefix + key)
        for opt in self._alive(self._optimizers):
            for p, state in opt.state.items():
                base = param_names.get(id(p))
                if isinstance(state, dict):
                    for key, v in state.items():
                        self._promote(v, "optimizer_state", f"{base}.{key}" if base else "")
            for group in opt.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        base = param_names.get(id(p))
                        self._promote(p.grad, "gradient", f"{base}.grad" if base else "")

    def finish(self) -> None:
        self.collect_frees()
        self.scan_model_state()

    def live_device_bytes(self) -> int:
        return sum(a.size_bytes for a in self.storages.live_allocations())

    def set_stream(self, stream: int) -> int:
        old, self._stream = self._stream, stream
        return old
