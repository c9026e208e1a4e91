#!/usr/bin/env python3
"""Replay a vramsim trace (.vtrace, traces/FORMAT.md) through PyTorch's real CUDA caching allocator.

Every `alloc` becomes torch.empty(size, dtype=torch.uint8, device="cuda") on the event's stream (recorded
handle 0 = the default stream; any other handle gets its own torch.cuda.Stream), and every free a `del` of
that tensor. A free_requested that its free_completed does not follow directly was record_stream'ed in the
trace: the tensor is record_stream'ed onto a side stream before its `del`, so the allocator also defers it
(until its next malloc sees the side stream idle). Segment events, oom and snapshot entries of the input are
not replayed: they are the allocator's own answers, and this run records PyTorch's.

Each mode runs in its own process, since the allocator reads PYTORCH_CUDA_ALLOC_CONF once:
  default      PYTORCH_CUDA_ALLOC_CONF unset
  expandable   PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
Written to OUT/<mode>/: snapshot.pickle (frames stripped; `vramsim replay --check` scores the model against
it), memory_stats.json, device_memory.json (cudaMemGetInfo / NVML before and after), replay.json (counts,
timings, versions). --dry-run needs no torch: it parses the trace and writes OUT/plan.json (counts, streams,
peak requested bytes), so the trace reading and file naming are checked on any machine.

Examples:
  replay_through_pytorch.py OUT/gpt2/predicted.vtrace --out OUT/gpt2/pytorch_replay
  replay_through_pytorch.py t.vtrace --out /tmp/r --modes expandable
  replay_through_pytorch.py t.vtrace --out /tmp/r --dry-run
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import recorder_common as rc  # noqa: E402

MODES = {"default": None, "expandable": "expandable_segments:True"}


class TraceInconsistent(ValueError):
    pass


def plan_events(path: str, device: int) -> tuple[list[tuple], dict]:
    """The replay as a list of (kind, key, size, stream, deferred) with kind "alloc" or "free", and counts.
    Keys are the trace's addresses; a free of an address that is not live is an error naming the line."""
    ops: list[tuple] = []
    live: dict[int, int] = {}
    counts = {"events": 0, "allocs": 0, "frees": 0, "deferred_frees": 0, "not_replayed": 0}
    streams: list[int] = []
    requested = peak = 0
    events = list(rc.read_vtrace_events(path, device))
    counts["events"] = len(events)
    for i, e in enumerate(events):
        if e.action == "alloc":
            if e.addr in live:
                raise TraceInconsistent(f"{path}: line {e.line}: alloc at {e.addr:#x}, which is already live")
            size = max(e.size, 1)  # torch.empty(0) would not reach the allocator
            live[e.addr] = size
            ops.append(("alloc", e.addr, size, e.stream, False))
            counts["allocs"] += 1
            requested += size
            peak = max(peak, requested)
            if e.stream not in streams:
                streams.append(e.stream)
        elif e.action == "free_requested":
            if e.addr not in live:
                raise TraceInconsistent(f"{path}: line {e.line}: free_requested of {e.addr:#x}, which is not live "
                                        "(a trace replayed here must start from an empty allocator)")
            nxt = events[i + 1] if i + 1 < len(events) else None
            deferred = not (nxt and nxt.action == "free_completed" and nxt.addr == e.addr)
            requested -= live.pop(e.addr)
            ops.append(("free", e.addr, 0, e.stream, deferred))
            counts["frees"] += 1
            counts["deferred_frees"] += int(deferred)
        elif e.action != "free_completed":
            counts["not_replayed"] += 1
    counts["live_at_end"] = len(live)
    counts["streams"] = streams
    counts["peak_requested_bytes"] = peak
    return ops, counts


