"""A tracing session: installs the simulated device, runs, and hands back the trace log."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import types
import weakref
from contextlib import contextmanager
from typing import Optional

import torch
import torch.nn.functional as F

from . import sdpa
from .autocast import AutocastEmulation
from .device import CPU, CUDA0, DeviceFunctionMode, FakeEvent, FakeStream, Patcher, _is_cuda_device, device_property
from .dispatch import TracingDispatchMode
from .storage import TensorBase, real_device_type
from .tracer import Tracer, cublas_workspace_bytes


class GpuInfo:
    def __init__(self, name: str = "H100-80GB", compute_capability: float = 9.0,
                 total_memory_bytes: int = 85520809984) -> None:
        self.name = name
        self.major = int(compute_capability)
        self.minor = int(round((compute_capability - self.major) * 10))
        self.total_memory = int(total_memory_bytes)
        self.multi_processor_count = 132


class Session:
    def __init__(self, gpu: Optional[GpuInfo] = None, workspace_bytes: Optional[int] = None) -> None:
        self.gpu = gpu or GpuInfo()
        if workspace_bytes is None:
            workspace_bytes = cublas_workspace_bytes(self.gpu.major, os.environ.get("CUBLAS_WORKSPACE_CONFIG"))
        self.tracer = Tracer(workspace_bytes)
        self.autocast = AutocastEmulation(self.tracer, self.tracer.storages.is_device_tensor)
        self.record_stream_calls = 0
        self.empty_cache_calls = 0
        self.snapshot_calls = 0
        self._patcher = Patcher()
        self._modes = []
        self._hooks = []
        self._saved_hooks = None
        self._peak_live = 0

    # ---- moving tensors between host and the simulated device ----------------------------------------

    def move(self, src: torch.Tensor, device, dtype, copy: bool, memory_format):
        t = self.tracer
        kw = {}
        if memory_format is not None:
            kw["memory_format"] = memory_format
        dtype = dtype if dtype is not None else src.dtype
        on_device = t.storages.is_device_tensor(src)
        is_meta = real_device_type(src) == "meta"
        if device is not None and _is_cuda_device(device):
            if on_device:
                return TensorBase.to(src, dtype=dtype, copy=copy, **kw)
            scope = t.input_scope() if not isinstance(src, torch.nn.Parameter) else contextlib.nullcontext()
            with scope, t.device_scope():
                if is_meta:
                    return TensorBase.to(src, dtype=dtype, copy=True, **kw)
                return TensorBase.to(src, device="meta", dtype=dtype, **kw)
        if device is not None and device.type == "cpu":
            if on_device:
                with t.host_scope():
                    return TensorBase.to(src, dtype=dtype, copy=True, **kw)
            return TensorBase.to(src, dtype=dtype, copy=copy, **kw)
        return TensorBase.to(src, dtype=dtype, copy=copy, **kw)

    # ---- install / uninstall ------------------------------------------------------------------------------

    def start(self) -> None:
        self._install_cuda()
        self._install_tensor()
        self._install_modules()
        self._install_autograd()
        self._install_autocast()
        self._install_sdpa()
        dm = TracingDispatchMode(self.tracer)
        fm = DeviceFunctionMode(self)
        dm.__enter__()
        fm.__enter__()
        self._modes = [fm, dm]
        self._saved_hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda x: x)
        self._saved_hooks.__enter__()

    def stop(self) -> None:
        if self._saved_hooks is not None:
            self._saved_hooks.__exit__(None, None, None)
            self._saved_hooks = None
        for m in self._modes:
            m.__exit__(None, None, None)
        self._modes = []
        for h in self._hooks:
            h.remove()
        self._hooks = []
        self.tracer.finish()
        self._patcher.restore()

    def _pack(self, t):
        if isinstance(t, torch.Tensor) and real_device_type(t) == "meta":
            self.tracer.mark_saved(t)
            return t.detach()  # an alias: keeps the storage alive exactly as the saved variable would
        return t

    def _install_cuda(self) -> None:
        p, cuda, gpu, tr = self._patcher, torch.cuda, self.gpu, self.tracer
        props = types.SimpleNamespace(name=gpu.name, total_memory=gpu.total_memory, major=gpu.major,
                                      minor=gpu.minor, multi_processor_count=gpu.multi_processor_count,
                                      is_integrated=False, is_multi_gpu_board=False)
        current = FakeStream()
        current.stream_id = 0
        state = {"stream": current}

        @contextmanager
        def stream(s):
            if s is None:
                yield
                return
            old = state["stream"]
            state["stream"] = s
            prev = tr.set_stream(s.stream_id)
            try:
                yield
            finally:
                tr.set_stream(prev)
                state["stream"] = old

        def empty_cache():
            self.empty_cache_calls += 1
            tr.log.notes.append("torch.cuda.empty_cache() called: not replayed (the allocator model keeps its cache)")

        live = lambda *a, **k: tr.live_device_bytes()
        simple = {
            "is_available": lambda: True, "device_count": lambda: 1, "current_device": lambda: 0,
            "set_device": lambda d: None, "get_device_name": lambda d=None: gpu.name,
            "get_device_capability": lambda d=None: (gpu.major, gpu.minor),
            "get_device_properties": lambda d=None: props, "synchronize": lambda d=None: None,
            "empty_cache": empty_cache, "ipc_collect": lambda: None, "is_initialized": lambda: True,
            "_lazy_init": lambda: None, "init": lambda: None, "is_bf16_supported": lambda *a, **k: gpu.major >= 8,
            "memory_allocated": live, "memory_reserved": live, "max_memory_allocated": live,
            "max_memory_reserved": live, "reset_peak_memory_stats": lambda d=None: None,
            "reset_max_memory_allocated": lambda d=None: None, "reset_accumulated_memory_stats": lambda d=None: None,
            "memory_stats": lambda d=None: {}, "mem_get_info": lambda d=None: (gpu.total_memory - tr.live_device_bytes(), gpu.total_memory),
            "manual_seed": lambda s: None, "manual_seed_all": lambda s: None, "seed": lambda: None,
            "seed_all": lambda: None, "get_rng_state": lambda d="cuda": torch.zeros(16, dtype=torch.uint8),
            "set_rng_state": lambda s, d="cuda": None,
            "get_rng_state_all": lambda: [torch.zeros(16, dtype=torch.uint8)],
            "set_rng_state_all": lambda s: None, "Stream": FakeStream, "Event": FakeEvent, "stream": stream,
            "current_stream": lambda d=None: state["stream"], "default_stream": lambda d=None: current,
            "set_stream": lambda s: None,
        }
        for name, fn in simple.items():
            p.set(cuda, name, fn)
        p.set(cuda, "_initialized", True)
        if hasattr(cuda, "nvtx"):
            for name in ("range_push", "range_pop", "mark"):
                p.set(cuda.nvtx, name, lambda *a, **k: None)
            p.set(cuda.nvtx, "range", contextmanager(lambda *a, **k: (yield)))
        mem = getattr(cuda, "memory", None)
        if mem is not None:
            def snapshot_call(*a, **k):
                self.snapshot_calls += 1

            for name in ("_record_memory_history", "_dump_snapshot"):
                p.set(mem, name, snapshot_call)
            for name in simple:
                if name in vars(mem):
                    p.set(mem, name, simple[name])

    def _install_tensor(self) -> None:
        p, storages = self._patcher, self.tracer.storages
        p.set(torch.Tensor, "device", device_property(storages))
        p.set(torch.Tensor, "is_cuda", property(lambda t: not storages.in_kernel and storages.is_device_tensor(t)))

    def _install_modules(self) -> None:
        p, tr, session = self._patcher, self.tracer, self
        nn = torch.nn
        orig_init = nn.Module.__init__

        @functools.wraps(orig_init)
        def module_init(module, *args, **kwargs):
            orig_init(module, *args, **kwargs)
            tr.add_module(module)

        p.set(nn.Module, "__init__", module_init)

        orig_param_new = nn.Parameter.__new__

        def param_new(cls, data=None, requires_grad=True):
            if data is not None and real_device_type(data) == "cpu":
                data = session.host_copy(data)
            return orig_param_new(cls, data, requires_grad)

        p.set(nn.Parameter, "__new__", param_new)

        orig_register_buffer = nn.Module.register_buffer

        @functools.wraps(orig_register_buffer)
        def register_buffer(module, name, tensor, *args, **kwargs):
            if isinstance(tensor, torch.Tensor) and real_device_type(tensor) == "cpu":
                tensor = session.host_copy(tensor)
            return orig_register_buffer(module, name, tensor, *args, **kwargs)

        p.set(nn.Module, "register_buffer", register_buffer)

        orig_module_zero_grad = nn.Module.zero_grad

        @functools.wraps(orig_module_zero_grad)
        def module_zero_grad(module, *args, **kwargs):
            with tr.phases.region("zero_grad"):
                return orig_module_zero_grad(module, *args, **kwargs)

        p.set(nn.Module, "zero_grad", module_zero_grad)

        orig_opt_init = torch.optim.Optimizer.__init__

        @functools.wraps(orig_opt_init)
        def opt_init(opt, *args, **kwargs):
            orig_opt_init(opt, *args, **kwargs)
            session._wrap_optimizer(opt)

        p.set(torch.optim.Optimizer, "__init__", opt_init)

        self._hooks.append(nn.modules.module.register_module_forward_pre_hook(self._forward_pre))
        self._hooks.append(nn.modules.module.register_module_forward_hook(self._forward_post))

    def _forward_pre(self, module, inputs):
        root = not self.tracer.phases._module_stack
        self.tracer.phases.forward_pre_hook(module, inputs)  # names the model's modules at its first call
        if root:
            self.tracer.collect_frees()
            self.tracer.scan_model_state()

    def _forward_post(self, module, inputs, output):
        self.tracer.phases.forward_post_hook(module, inputs, output)

    def host_copy(self, data: torch.Tensor) -> torch.Tensor:
        """A host-side meta tensor shaped like the real CPU tensor `data` (a parameter or buffer built on the
        CPU: the trace needs its shape only, and a 7B model's weights need no host memory)."""
        with self.tracer.host_scope():
            out = torch.empty_strided(data.size(), data.stride(), dtype=data.dtype, device="meta")
        self.tracer.storages.mark_host(out)
        return out

    def _wrap_optimizer(self, opt) -> None:
        tr = self.tracer
        tr.add_optimizer(opt)
        orig_step, orig_zero = opt.step, opt.zero_grad

        def step(self_opt, *args, **kwargs):
            with tr.phases.region("optimizer"):
                tr.collect_frees()
                tr.scan_model_state()
                out = orig_step(*args, **kwargs)
                tr.collect_frees()
                tr.scan_model_state()
                return out

        def zero_grad(self_opt, *args, **kwargs):
            with tr.phases.region("zero_grad"):
                return orig_zero(*args, **kwargs)

        opt.step = types.MethodType(step, opt)
        opt.zero_grad = types.MethodType(zero_grad, opt)

    def _install_autograd(self) -> None:
        p, tr = self._patcher, self.tracer
        for name in ("backward", "grad"):
            orig = getattr(torch.autograd, name)

            def wrapped(*args, __orig=orig, **kwargs):
                with tr.phases.region("backward"):
                    tr.collect_frees()
                    out = __orig(*args, **kwargs)
                    tr.collect_frees()
                    tr.scan_model_state()
                    return out

            p.set(torch.autograd, name, functools.wraps(orig)(wrapped))

    def _install_autocast(self) -> None:
        p, ac = self._patcher, self.autocast
        real_autocast = torch.autocast

        class autocast:
            """torch.autocast for the simulated device ('cuda'); 'cpu' regions go to the real one."""

            def __init__(self, device_type="cuda", dtype=None, enabled=True, cache_enabled=None):
                self.device_type = device_type
                self.args = (enabled, dtype, cache_enabled)
                self.real = None if device_type in ("cuda", "meta") else real_autocast(
                    device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

            def __enter__(self):
                if self.real is not None:
                    return self.real.__enter__()
                ac.push(*self.args)
                return self

            def __exit__(self, *exc):
                if self.real is not None:
                    return self.real.__exit__(*exc)
                ac.pop()
                return False

            def __call__(self, fn):
                @functools.wraps(fn)
                def inner(*a, **k):
                    with self:
                        return fn(*a, **k)

                return inner

        class cuda_autocast(autocast):
            def __init__(self, enabled=True, dtype=torch.float16, cache_enabled=True):
                super().__init__("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

        p.set(torch, "autocast", autocast)
        p.set(torch.cuda.amp, "autocast", cuda_autocast)
        if hasattr(torch, "amp") and hasattr(torch.amp, "autocast"):
            p.set(torch.amp, "autocast", autocast)
        real_enabled = torch.is_autocast_enabled

        def is_autocast_enabled(device_type=None):
            if device_type in (None, "cuda"):
                return ac.enabled()
            return real_enabled(device_type) if device_type != "cpu" else torch.is_autocast_cpu_enabled()

        p.set(torch, "is_autocast_enabled", is_autocast_enabled)
        p.set(torch, "get_autocast_gpu_dtype", lambda: ac.state.dtype if ac.state else torch.float16)
        p.set(torch, "is_autocast_cache_enabled", lambda: ac.state.cache_enabled if ac.state else True)
        if hasattr(torch, "get_autocast_dtype"):
            real_get = torch.get_autocast_dtype
            p.set(torch, "get_autocast_dtype", lambda d: (ac.state.dtype if ac.state else torch.float16)
                  if d == "cuda" else real_get(d))

    def _install_sdpa(self) -> None:
        session = self

        def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                                         scale=None, enable_gqa=False):
            args, kwargs = (query, key, value), {"attn_mask": attn_mask}
            if session.autocast.enabled():
                args, kwargs = session.autocast.apply("scaled_dot_product_attention", args, kwargs)
            return sdpa.scaled_dot_product_attention(session.tracer, session.gpu.major, *args,
                                                     attn_mask=kwargs["attn_mask"], dropout_p=dropout_p,
                                                     is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)

        self._patcher.set(F, "scaled_dot_product_attention", scaled_dot_product_attention)
        self._install_sdpa_kernel_selector()

    def _install_sdpa_kernel_selector(self) -> None:
        """torch.nn.attention.sdpa_kernel (PyTorch >= 2.3) choosing among the emulated backends; on older
        PyTorch the module is provided, so that programs written for 2.x run."""
        import enum

        attention = sys.modules.get("torch.nn.attention")
        if attention is None:
            try:
                import torch.nn.attention as attention  # noqa: F811
            except ImportError:
                attention = types.ModuleType("torch.nn.attention")
                attention.SDPBackend = enum.Enum("SDPBackend", "ERROR MATH FLASH_ATTENTION EFFICIENT_ATTENTION CUDNN_ATTENTION")
                self._patcher.set(torch.nn, "attention", attention)
                sys.modules["torch.nn.attention"] = attention
                self._cleanup_modules = ["torch.nn.attention"]
        names = {"MATH": "math", "FLASH_ATTENTION": "flash", "EFFICIENT_ATTENTION": "efficient"}

        @contextmanager
        def sdpa_kernel(backends, set_priority=False):
            if not isinstance(backends, (list, tuple)):
                backends = [backends]
            old = dict(sdpa._ENABLED)
            sdpa.set_enabled({names[b.name] for b in backends if b.name in names})
            try:
                yield
            finally:
                sdpa._ENABLED.update(old)

        self._patcher.set(attention, "sdpa_kernel", sdpa_kernel)
