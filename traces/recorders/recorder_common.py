"""Helpers shared by the ground-truth recorders (record_training_steps.py, replay_through_pytorch.py).

Nothing here imports torch at module level: the --dry-run paths of the recorders run on machines without it.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from typing import Any, Iterator


def write_json(path: str, obj: Any) -> None:
    """Writes `obj` as indented JSON, atomically (a half-written file never looks like a result)."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)


def read_json(path: str) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def shell_line(argv: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)


def strip_frames(snapshot: dict) -> dict:
    """Drops the stack frames of a torch.cuda.memory._snapshot() in place (they are most of its size, and
    vramsim reads none of them). Keeps every other key, so the file is still what _dump_snapshot writes."""
    for seg in snapshot.get("segments", []):
        seg.pop("frames", None)
        for block in seg.get("blocks", []):
            block.pop("frames", None)
            for h in block.get("history", []) or []:
                h.pop("frames", None)
    for trace in snapshot.get("device_traces", []):
        for entry in trace:
            entry.pop("frames", None)
    return snapshot


# ---- vtrace (traces/FORMAT.md), the subset the replayer needs -------------------------------------------------

EVENT_ACTIONS = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "segment_map",
                 "segment_unmap", "oom", "snapshot"}


@dataclass
class VtraceEvent:
    line: int
    action: str
    addr: int
    size: int
    stream: int


class VtraceError(ValueError):
    pass


def _number(text: str, path: str, line: int, what: str) -> int:
    try:
        return int(text, 16) if text.lower().startswith("0x") else int(text, 10)
    except ValueError:
        raise VtraceError(f"{path}: line {line}: bad {what} {text!r}") from None


def read_vtrace_events(path: str, device: int = 0) -> Iterator[VtraceEvent]:
    """Yields the events of `device` in file order. Header, settings, tag, segment and block lines are
    skipped (the replay needs only the events); a malformed event line raises VtraceError naming the line."""
    with open(path, encoding="utf-8") as f:
        first = f.readline().strip()
        if first != "vramsim-trace 1":
            raise VtraceError(f'{path}: line 1: expected the header "vramsim-trace 1" on the first line')
        for number, raw in enumerate(f, start=2):
            fields = raw.split()
            if not fields or fields[0].startswith("#"):
                continue
            if not fields[0][0].isdigit():
                continue  # devices, final_state, settings*, tag, segment, block
            if len(fields) < 6:
                raise VtraceError(f"{path}: line {number}: an event needs DEVICE ACTION ADDR SIZE STREAM TIME_NS")
            if fields[1] not in EVENT_ACTIONS:
                raise VtraceError(f"{path}: line {number}: unknown action {fields[1]!r}")
            if _number(fields[0], path, number, "device") != device:
                continue
            yield VtraceEvent(number, fields[1], _number(fields[2], path, number, "address"),
                              _number(fields[3], path, number, "size"), _number(fields[4], path, number, "stream"))


# ---- device memory as the driver sees it ---------------------------------------------------------------------

def device_memory_now(torch: Any, device: int) -> dict:
    """cudaMemGetInfo (through torch.cuda.mem_get_info) and, when pynvml is installed, NVML's view: the
    device's used bytes and this process's own. Values in bytes."""
    free_b, total_b = torch.cuda.mem_get_info(device)
    out = {"cuda_mem_get_info_used_bytes": total_b - free_b, "total_bytes": total_b}
    try:
        import pynvml  # optional

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(device)
        out["nvml_used_bytes"] = int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)
        for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if proc.pid == os.getpid() and proc.usedGpuMemory is not None:
                out["nvml_process_used_bytes"] = int(proc.usedGpuMemory)
    except Exception as e:  # no pynvml, no NVML library, or a driver without the call
        out["nvml_error"] = f"{type(e).__name__}: {e}"
    return out


def torch_versions(torch: Any) -> dict:
    return {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device_name": torch.cuda.get_device_name(),
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        # PyTorch 2.9+ reads the device-generic keys from PYTORCH_ALLOC_CONF first (c10/core/AllocatorConfig.cpp)
        "pytorch_alloc_conf": os.environ.get("PYTORCH_ALLOC_CONF", ""),
    }


def start_recording(torch: Any, max_entries: int) -> None:
    """Turns on the allocator trace without stack traces (vramsim reads none, and collecting them is slow).
    Falls back to the PyTorch 2.0/2.1 signature."""
    try:
        torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                                 max_entries=max_entries)
    except TypeError:
        torch.cuda.memory._record_memory_history(True, trace_alloc_max_entries=max_entries,
                                                 trace_alloc_record_context=False)


def save_snapshot(torch: Any, path: str) -> dict:
    """Writes the allocator snapshot, frames stripped, as a pickle vramsim reads; returns a small summary."""
    import pickle

    snap = strip_frames(torch.cuda.memory._snapshot())
    with open(path + ".tmp", "wb") as f:
        pickle.dump(snap, f, protocol=4)
    os.replace(path + ".tmp", path)
    traces = snap.get("device_traces", [])
    return {"segments": len(snap.get("segments", [])), "trace_entries": sum(len(t) for t in traces)}


def run_child(argv: list[str], env: dict | None, timeout_s: float, log_path: str) -> dict:
    """Runs one recorder child process (a fresh allocator per configuration); returns its status."""
    with open(log_path, "w", encoding="utf-8") as log:
        try:
            proc = subprocess.run(argv, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s)
            return {"exit_code": proc.returncode, "log": os.path.basename(log_path)}
        except subprocess.TimeoutExpired:
            return {"exit_code": None, "error": f"timed out after {timeout_s:.0f} s",
                    "log": os.path.basename(log_path)}
