"""vramsim_trace: run a PyTorch program with CUDA simulated on the CPU and record every allocation and free
of GPU memory it would make, for vramsim's allocator model.

    python -m vramsim_trace --out step.vtrace train.py -- --batch 8     # what `vramsim trace` runs
    with vramsim_trace.record("step.vtrace", gpu="H100-80GB"):          # the same from Python
        train_step()

See traces/tracer/README.md for what is simulated and what is not."""

from __future__ import annotations

import json
import os
import sys
from contextlib import contextmanager
from typing import Optional

from .output import write_markers, write_vtrace

# torch is imported when a session starts, not with the package: `python -m vramsim_trace` must be able to
# say "no PyTorch here" on an interpreter without it.
__all__ = ["record", "write_outputs"]


def markers_path(vtrace_path: str) -> str:
    return vtrace_path + ".markers.json"


def write_outputs(session, vtrace_path: str, meta: Optional[dict] = None) -> dict:
    import torch

    tr = session.tracer
    info = {
        "torch_version": torch.__version__,
        "python_version": sys.version.split()[0],
        "gpu": session.gpu.name,
        "compute_capability": f"{session.gpu.major}.{session.gpu.minor}",
        "cublas_workspace_bytes": tr.workspace_bytes,
        "operators": tr.operators,
        "allocations": tr._next_index,
        "vtrace_events": tr.log.vtrace_events,
        "steps": tr.phases.step,
        "made_up_values": tr.made_up_values,
        "autocast_casts": session.autocast.casts,
        "sdpa_backends": dict(sorted(tr.sdpa_backends.items())),
        "record_stream_calls": session.record_stream_calls,
        "empty_cache_calls": session.empty_cache_calls,
    }
    if meta:
        info.update(meta)
    write_vtrace(tr.log, vtrace_path, header_comment=f"recorded by vramsim_trace on PyTorch {torch.__version__}")
    write_markers(tr.log, markers_path(vtrace_path), info)
    return info


@contextmanager
def record(path: str, gpu: str = "H100-80GB", compute_capability: float = 9.0,
           total_memory_bytes: int = 85520809984, cublas_workspace_bytes: Optional[int] = None):
    """Traces what runs inside the block on a simulated GPU and writes `path` (vtrace) and
    `path`.markers.json. Build the model inside the block too: tensors made before it are not simulated."""
    from .session import GpuInfo, Session

    session = Session(GpuInfo(gpu, compute_capability, total_memory_bytes), cublas_workspace_bytes)
    session.start()
    try:
        yield session
    finally:
        session.stop()
        write_outputs(session, path)
