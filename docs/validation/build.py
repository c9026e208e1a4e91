#!/usr/bin/env python3
"""Writes docs/validation.md: every public measurement in docs/validation/measurements.json, predicted by this
build, with the error and its sign.

  build.py --build-dir build            # rewrite docs/validation.md
  build.py --build-dir build --check    # exit 1 when docs/validation.md differs from what this build writes

Each row runs `vramsim predict --json SETTINGS` (or `vramsim replay --json FILE`) and reads one figure:
peak_allocated_bytes, peak_reserved_bytes, peak_active_bytes, or the peak rise of requested bytes
(steps[-1].peak_requested_bytes - phases_requested.before_forward). A replay row whose recording is not on this
machine (../shared/traces/real/ is not in a clean clone) keeps its line from the committed page and is counted
as not rerun; every other row is rerun. A row marked "may_refuse" (a recipe vramsim does not model) shows the
refusal; any other failure of a command stops the script. The error is (predicted - published) / published, with the published
figure in its published unit (GiB = 2^30 bytes).
"""
import argparse
import concurrent.futures
import difflib
import json
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
UNITS = {"B": 1, "GiB": 1 << 30, "tokens": 1}
FIGURES = {"peak_allocated": "peak_allocated_bytes", "peak_reserved": "peak_reserved_bytes",
           "peak_active": "peak_active_bytes"}


def figure(row, doc):
    """The row's figure in bytes from vramsim's JSON output."""
    if row["figure"] == "peak_rise":
        before = doc["phases_requested"]["before_forward"]
        return doc["steps"][-1]["peak_requested_bytes"] - before
    if row["figure"] == "process":  # what nvidia-smi shows of the process: the allocator's pool, the context
        # and the NCCL communicators' buffers (multi-GPU runs whose channel counts are known)
        return doc["peak_reserved_bytes"] + doc["bill"]["cuda_context"] + doc["bill"].get("nccl", 0)
    if row["figure"].startswith("json:"):  # a dotted path into the JSON report, e.g. vLLM's start-up lines
        value = doc
        for key in row["figure"][len("json:"):].split("."):
            value = value[key]
        return value
    return doc[FIGURES[row["figure"]]]


def run(row, vramsim):
    """(predicted bytes or None, refusal text or None, seconds) for one row; None when its input is absent."""
    args = row["settings"].split()
    if row["command"] == "replay":
        path = os.path.join(ROOT, args[0])
        if not os.path.exists(path):
            return None
        cmd = [vramsim, "replay", "--json", path]
    else:
        cmd = [vramsim, "predict", "--json"] + args
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    took = time.monotonic() - start
    if proc.returncode == 2 and row.get("may_refuse"):
        return None, proc.stderr.strip().split("\n")[0].replace("vramsim: error: ", ""), took
    if proc.returncode != 0:
        raise SystemExit(f"{row['id']}: {' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()}")
    return figure(row, json.loads(proc.stdout)), None, took


def show(value_bytes, unit):
    if unit == "B":
        return f"{value_bytes:,} B"
    if unit == "tokens":
        return f"{value_bytes:,} tokens"
    return f"{value_bytes / UNITS[unit]:.2f} {unit}"


def published(row):
    v = row["published"]
    if row["unit"] in ("B", "tokens"):
        return f"{v:,} {row['unit']}"
    return f"{v} {row['unit']}"


def cells(row, result):
    """The table cells after the row's settings: published, predicted, error, sign, notes."""
    value, refusal, _ = result
    notes = [row["published_how"]] if row["published_how"] != "as published" else []
    notes += ["in-sample: " + s for s in row["in_sample"]]
    if row["needs_recording"]:
        notes.append("the published figure needs the recording in ../shared/traces/real/ to be read again")
    if refusal is not None:
        return [published(row), "refused: " + refusal.replace("|", "/"), "—", "refused", "; ".join(notes)]
    pub = row["published"] * UNITS[row["unit"]]
    error = 100.0 * (value - pub) / pub
    shown = "0.00 %" if value == pub else f"{error:+.2f} %"
    sign = "exact" if value == pub else ("over" if value > pub else "under")
    if shown in ("+0.00 %", "-0.00 %") and value != pub:
        shown = f"{error:+.4f} %"
    return [published(row), show(value, row["unit"]), shown, sign, "; ".join(notes)]


