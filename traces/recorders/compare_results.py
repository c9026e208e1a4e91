#!/usr/bin/env python3
"""Build the hardware-validation tables (markdown) from the raw files kernels/validate_on_gpu.sh leaves in OUT.

Reads, per training configuration OUT/recorded/<config>/:
  config.json, predict.json             the configuration and `vramsim predict --json`
  memory_stats.json, device_memory.json  what PyTorch and the device said during the real run (GPU runs only)
  replay_check.json                     `vramsim replay --check --json` of the recorded snapshot.pickle
  pytorch_replay/<mode>/check.json      `vramsim replay --check --json` of PyTorch replaying predicted.vtrace
and OUT/hw/<trace>.<backend>.json, the `vramsim-replay --json --no-rows` results.
Writes OUT/validation.md (or --output) and prints it. A value that was not measured (a dry run, or a step that
failed) is written as "not measured (no GPU)" or "missing"; fake-device replays are labelled FAKE.

Example: compare_results.py /tmp/validation-out
"""

from __future__ import annotations

import argparse
import glob
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import recorder_common as rc  # noqa: E402

NOT_MEASURED = "not measured (no GPU)"  # replaced by main() when the GPU was there but PyTorch was not
MISSING = "missing"


def load(path: str):
    try:
        return rc.read_json(path)
    except (OSError, ValueError):
        return None


def gib(b) -> str:
    return MISSING if b is None else f"{b / 2**30:.3f} GiB"


def mib(b) -> str:
    return MISSING if b is None else f"{b / 2**20:.2f} MiB"


def rel_err(predicted, measured) -> str:
    if predicted is None or measured is None or measured == 0:
        return "-"
    return f"{100.0 * (predicted - measured) / measured:+.2f} %"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def check_cells(check) -> tuple[str, str, str]:
    """(segment events matched, allocations at the same offset, verdict) of a `vramsim replay --check --json`."""
    if check is None:
        return MISSING, MISSING, MISSING
    c = check.get("check", {})
    seg = f"{c.get('segment_events_matched')} / {c.get('segment_events_recorded')}"
    allocs = f"{c.get('allocs_same_offset')} / {c.get('allocs_recorded')}"
    if c.get("identical"):
        verdict = "identical"
    else:
        d = c.get("first_divergence") or {}
        verdict = "differs"
        if d:
            verdict = f"differs at event {d.get('event_index')}: {d.get('expected')} vs {d.get('model')}"
    return seg, allocs, verdict


def hw_result(out: str, trace: str, backend: str):
    return load(os.path.join(out, "hw", f"{trace}.{backend}.json"))


def training_tables(out: str, hw_model_backend: str) -> list[str]:
    rows_a, rows_b = [], []
    for d in sorted(glob.glob(os.path.join(out, "recorded", "*", "config.json"))):
        cdir = os.path.dirname(d)
        cfg = load(d) or {}
        name = cfg.get("name", os.path.basename(cdir))
        measured = cfg.get("status") == "recorded"
        pred = load(os.path.join(cdir, "predict.json")) or {}
        stats = load(os.path.join(cdir, "memory_stats.json")) if measured else None
        devmem = load(os.path.join(cdir, "device_memory.json")) if measured else None
        p_alloc, p_res = pred.get("peak_allocated_bytes"), pred.get("peak_reserved_bytes")
        if measured:
            m_alloc = (stats or {}).get("max_memory_allocated")
            m_res = (stats or {}).get("max_memory_reserved")
            dev = gib((devmem or {}).get("end_minus_before_model_bytes"))
            m_alloc_s, m_res_s = gib(m_alloc), gib(m_res)
        else:
            m_alloc = m_res = None
            why = NOT_MEASURED if cfg.get("status") == "dry-run" else f"{MISSING} ({cfg.get('status')})"
            dev = m_alloc_s = m_res_s = why
        hw = hw_result(out, name, hw_model_backend)
        if hw is None:
            hw_cell = MISSING
        elif hw.get("fake"):
            hw_cell = f"FAKE: {gib(hw.get('peak_measured_in_use_bytes'))}"
        else:
            hw_cell = (f"{gib(hw.get('peak_measured_in_use_bytes'))} "
                       f"(model {gib(hw.get('peak_model_reserved_bytes'))}, "
                       f"max diff {mib(hw.get('max_abs_difference_bytes'))})")
        rows_a.append([name, gib(p_alloc), gib(p_res), m_alloc_s, m_res_s, rel_err(p_alloc, m_alloc),
                       rel_err(p_res, m_res), dev, hw_cell])
        rec_check = load(os.path.join(cdir, "replay_check.json")) if measured else None
        rec_cells = check_cells(rec_check) if measured else (NOT_MEASURED,) * 3
        rows_b.append([name, "recorded training run", *rec_cells])
        for mode in ("default", "expandable"):
            check_path = os.path.join(cdir, "pytorch_replay", mode, "check.json")
            cells = (NOT_MEASURED,) * 3
            if measured or os.path.exists(check_path):
                cells = check_cells(load(check_path))
            rows_b.append([name, f"PyTorch replay of predicted.vtrace, {mode}", *cells])
    if not rows_a:
        return ["No training configurations found under recorded/."]
    return [
        "## Training steps: predicted vs measured",
        "",
        "Predicted: `vramsim predict --json` (peak allocated / reserved). PyTorch:"
        " `torch.cuda.max_memory_allocated` / `max_memory_reserved` of the real run. Relative error ="
        " (predicted - PyTorch) / PyTorch. Device: cudaMemGetInfo used at the end of the run minus before the model existed (allocator reserve plus CUDA"
        f" libraries' own memory). Replay: `vramsim-replay --backend {hw_model_backend}` of the predicted trace:"
        " peak device memory in use, against the model's reserved bytes.",
        "",
        table(["config", "predicted allocated", "predicted reserved", "PyTorch allocated", "PyTorch reserved",
               "error allocated", "error reserved", "device (recording)", "device (replay of prediction)"],
              rows_a),
        "",
        "## Allocator model against PyTorch's allocator (`vramsim replay --check`)",
        "",
        "Segment events matched: same cudaMalloc / cudaFree / map / unmap, address and size, at the same point;"
        " allocations at the same offset of the same segment.",
        "",
        table(["config", "run", "segment events matched", "allocs same offset", "verdict"], rows_b),
    ]


