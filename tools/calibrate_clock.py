#!/usr/bin/env python3
"""Calibrates the time model's compute efficiency on public throughput measurements and reports its error.

The table: tests/data/throughput/measurements.json (one row per published figure, its source, the run as
`vramsim predict` arguments for one rank, and its role: "fit", "held-back" or "not-modelled").

Procedure (Note [Default efficiencies] in sim/engine/roofline.h cites it):
  1. Every "fit" and "held-back" row runs `vramsim predict ARGS --json` with --compute-efficiency C and
     --memory-efficiency M; its tokens/s per GPU is the rank's tokens/s divided by the GPUs that work on the
     same tokens (tensor-parallel x pipeline ranks).
  2. The published figure as tokens/s per GPU: torchtitan's WPS / TPS per GPU as is; Megatron's achieved
     teraFLOP/s per GPU X divided by Eq. 3 of Narayanan et al. 2021 per token, 96 l h^2 (1 + s/6h + V/16lh)
     FLOPs (activation recomputation included, as the paper counts it).
  3. (C, M) minimise the sum over the "fit" rows alone of log(predicted / published)^2, searched on a grid:
     C in 0.40..1.00 by 0.05 and M in 0.50..1.00 by 0.10, then C by 0.01 and M by 0.05 within one coarse
     step of the coarse minimum. Every point is a real prediction of every fit row.
  4. The error of each row at (C, M): (predicted - published) / published; the held-back rows were not used
     in 1-3. The largest |error| of the held-back rows whose GPU is the one vramsim's table describes
     ("gpu_in_table") is the band plan's ties use (sim/predict/time_model_error.h), rounded up to a whole
     per cent; rows on another GPU (torchtitan's 500 W, 96 GB HBM2e H100) are reported beside it.

  calibrate_clock.py --vramsim build/sim/vramsim                 # fit, then report every row
  calibrate_clock.py --vramsim build/sim/vramsim --check         # no fit: the built-in defaults' errors;
                                                                   # exit 1 if a held-back row is outside
                                                                   # the band time_model_error.h states
Writes a Markdown table of the rows to stdout (--markdown) or plain lines.
"""
import argparse
import concurrent.futures
import json
import math
import os
import re
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLE = os.path.join(ROOT, "tests", "data", "throughput", "measurements.json")


def published_tokens_per_gpu(row):
    if row["metric"] == "tokens_per_s_per_gpu":
        return float(row["value"])
    if row["metric"] == "tflops_per_gpu_megatron_eq3":
        m = row["megatron_shape"]
        l, h, s, v = m["layers"], m["hidden"], m["seq"], m["vocab"]
        flops_per_token = 96.0 * l * h * h * (1.0 + s / (6.0 * h) + v / (16.0 * l * h))
        return row["value"] * 1e12 / flops_per_token
    raise ValueError(f"{row['id']}: unknown metric {row['metric']}")


def predicted_tokens_per_gpu(vramsim, row, c, m):
    cmd = [vramsim, "predict"] + shlex.split(row["args"]) + ["--json"]
    if c is not None:
        cmd += ["--compute-efficiency", f"{c:.4f}", "--memory-efficiency", f"{m:.4f}"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{row['id']}: {' '.join(cmd)}: {out.stderr.strip()}")
    timing = json.loads(out.stdout)["timing"]
    return timing["tokens_per_s"] / (row["tp"] * row["pp"])


def predict_rows(vramsim, rows, c, m):
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        got = pool.map(lambda r: predicted_tokens_per_gpu(vramsim, r, c, m), rows)
        return {r["id"]: v for r, v in zip(rows, got)}


def objective(vramsim, rows, c, m):
    pred = predict_rows(vramsim, rows, c, m)
    return sum(math.log(pred[r["id"]] / published_tokens_per_gpu(r)) ** 2 for r in rows)


def grid(lo, hi, step):
    n = int(round((hi - lo) / step))
    return [round(lo + k * step, 4) for k in range(n + 1)]


def fit(vramsim, rows):
    best = None
    for c in grid(0.40, 1.00, 0.05):
        for m in grid(0.50, 1.00, 0.10):
            f = objective(vramsim, rows, c, m)
            best = min(best, (f, c, m)) if best else (f, c, m)
    _, c0, m0 = best
    print(f"fit: coarse minimum C {c0:.2f} M {m0:.2f}", file=sys.stderr)
    for c in grid(max(0.01, c0 - 0.05), min(1.0, c0 + 0.05), 0.01):
        for m in grid(max(0.05, m0 - 0.10), min(1.0, m0 + 0.10), 0.05):
            best = min(best, (objective(vramsim, rows, c, m), c, m))
    print(f"fit: minimum C {best[1]:.2f} M {best[2]:.2f}, sum of squared log errors {best[0]:.5f}",
          file=sys.stderr)
    return best[1], best[2]


def band_in_header():
    text = open(os.path.join(ROOT, "sim", "predict", "time_model_error.h")).read()
    return float(re.search(r"kTimeModelRelativeError = ([0-9.]+);", text).group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vramsim", required=True)
    ap.add_argument("--check", action="store_true", help="no fit: report the built-in defaults' errors")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    rows = json.load(open(TABLE))["rows"]
    fit_rows = [r for r in rows if r["split"] == "fit"]
    held = [r for r in rows if r["split"] == "held-back"]
    c = m = None
    if not args.check:
        c, m = fit(args.vramsim, fit_rows)
        print(f"fitted --compute-efficiency {c:.2f} --memory-efficiency {m:.2f}", file=sys.stderr)
    pred = predict_rows(args.vramsim, fit_rows + held, c, m)
    errors = {}
    if args.markdown:
        print("| row | role | GPU | published tokens/s/GPU | predicted | error |")
        print("| --- | --- | --- | ---: | ---: | ---: |")
    for r in fit_rows + held:
        pub = published_tokens_per_gpu(r)
        err = pred[r["id"]] / pub - 1.0
        errors[r["id"]] = err
        if args.markdown:
            print(f"| {r['id']} | {r['split']} | {r['gpu']} | {pub:.0f} | {pred[r['id']]:.0f} | {100 * err:+.1f} % |")
        else:
            print(f"{r['id']:<38} {r['split']:<9} published {pub:8.0f}  predicted {pred[r['id']]:8.0f}  "
                  f"error {100 * err:+6.1f} %")
    in_table = [r for r in held if r["gpu_in_table"]]
    for name, group in (("fit", fit_rows), ("held-back", held), ("held-back on a GPU of the table", in_table)):
        worst = max(abs(errors[r["id"]]) for r in group)
        mean = sum(abs(errors[r["id"]]) for r in group) / len(group)
        print(f"{name}: {len(group)} rows, mean |error| {100 * mean:.1f} %, largest |error| {100 * worst:.1f} %")
    if args.check:
        band = band_in_header()
        outside = [r["id"] for r in in_table if abs(errors[r["id"]]) > band + 1e-9]
        if outside:
            print(f"outside the stated band of {100 * band:.1f} %: {', '.join(outside)}")
            return 1
        print(f"every held-back row on a GPU of the table within the stated band of {100 * band:.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