def replay(ops: list[tuple], device: int, out_dir: str, max_entries: int) -> dict:
    import torch

    torch.cuda.set_device(device)
    torch.cuda.init()
    dev = torch.device("cuda", device)
    side = torch.cuda.Stream(dev)
    streams = {0: torch.cuda.default_stream(dev)}
    for _, _, _, stream, _ in ops:
        if stream not in streams:
            streams[stream] = torch.cuda.Stream(dev)
    before = rc.device_memory_now(torch, device)
    rc.start_recording(torch, max_entries)
    tensors: dict[int, object] = {}
    t0 = time.monotonic()
    for kind, key, size, stream, deferred in ops:
        if kind == "alloc":
            with torch.cuda.stream(streams[stream]):
                tensors[key] = torch.empty(size, dtype=torch.uint8, device=dev)
        else:
            t = tensors.pop(key)
            if deferred:
                t.record_stream(side)
            del t
    torch.cuda.synchronize(dev)
    seconds = time.monotonic() - t0
    after = rc.device_memory_now(torch, device)
    stats = dict(torch.cuda.memory_stats(dev))
    stats["max_memory_allocated"] = torch.cuda.max_memory_allocated(dev)
    stats["max_memory_reserved"] = torch.cuda.max_memory_reserved(dev)
    rc.write_json(os.path.join(out_dir, "memory_stats.json"), stats)
    grown = after["cuda_mem_get_info_used_bytes"] - before["cuda_mem_get_info_used_bytes"]
    rc.write_json(os.path.join(out_dir, "device_memory.json"),
                  {"before": before, "after": after, "after_minus_before_bytes": grown})
    summary = rc.save_snapshot(torch, os.path.join(out_dir, "snapshot.pickle"))
    torch.cuda.memory._record_memory_history(enabled=None)
    return {"replay_seconds": round(seconds, 3), "snapshot": summary, "versions": rc.torch_versions(torch)}


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace", help="a .vtrace file (e.g. from vramsim predict --trace-out)")
    p.add_argument("--out", required=True, help="output folder (one subfolder per mode)")
    p.add_argument("--modes", default="default,expandable", help="comma-separated: default, expandable")
    p.add_argument("--device", type=int, default=0, help="CUDA device index")
    p.add_argument("--trace-device", type=int, default=0, help="which device's events to replay")
    p.add_argument("--max-entries", type=int, default=1_000_000, help="allocator trace ring-buffer size")
    p.add_argument("--timeout", type=float, default=180.0, help="seconds per mode")
    p.add_argument("--dry-run", action="store_true", help="no torch, no GPU: parse the trace, write plan.json")
    p.add_argument("--child", choices=sorted(MODES), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.mode_list = [m for m in a.modes.split(",") if m]
    unknown = [m for m in a.mode_list if m not in MODES]
    if unknown or not a.mode_list:
        p.error(f"--modes: unknown mode(s) {', '.join(unknown) or '(none given)'} (known: {', '.join(MODES)})")
    return a


def main(argv: list[str]) -> int:
    a = parse_args(argv)
    try:
        ops, counts = plan_events(a.trace, a.trace_device)
    except (rc.VtraceError, TraceInconsistent, OSError) as e:
        print(f"replay_through_pytorch.py: {e}", file=sys.stderr)
        return 65
    os.makedirs(a.out, exist_ok=True)
    if a.child:
        d = os.path.join(a.out, a.child)
        os.makedirs(d, exist_ok=True)
        result = {"trace": a.trace, "mode": a.child, "counts": counts, **replay(ops, a.device, d, a.max_entries)}
        rc.write_json(os.path.join(d, "replay.json"), result)
        return 0
    rc.write_json(os.path.join(a.out, "plan.json"), {"trace": a.trace, "counts": counts, "modes": a.mode_list})
    if a.dry_run:
        print(f"{a.trace}: {counts['allocs']} allocs, {counts['frees']} frees ({counts['deferred_frees']} "
              f"deferred) on {len(counts['streams'])} stream(s), peak requested {counts['peak_requested_bytes']} "
              f"bytes; dry run: nothing replayed")
        return 0
    failed = []
    for mode in a.mode_list:
        env = dict(os.environ)
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        if MODES[mode]:
            env["PYTORCH_CUDA_ALLOC_CONF"] = MODES[mode]
        os.makedirs(os.path.join(a.out, mode), exist_ok=True)
        status = rc.run_child([sys.executable, os.path.abspath(__file__), a.trace, "--out", a.out, "--device",
                               str(a.device), "--trace-device", str(a.trace_device), "--max-entries",
                               str(a.max_entries), "--child", mode],
                              env, a.timeout, os.path.join(a.out, mode, "replay.log"))
        verdict = "ok" if status.get("exit_code") == 0 else f"FAILED {status}"
        print(f"{a.trace} [{mode}]: {verdict}", flush=True)
        if status.get("exit_code") != 0:
            failed.append(mode)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
