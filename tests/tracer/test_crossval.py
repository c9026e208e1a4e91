"""Cross-validation of the simulator's own layer code against PyTorch: `vramsim predict` (the op graph of
the torch-modules code path) and `vramsim trace` of the same model written in plain PyTorch
(traces/recorders/transformer_models.py, the code the GPU recorder runs), over a grid of options. The
allocation sequences are compared request for request, per phase.

    test_crossval.py PATH/TO/vramsim [--report]     (--report prints every difference and exits 0)"""

import difflib
import json
import os
import subprocess
import sys
import tempfile

from tracer_test_util import SOURCE, require_torch

require_torch()
sys.path.insert(0, os.path.join(SOURCE, "traces", "recorders"))
import record_training_steps as rts  # noqa: E402

VRAMSIM = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(SOURCE, "build", "sim", "vramsim")
REPORT = "--report" in sys.argv
DRIVER = os.path.join(SOURCE, "tests", "tracer", "trace_recorder_config.py")

# Small versions of the recorder's two model families (2 layers, short sequences): the code paths are the
# ones of the full-size grid, the run takes seconds.
SHAPES = {
    "gpt2": {"family": "gpt2", "vocab_size": 1000, "d_model": 128, "n_layers": 2, "n_heads": 4, "n_kv_heads": 4,
             "head_dim": 32, "d_ff": 512, "max_positions": 256},
    "llama": {"family": "llama", "vocab_size": 1000, "d_model": 128, "n_layers": 2, "n_heads": 4, "n_kv_heads": 4,
              "head_dim": 32, "d_ff": 344, "max_positions": 256},
}
GRID = [(family, precision, ckpt, attention)
        for family in ("gpt2", "llama")
        for precision in ("fp32", "amp-bf16")
        for ckpt in ("none", "full")
        for attention in ("math", "flash")
        if not (attention == "flash" and precision == "fp32")]
PHASE_GROUP = {"setup": "setup", "forward": "forward", "loss": "forward", "after_forward": "forward",
               "backward": "backward", "post_backward": "backward", "optimizer": "optimizer",
               "after_optimizer": "optimizer", "zero_grad": "optimizer"}


def gpt2_hf_config(cfg):
    return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": cfg["vocab_size"],
            "n_embd": cfg["d_model"], "n_layer": cfg["n_layers"], "n_head": cfg["n_heads"],
            "n_positions": cfg["max_positions"], "n_inner": cfg["d_ff"]}


def allocations(path):
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 6 and fields[1] == "alloc":
                tags = dict(x.split("=", 1) for x in fields[6:] if "=" in x)
                out.append((int(fields[3]), PHASE_GROUP.get(tags.get("phase", ""), tags.get("phase", "")),
                            tags.get("op", "")))
    return out


def run(args):
    p = subprocess.run(args, capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, VRAMSIM_PYTHON=sys.executable))
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(args)} -> {p.returncode}\n{p.stderr}")
    return p.stdout


def compare(row, d):
    family, precision, ckpt, attention = row
    cfg = dict(SHAPES[family], batch=2, seq=128, precision=precision, checkpointing=ckpt, attention=attention,
               steps=2, optimizer="adamw", name="_".join(row), model=family)
    cfg_path, hf_path = os.path.join(d, "cfg.json"), os.path.join(d, "hf_config.json")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    with open(hf_path, "w") as f:
        json.dump(gpt2_hf_config(cfg) if family == "gpt2" else rts.hf_config_json(cfg), f)
    traced, predicted = os.path.join(d, "traced.vtrace"), os.path.join(d, "predicted.vtrace")
    run([VRAMSIM, "trace", "--gpu", "H100", "--out", traced, DRIVER, "--", cfg_path])
    run([VRAMSIM, "predict", "--model", hf_path, "--model-code", "torch-modules", "--gpu", "H100", "--batch", "2",
         "--seq", "128", "--precision", precision, "--checkpointing", ckpt, "--attention", attention,
         "--optimizer", "adamw", "--steps", "2", "--trace-out", predicted])
    return allocations(traced), allocations(predicted)


def differences(a, b):
    sm = difflib.SequenceMatcher(None, [x[:2] for x in a], [x[:2] for x in b], autojunk=False)
    return [(tag, a[i1:i2], b[j1:j2]) for tag, i1, i2, j1, j2 in sm.get_opcodes() if tag != "equal"]


def main():
    failures = 0
    for row in GRID:
        with tempfile.TemporaryDirectory() as d:
            traced, predicted = compare(row, d)
        per_phase = {}
        for group in ("setup", "forward", "backward", "optimizer"):
            t = [x for x in traced if x[1] == group]
            p = [x for x in predicted if x[1] == group]
            per_phase[group] = (len(t), sum(x[0] for x in t), len(p), sum(x[0] for x in p), differences(t, p))
        same = all(not v[4] for v in per_phase.values())
        failures += 0 if same else 1
        print(f"{'_'.join(row):32} " + "  ".join(
            f"{g} {v[0]}/{v[2]} allocs {'=' if not v[4] else 'DIFFER'}" for g, v in per_phase.items()))
        if REPORT:
            for g, v in per_phase.items():
                for tag, t, p in v[4][:8]:
                    print(f"    {g:9} {tag:7} traced {[(n, op) for n, _, op in t][:4]} predicted {[(n, op) for n, _, op in p][:4]}")
    print(f"{len(GRID) - failures} passed, {failures} failed")
    return 0 if REPORT or failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