def hw_table(out: str) -> list[str]:
    rows = []
    for path in sorted(glob.glob(os.path.join(out, "hw", "*.json"))):
        trace, backend = os.path.basename(path)[:-len(".json")].rsplit(".", 1)
        r = load(path)
        if r is None:
            rows.append([trace, backend] + [MISSING] * 6)
            continue
        measured = gib(r.get("peak_measured_in_use_bytes"))
        rows.append([trace, backend + (" (FAKE)" if r.get("fake") else ""), r.get("events_replayed"),
                     r.get("segment_events"), gib(r.get("peak_model_reserved_bytes")),
                     f"FAKE: {measured}" if r.get("fake") else measured, mib(r.get("max_abs_difference_bytes")),
                     f"{r.get('elapsed_ms', 0):.1f}"])
    errors = sorted(glob.glob(os.path.join(out, "hw", "*.err")))
    failed = [os.path.basename(e)[:-4] for e in errors if os.path.getsize(e) > 0]
    lines = [
        "## vramsim-replay on the device",
        "",
        "Reserved: the backend's own account (cuda-malloc: live cudaMalloc sizes; async-pool: the pool's reserved"
        " memory; model: the policy's segments). In use: cudaMemGetInfo used minus the baseline before the first"
        " event, measured after every operation that made device calls. FAKE rows ran on host bookkeeping.",
        "",
        table(["trace", "backend", "operations", "device calls", "peak reserved", "peak in use",
               "max \\|in use - reserved\\|", "elapsed ms"], rows)
        if rows else "No vramsim-replay results under hw/.",
    ]
    if failed:
        lines += ["", "Failed or with messages (see hw/<name>.err): " + ", ".join(failed)]
    return lines


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="the validation output folder")
    p.add_argument("--output", help="markdown file to write (default OUT/validation.md)")
    p.add_argument("--model-backend", default=None,
                   help="which hw result is the device column (default: model, or fake-model after a dry run)")
    a = p.parse_args(argv)
    if not os.path.isdir(a.out):
        p.error(f"{a.out}: not a folder")
    backend = a.model_backend
    if backend is None:
        backend = "model" if glob.glob(os.path.join(a.out, "hw", "*.model.json")) else "fake-model"
    probe = load(os.path.join(a.out, "probe.json"))
    if os.path.exists(os.path.join(a.out, "NO_PYTORCH")):
        global NOT_MEASURED
        NOT_MEASURED = "not measured (no PyTorch)"
    device_line = (f"Device: {probe['device']['name']} (driver {probe.get('driver_version')}, runtime "
                   f"{probe.get('runtime_version')})" if probe and probe.get("device") else
                   "Device: none (dry run, or vramsim-gpu-probe failed)")
    text = "\n".join(["# vramsim hardware validation", "", device_line, "", *training_tables(a.out, backend), "",
                      *hw_table(a.out), ""])
    output = a.output or os.path.join(a.out, "validation.md")
    with open(output, "w", encoding="utf-8") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
