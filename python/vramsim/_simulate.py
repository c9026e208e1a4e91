"""simulate() and estimate(): the user's own PyTorch objects run in this process on the CPU with CUDA
simulated (traces/tracer: vramsim_trace, what `vramsim trace SCRIPT.py` runs), then reported as
`vramsim trace --load` reports the recorded run."""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional

from . import _native
from .results import Prediction


class Simulation:
    """What `with vramsim.simulate(...) as run:` yields: `run.session` is the tracer's session while the block
    runs; after it, `run.prediction` is the report, and the Prediction's attributes read through
    (run.fits, run.peak_reserved, ...)."""

    def __init__(self) -> None:
        self.session = None
        self.prediction: Optional[Prediction] = None

    def __getattr__(self, name: str) -> Any:
        prediction = self.__dict__.get("prediction")
        if prediction is None:
            raise AttributeError(f"{name}: the simulated run has no report until its `with` block ends")
        return getattr(prediction, name)

    def __repr__(self) -> str:
        return repr(self.prediction) if self.prediction is not None else "<vramsim.Simulation running>"

    def _repr_html_(self) -> str:
        return self.prediction._repr_html_() if self.prediction is not None else "<pre>running</pre>"


def _trace_args(path: str, name: str, gpu: Optional[str], capacity: Optional[str], alloc_conf: Optional[str],
                cublas_workspace_bytes: Optional[int]) -> list:
    args = ["trace", "--load", path, "--label", name]
    if capacity is not None:
        args += ["--capacity", str(capacity)]
    elif gpu is not None:
        args += ["--gpu", gpu]
    if alloc_conf is not None:
        args += ["--alloc-conf", alloc_conf]
    if cublas_workspace_bytes is not None:
        args += ["--cublas-workspace-bytes", str(cublas_workspace_bytes)]
    return args


@contextmanager
def simulate(gpu: Optional[str] = None, capacity: Optional[str] = None, alloc_conf: Optional[str] = None,
             cublas_workspace_bytes: Optional[int] = None, name: str = "simulate") -> Iterator[Simulation]:
    """Runs the block on a simulated GPU (`gpu`, default H100-80GB as `vramsim trace`'s; or `capacity` bytes
    of memory, e.g. "24GiB") and reports it as `vramsim trace` reports a script. Tensors and modules made
    before the block are not on the simulated device: build the model inside it, or use estimate(). Tensors
    still referenced when the block ends are not freed in the trace (a script's globals are, when it ends):
    `del` them in the block for the same allocator requests; the peaks do not depend on it. `name`: what
    the report calls the run (trace's --label)."""
    try:
        import torch  # noqa: F401
    except ImportError as e:
        raise ImportError("vramsim.simulate needs PyTorch (Debian: apt-get install python3-torch)") from e
    from vramsim_trace import record

    gpu_name, cc, total, workspace = _native.simulated_gpu(
        gpu or "", capacity or "", -1 if cublas_workspace_bytes is None else int(cublas_workspace_bytes))
    run = Simulation()
    with tempfile.TemporaryDirectory(prefix="vramsim-simulate-") as folder:
        path = os.path.join(folder, "simulated.vtrace")
        with record(path, gpu=gpu_name, compute_capability=cc / 10, total_memory_bytes=total,
                    cublas_workspace_bytes=workspace) as session:
            run.session = session
            yield run
        run.session = None
        run.prediction = Prediction(_native.result(_trace_args(path, name, gpu, capacity, alloc_conf,
                                                               cublas_workspace_bytes)))


def _on_device(obj: Any) -> Any:
    """`obj` with every tensor in it moved to the simulated GPU (tuples, lists and dicts walked)."""
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.to("cuda")
    if isinstance(obj, (list, tuple)):
        return type(obj)(_on_device(o) for o in obj)
    if isinstance(obj, dict):
        return {k: _on_device(v) for k, v in obj.items()}
    return obj


def default_loss(output: Any) -> Any:
    """The loss estimate() backpropagates when no loss_fn is given: the output's `.loss` (a Hugging Face
    model given labels), else the output itself when it is a scalar, else output.sum() (the first element of a
    tuple output)."""
    loss = output.get("loss") if isinstance(output, dict) else getattr(output, "loss", None)
    if loss is not None:
        return loss
    if isinstance(output, (tuple, list)):
        output = output[0]
    return output if output.dim() == 0 else output.sum()