def line(row, result):
    kind = "vramsim replay" if row["command"] == "replay" else "vramsim predict"
    parts = [row["id"], row["source"].replace("|", "/"), row["measured"], f"`{kind} {row['settings']}`"]
    return "| " + " | ".join(parts + cells(row, result)) + " |"


def summary(lines):
    """One sentence on a group's errors, read back from its table lines (so kept lines count too)."""
    errors, refused = [], 0
    for l in lines:
        cols = [c.strip() for c in l.strip("|").split("|")]
        if cols[7] == "refused":
            refused += 1
            continue
        errors.append((abs(float(cols[6].split()[0])), cols[0], cols[6]))
    text = f"{len(lines)} rows"
    if errors and all(e[2] == "0.00 %" for e in errors):
        text += ": every figure exact"
    elif errors:
        within = lambda t: sum(1 for e in errors if e[0] <= t)
        worst = max(errors)
        text += (f": {within(1.0)} within 1 %, {within(5.0)} within 5 %, {within(10.0)} within 10 %;"
                 f" the largest error is {worst[2]} ({worst[1]})")
    if refused:
        text += f"; {refused} refused by vramsim"
    return text + "."


HEADER = """# Validation: every comparison with a real measurement

<!-- Generated by docs/validation/build.py from docs/validation/measurements.json; do not edit by hand. -->

Each row is a public measurement kept in `docs/validation/measurements.json`: its source, what was measured
(`allocated` = `torch.cuda.max_memory_allocated`, `reserved` = `max_memory_reserved`, `active` =
`memory_stats()["active_bytes.all.peak"]`, `requested (peak rise)` = the peak of live requested bytes in a
recorded region minus those at its start, `process` = the GPU memory the process holds as `nvidia-smi` or a
W&B system chart shows it, predicted as peak reserved + the CUDA context + the NCCL lines vramsim sizes), the run's settings as vramsim arguments and the published figure in
its published unit. This build's prediction, the error (predicted − published) / published and its sign are
written by one command, which a reader can rerun:

```sh
python3 docs/validation/build.py --build-dir build
```

The CTest `docs.validation_page` reruns it and fails when this page differs from what the build predicts.
"In-sample" marks a setting that was read from the recording being predicted (a process's warm-up, a GPU
inferred from one of its requests): a user predicting a new run would have to know it. Replay rows whose
recording is in `../shared/traces/real/` (not in a clean clone) are rerun only where that folder exists.
"""

