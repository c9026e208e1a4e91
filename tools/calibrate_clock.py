#!/usr/bin/env python3
"""Calibrates the time model's compute efficiency on public throughput measurements and reports its error.

The table: tests/data/throughput/measurements.json (one row per published figure, its source, the run as
`vramsim predict` arguments for one rank, and its role: "fit", "held-back" or "not-modelled").

Procedure (Note [Default efficiencies] in sim/engine/roofline.h cites it):
  1. Every "fit" and "held-back" row runs `vramsim predict ARGS --json` with --compute-efficiency C (and the
     default --memory-efficiency); its tokens/s per GPU is the rank's tokens/s divided by the GPUs that work on
     the same tokens (tensor-parallel x pipeline ranks).
  2. The published figure as tokens/s per GPU: torchtitan's WPS / TPS per GPU as is; Megatron's achieved
     teraFLOP/s per GPU X divided by Eq. 3 of Narayanan et al. 2021 per token, 96 l h^2 (1 + s/6h + V/16lh)
     FLOPs (activation recomputation included, as the paper counts it).
  3. C is fitted on the "fit" rows alone by least squares on log(predicted / published): the rows are
     compute-bound (large GEMMs), so predicted tokens/s is close to proportional to C and the minimiser is
     C <- C x geomean(published / predicted); that step is repeated with fresh predictions until C moves
     less than 0.5 %, then C is rounded to two decimals and the rows predicted once more.
  4. The error of each row at the final C: (predicted - published) / published; the held-back rows were
     not used in 1-3. Their largest |error| is the band plan's ties use (sim/predict/time_model_error.h).

  calibrate_clock.py --vramsim build-check/vramsim                 # fit, then report every row
  calibrate_clock.py --vramsim build-check/vramsim --check         # no fit: the built-in defaults' errors;
                                                                   # exit 1 if a held-back row is outside
                                                                   # the band time_model_error.h states
Writes a Markdown table of the rows to stdout (--markdown) or plain lines.
"""
import argparse
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


def predicted_tokens_per_gpu(vramsim, row, compute_efficiency):
    cmd = [vramsim, "predict"] + shlex.split(row["args"]) + ["--json"]
    if compute_efficiency is not None:
        cmd += ["--compute-efficiency", f"{compute_efficiency:.6f}"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{row['id']}: {' '.join(cmd)}: {out.stderr.strip()}")
    timing = json.loads(out.stdout)["timing"]
    return timing["tokens_per_s"] / (row["tp"] * row["pp"])


def predict_rows(vramsim, rows, c):
    return {r["id"]: predicted_tokens_per_gpu(vramsim, r, c) for r in rows}


def fit(vramsim, rows, start):
    c = start
    for _ in range(8):
        pred = predict_rows(vramsim, rows, c)
        logs = [math.log(published_tokens_per_gpu(r) / pred[r["id"]]) for r in rows]
        new_c = min(1.0, c * math.exp(sum(logs) / len(logs)))
        print(f"fit: C {c:.4f} -> {new_c:.4f}", file=sys.stderr)
        if abs(new_c / c - 1.0) < 0.005:
            return new_c
        c = new_c
    return c


def band_in_header():
    text = open(os.path.join(ROOT, "sim", "predict", "time_model_error.h")).read()
    return float(re.search(r"kTimeModelRelativeError = ([0-9.]+);", text).group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vramsim", required=True)
    ap.add_argument("--check", action="store_true", help="no fit: report the built-in defaults' errors")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--start", type=float, default=0.70, help="the fit's first compute efficiency")
    args = ap.parse_args()
    rows = json.load(open(TABLE))["rows"]
    fit_rows = [r for r in rows if r["split"] == "fit"]
    held = [r for r in rows if r["split"] == "held-back"]
    c = None
    if not args.check:
        c = round(fit(args.vramsim, fit_rows, args.start), 2)
        print(f"fitted compute efficiency {c:.2f}", file=sys.stderr)
    pred = predict_rows(args.vramsim, fit_rows + held, c)
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
    for name, group in (("fit", fit_rows), ("held-back", held)):
        worst = max(abs(errors[r["id"]]) for r in group)
        mean = sum(abs(errors[r["id"]]) for r in group) / len(group)
        print(f"{name}: {len(group)} rows, mean |error| {100 * mean:.1f} %, largest |error| {100 * worst:.1f} %")
    if args.check:
        band = band_in_header()
        outside = [r["id"] for r in held if abs(errors[r["id"]]) > band + 1e-9]
        if outside:
            print(f"outside the stated band of {100 * band:.1f} %: {', '.join(outside)}")
            return 1
        print(f"every held-back row within the stated band of {100 * band:.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