class _SwappedModel:
    """The user's model with its parameters and buffers replaced, for the block, by shape-only copies the
    tracer puts on the simulated GPU (`model.to("cuda")` would otherwise overwrite the user's CPU tensors);
    the originals are put back on exit. Tied parameters stay tied (one copy per original)."""

    def __init__(self, model, session) -> None:
        self.model, self.session = model, session
        self.copies = {}  # id(original parameter) -> its copy
        self.saved = []

    def __enter__(self):
        import torch

        for module in self.model.modules():
            # as if built in the block: the tracer names its parameters, buffers and gradients
            # (vramsim_trace.session: nn.Module.__init__ registers each module, in this order)
            self.session.tracer.add_module(module)
            for table in (module._parameters, module._buffers):
                for key, t in list(table.items()):
                    if t is None:
                        continue
                    self.saved.append((table, key, t))
                    if id(t) not in self.copies:
                        shape_only = self.session.host_copy(t.detach())
                        self.copies[id(t)] = (torch.nn.Parameter(shape_only, requires_grad=t.requires_grad)
                                              if isinstance(t, torch.nn.Parameter) else shape_only)
                    table[key] = self.copies[id(t)]
        return self

    def __exit__(self, *exc) -> None:
        for table, key, t in reversed(self.saved):
            table[key] = t


def _rebuild_optimizer(optimizer, copies):
    """The user's optimizer made again, same class, param groups and settings, over the simulated model's
    parameters (its state, if it ever stepped, is not carried: a training run's first steps are simulated)."""
    if callable(optimizer) and not hasattr(optimizer, "param_groups"):
        return None  # a factory: called with the parameters instead
    if any(id(p) not in copies for g in optimizer.param_groups for p in g["params"]):
        raise ValueError("optimizer: holds parameters that are not the model's (build it over model.parameters(), "
                         "or pass a function params -> optimizer)")
    groups = [{**{k: v for k, v in g.items() if k != "params"}, "params": [copies[id(p)] for p in g["params"]]}
              for g in optimizer.param_groups]
    try:
        return type(optimizer)(groups, **optimizer.defaults)
    except TypeError as e:
        raise TypeError(f"optimizer: cannot make {type(optimizer).__name__} again over the simulated "
                        f"parameters ({e}); pass a function of the parameters instead, e.g. "
                        "optimizer=lambda params: torch.optim.AdamW(params, lr=1e-4)") from e


def estimate(model, sample_input, optimizer=None, loss_fn: Optional[Callable] = None, gpu: Optional[str] = None,
             steps: int = 2, capacity: Optional[str] = None, alloc_conf: Optional[str] = None,
             cublas_workspace_bytes: Optional[int] = None, name: Optional[str] = None) -> Prediction:
    """Predicts the GPU memory of `steps` training steps of the user's own `model` (a torch.nn.Module, left
    untouched) on `gpu`: each step runs

        output = model(*sample_input)        # a tensor, a tuple of arguments or a dict of keyword arguments
        loss = loss_fn(output)               # default: default_loss(output)
        loss.backward()
        optimizer.step(); optimizer.zero_grad(set_to_none=True)   # with an optimizer

    on the simulated GPU, with the model and the sample moved there first (model.to("cuda")). `optimizer`: a
    torch.optim optimizer over model's parameters (made again over the simulated ones) or a function
    params -> optimizer. The report is `vramsim trace`'s for the same loop written as a script; `name` (default:
    the model's class name) is what it calls the run."""
    if steps < 1:
        raise ValueError(f"steps: must be at least 1, got {steps}")
    with simulate(gpu=gpu, capacity=capacity, alloc_conf=alloc_conf, cublas_workspace_bytes=cublas_workspace_bytes,
                  name=name or type(model).__name__) as run:
        with _SwappedModel(model, run.session) as swapped:
            model.to("cuda")
            # Module._apply may put new Parameter objects in the model: pair them with the user's by position
            # (model.parameters()'s order, tied ones once).
            params = list(model.parameters())
            on_device = dict(zip((id(p) for p in _original_parameters(swapped)), params))
            opt = None
            if optimizer is not None:
                opt = _rebuild_optimizer(optimizer, on_device) or optimizer(params)
            args, kwargs = _call_arguments(_on_device(sample_input))
            for _ in range(steps):
                output = model(*args, **kwargs)
                loss = loss_fn(output) if loss_fn is not None else default_loss(output)
                loss.backward()
                if opt is not None:
                    opt.step()
                    opt.zero_grad(set_to_none=True)
            del output, loss, opt, args, kwargs
    return run.prediction


def _original_parameters(swapped: _SwappedModel) -> list:
    import torch

    seen, out = set(), []
    for _table, _key, t in swapped.saved:
        if isinstance(t, torch.nn.Parameter) and id(t) not in seen:
            seen.add(id(t))
            out.append(t)
    return out


def _call_arguments(sample: Any):
    if isinstance(sample, dict):
        return (), sample
    if isinstance(sample, (tuple, list)):
        return tuple(sample), {}
    return (sample,), {}