FOOTER = """## Not on this page

* **The student-code fixture.** `tests/graph/test_cs336_all_recordings.cpp` runs the kkaitlyn111 recordings
  with a test fixture that mirrors the student's own layer code (`tests/graph/kkaitlyn111_code.cpp`): all 12
  eager recordings match request for request, and `tests/predict/test_whole_process_peaks.cpp` checks both
  whole-process peaks within 0.1 %. The fixture is not reachable from the CLI, so those comparisons are
  test results, not predictions a user can make: [recordings.md](recordings.md) has their tables.
* **Cross-validation against PyTorch itself** (`tests/tracer/test_crossval.py`): the generic layer code's
  allocations against real PyTorch 1.13 on the CPU, request for request, and the training peaks of both
  allocation streams (the test fails beyond 7 % in every training row, told with `--adam-foreach-denom
  out-of-place` and `--checkpoint-early-stop off` what PyTorch 1.13 does where 2.x differs; the rows with full
  checkpointing agree to the byte: [known-misses.md](known-misses.md#generic-path-against-pytorch-113))
  ([recordings.md](recordings.md#cross-validation-of-the-generic-path-predicts-layer-code-against-pytorch-itself)).
* **Known misses of the tests** ([known-misses.md](known-misses.md)): every comparison a test reports without
  asserting it (the QLoRA notebook step with current bitsandbytes, the compiled 2.7B forward at -6.25 %, ...),
  with its figure, sign and what explains it.
* **The Korthikanti et al. 2022 activation formula and ZeRO's 16 bytes per parameter**: exact, checked by
  `tests/graph/test_korthikanti.cpp`; a formula from a paper, not a measurement of a run.
* **vLLM's V1 start-up** against vLLM's own start-up logs (weights, torch peak increase, available KV cache, KV
  tokens; TP 1 and 2): compared line by line in
  [serving.md](serving.md#compared-with-vllms-own-start-up-logs), with each log's source and error. Hugging
  Face `generate` and the KV caches have no public measurement compared yet.
* **The time model** (step times and tokens/s that `plan` ranks by): calibrated on public throughput and checked
  on held-back rows in [time-model.md](time-model.md).
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "validation.md"))
    ap.add_argument("--check", action="store_true", help="compare with --out instead of writing it")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--timings", action="store_true", help="print each row's run time on stderr")
    args = ap.parse_args()
    vramsim = os.path.join(os.path.abspath(args.build_dir), "sim", "vramsim")
    if not os.path.exists(vramsim):
        print(f"SKIPPED: {vramsim} is not built")
        return 77
    with open(os.path.join(ROOT, "docs", "validation", "measurements.json"), encoding="utf-8") as f:
        groups = json.load(f)["groups"]
    committed = {}
    if os.path.exists(args.out):
        with open(args.out, encoding="utf-8") as f:
            for l in f.read().split("\n"):
                m = re.match(r"^\| ([A-Za-z0-9][A-Za-z0-9._-]*) \|", l)
                if m:
                    committed[m.group(1)] = l
    rows = [r for g in groups for r in g["rows"]]
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = dict(zip([r["id"] for r in rows], pool.map(lambda r: run(r, vramsim), rows)))
    out, kept = [HEADER], []
    for g in groups:
        lines = []
        for r in g["rows"]:
            if results[r["id"]] is None:
                if r["id"] not in committed:
                    raise SystemExit(f"{r['id']}: {r['settings']} is absent and the page has no line for it")
                kept.append(r["id"])
                lines.append(committed[r["id"]])
            else:
                lines.append(line(r, results[r["id"]]))
        out.append(f"## {g['title']}\n")
        out.append(" ".join(g["text"]) + "\n")
        out.append("| row | source | measured | settings | published | predicted | error | sign | notes |")
        out.append("|---|---|---|---|---:|---:|---:|---|---|")
        out.extend(lines)
        out.append("\n" + summary(lines) + "\n")
    out.append(FOOTER)
    text = "\n".join(out)
    if args.timings:
        for rid, res in sorted(results.items(), key=lambda kv: -(kv[1][2] if kv[1] else 0)):
            if res:
                print(f"{res[2]:7.2f} s  {rid}", file=sys.stderr)
    note = f"{len(rows) - len(kept)} of {len(rows)} rows rerun"
    if kept:
        note += f"; {len(kept)} kept from the committed page (their recordings are absent): {', '.join(kept)}"
    if args.check:
        with open(args.out, encoding="utf-8") as f:
            old = f.read()
        if old != text:
            print("\n".join(difflib.unified_diff(old.split("\n"), text.split("\n"), args.out, "this build",
                                                lineterm="", n=0)))
            print(f"\n{args.out} is stale ({note}); rerun docs/validation/build.py --build-dir ...")
            return 1
        print(f"{args.out} is up to date ({note})")
        return 0
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {args.out} ({note})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
