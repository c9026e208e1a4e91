#!/usr/bin/env python3
"""Ground truth for `vramsim predict`: run real training steps on a GPU and record what PyTorch's allocator did.

For every configuration of a grid (model, batch, sequence, precision, activation checkpointing, attention
kernel), in a fresh process each (a fresh allocator, as `vramsim predict` assumes):
  * builds a GPT-2 or Llama style decoder-only Transformer in plain torch.nn (transformer_models.py), written
    the way vramsim's `torch-modules` code path models it, directly on the GPU;
  * runs --steps training steps (default 2, so AdamW's states exist): forward (under torch.autocast for
    amp-bf16), HF's causal-LM loss, backward, AdamW.step() (foreach, the CUDA default), zero_grad();
  * with torch.cuda.memory._record_memory_history(max_entries=...) on from before the model exists.
Written to OUT/<config>/:
  snapshot.pickle      torch.cuda.memory._snapshot(), stack frames stripped (vramsim replay reads it)
  memory_stats.json    torch.cuda.memory_stats() at the end, plus max_memory_allocated / reserved
  device_memory.json   cudaMemGetInfo (and NVML, if pynvml is installed) before the model, after each step,
                       at the end: what the device says is in use
  predict_command.txt  the `vramsim predict` command line that models the same run (one line, shell-quoted)
  config.json          the configuration, versions, timings and status
  hf_config.json       (Llama configurations) the Hugging Face config.json that --model reads
OUT/record_index.json lists every configuration and its status.

--dry-run needs no torch and no GPU: it writes config.json, hf_config.json and predict_command.txt for each
configuration and marks them "dry-run" (validate_on_gpu.sh --dry-run uses it).

Examples:
  record_training_steps.py --out /tmp/rec --grid quick
  record_training_steps.py --out /tmp/rec --configs gpt2_b8_s512_fp32_none_math --dry-run
  record_training_steps.py --list --grid full
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import recorder_common as rc  # noqa: E402

# ---- models: vramsim presets, and Llama shapes given to vramsim as a Hugging Face config.json -----------------

GPT2_PRESETS = {  # name -> (d_model, n_layers, n_heads), as sim/models/model_config.cpp
    "gpt2": (768, 12, 12),
    "gpt2-medium": (1024, 24, 16),
    "gpt2-large": (1280, 36, 20),
}
LLAMA_SHAPES = {  # name -> (d_model, n_layers, n_heads, n_kv_heads, d_ff, vocab); MHA only (see models file)
    "llama-160m": (768, 12, 12, 12, 2048, 32000),
    "llama-1.1b": (2048, 22, 32, 32, 5632, 32000),
}


def model_config(name: str) -> dict:
    if name in GPT2_PRESETS:
        d, n_layers, n_heads = GPT2_PRESETS[name]
        return {"family": "gpt2", "vocab_size": 50257, "d_model": d, "n_layers": n_layers, "n_heads": n_heads,
                "n_kv_heads": n_heads, "head_dim": d // n_heads, "d_ff": 4 * d, "max_positions": 1024}
    if name in LLAMA_SHAPES:
        d, n_layers, n_heads, n_kv, d_ff, vocab = LLAMA_SHAPES[name]
        return {"family": "llama", "vocab_size": vocab, "d_model": d, "n_layers": n_layers, "n_heads": n_heads,
                "n_kv_heads": n_kv, "head_dim": d // n_heads, "d_ff": d_ff, "max_positions": 4096}
    raise SystemExit(f"record_training_steps.py: unknown model {name!r} "
                     f"(known: {', '.join(list(GPT2_PRESETS) + list(LLAMA_SHAPES))})")


def hf_config_json(cfg: dict) -> dict:
    """The config.json `vramsim predict --model` reads for a Llama shape (sim/models/model_config.cpp)."""
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": cfg["vocab_size"],
            "hidden_size": cfg["d_model"], "num_hidden_layers": cfg["n_layers"],
            "num_attention_heads": cfg["n_heads"], "num_key_value_heads": cfg["n_kv_heads"],
            "intermediate_size": cfg["d_ff"], "max_position_embeddings": cfg["max_positions"],
            "tie_word_embeddings": False}


# ---- the grid ------------------------------------------------------------------------------------------------

# model, batch, seq, precision, checkpointing, attention. "quick" is sized for validate_on_gpu.sh's 8-minute
# budget on one H200; flash needs a 16-bit dtype, so it only appears with amp-bf16.
QUICK_GRID = [
    ("gpt2", 8, 512, "fp32", "none", "math"),
    ("gpt2", 8, 512, "amp-bf16", "none", "math"),
    ("gpt2", 8, 512, "amp-bf16", "full", "math"),
    ("gpt2", 8, 1024, "amp-bf16", "none", "flash"),
    ("gpt2-medium", 4, 1024, "amp-bf16", "none", "flash"),
    ("gpt2-large", 4, 512, "amp-bf16", "full", "math"),
    ("llama-160m", 8, 1024, "fp32", "none", "math"),
    ("llama-160m", 8, 1024, "amp-bf16", "full", "flash"),
    ("llama-1.1b", 4, 1024, "amp-bf16", "full", "flash"),
    ("llama-1.1b", 2, 2048, "amp-bf16", "none", "flash"),
]


def full_grid() -> list[tuple]:
    rows = []
    for model, (batch, seq), precision, ckpt, attention in itertools.product(
            list(GPT2_PRESETS) + list(LLAMA_SHAPES), [(4, 512), (8, 1024)], ["fp32", "amp-bf16"], ["none", "full"],
            ["math", "flash"]):
        if attention == "flash" and precision == "fp32":
            continue
        if model.startswith("gpt2") and seq > 1024:
            continue
        rows.append((model, batch, seq, precision, ckpt, attention))
    return rows


def config_name(row: tuple) -> str:
    model, batch, seq, precision, ckpt, attention = row
    return f"{model}_b{batch}_s{seq}_{precision}_{ckpt}_{attention}"


def make_config(row: tuple, steps: int) -> dict:
    model, batch, seq, precision, ckpt, attention = row
    cfg = model_config(model)
    cfg.update({"name": config_name(row), "model": model, "batch": batch, "seq": seq, "precision": precision,
                "checkpointing": ckpt, "attention": attention, "steps": steps, "optimizer": "adamw"})
    return cfg


def predict_argv(cfg: dict, vramsim: str, gpu: str, config_dir: str) -> list[str]:
    """The `vramsim predict` command that models this run; it writes predict.json's trace next to it."""
    model = cfg["model"] if cfg["family"] == "gpt2" else os.path.join(config_dir, "hf_config.json")
    return [vramsim, "predict", "--model", model, "--gpu", gpu, "--batch", str(cfg["batch"]), "--seq",
            str(cfg["seq"]), "--precision", cfg["precision"], "--checkpointing", cfg["checkpointing"],
            "--attention", cfg["attention"], "--optimizer", "adamw", "--steps", str(cfg["steps"]), "--json",
            "--trace-out", os.path.join(config_dir, "predicted.vtrace")]


def write_plan_files(cfg: dict, out: str, vramsim: str, gpu: str) -> str:
    d = os.path.join(out, cfg["name"])
    os.makedirs(d, exist_ok=True)
    if cfg["family"] == "llama":
        rc.write_json(os.path.join(d, "hf_config.json"), hf_config_json(cfg))
    with open(os.path.join(d, "predict_command.txt"), "w", encoding="utf-8") as f:
        f.write(rc.shell_line(predict_argv(cfg, vramsim, gpu, d)) + "\n")
    return d


# ---- one configuration, on the GPU (child process) ------------------------------------------------------------

def record_one(cfg: dict, config_dir: str, max_entries: int, device: int) -> dict:
    import torch

    import transformer_models as tm

    torch.cuda.set_device(device)
    torch.cuda.init()
    torch.manual_seed(0)
    dev = torch.device("cuda", device)
    info = {"versions": rc.torch_versions(torch)}
    device_memory = {"before_model": rc.device_memory_now(torch, device), "after_step": []}
    amp = cfg["precision"] == "amp-bf16"
    t0 = time.monotonic()

    rc.start_recording(torch, max_entries)
    model = tm.build_model(cfg).to_empty(device=dev)  # parameters allocated in registration order
    model.init_on_device()
    model.train()
    ids = torch.randint(0, cfg["vocab_size"], (cfg["batch"], cfg["seq"])).to(dev)  # batch.to(device)
    labels = torch.randint(0, cfg["vocab_size"], (cfg["batch"], cfg["seq"])).to(dev)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    logits = loss = None
    for _ in range(cfg["steps"]):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            logits = model(ids)  # rebinding frees the previous step's logits only now, as in a training loop
            loss = tm.causal_lm_loss(logits, labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        device_memory["after_step"].append(rc.device_memory_now(torch, device))
    del logits, loss  # the script's variables go away, as the simulated run ends
    torch.cuda.synchronize()
    info["train_seconds"] = round(time.monotonic() - t0, 3)

    device_memory["end"] = rc.device_memory_now(torch, device)
    stats = dict(torch.cuda.memory_stats(device))
    stats["max_memory_allocated"] = torch.cuda.max_memory_allocated(device)
    stats["max_memory_reserved"] = torch.cuda.max_memory_reserved(device)
    rc.write_json(os.path.join(config_dir, "memory_stats.json"), stats)
    base = device_memory["before_model"]["cuda_mem_get_info_used_bytes"]
    device_memory["end_minus_before_model_bytes"] = device_memory["end"]["cuda_mem_get_info_used_bytes"] - base
    device_memory["max_after_step_minus_before_model_bytes"] = max(
        s["cuda_mem_get_info_used_bytes"] - base for s in device_memory["after_step"])
    rc.write_json(os.path.join(config_dir, "device_memory.json"), device_memory)
    info["snapshot"] = rc.save_snapshot(torch, os.path.join(config_dir, "snapshot.pickle"))
    torch.cuda.memory._record_memory_history(enabled=None)
    info["total_seconds"] = round(time.monotonic() - t0, 3)
    return info


# ---- driver --------------------------------------------------------------------------------------------------

def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="output folder (one subfolder per configuration)")
    p.add_argument("--grid", choices=["quick", "full"], default="quick", help="configuration grid")
    p.add_argument("--configs", help="comma-separated configuration names (subset of the grid)")
    p.add_argument("--steps", type=int, default=2, help="training steps per configuration")
    p.add_argument("--max-entries", type=int, default=1_000_000, help="allocator trace ring-buffer size")
    p.add_argument("--device", type=int, default=0, help="CUDA device index")
    p.add_argument("--vramsim", default="build/sim/vramsim", help="vramsim binary, for predict_command.txt")
    p.add_argument("--gpu", default="H200", help="--gpu for vramsim predict (default: H200)")
    p.add_argument("--timeout", type=float, default=240.0, help="seconds per configuration")
    p.add_argument("--dry-run", action="store_true", help="no torch, no GPU: write the plan files only")
    p.add_argument("--list", action="store_true", help="print the configuration names and exit")
    p.add_argument("--child", help=argparse.SUPPRESS)  # one configuration, in this process
    a = p.parse_args(argv)
    if a.steps < 1:
        p.error("--steps must be at least 1")
    if not a.list and not a.out:
        p.error("--out is required")
    return a


def selected_rows(a: argparse.Namespace) -> list[tuple]:
    rows = QUICK_GRID if a.grid == "quick" else full_grid()
    if not a.configs:
        return rows
    by_name = {config_name(r): r for r in QUICK_GRID + full_grid()}
    wanted = [c for c in a.configs.split(",") if c]
    unknown = [c for c in wanted if c not in by_name]
    if unknown:
        raise SystemExit(f"record_training_steps.py: unknown configuration(s): {', '.join(unknown)} "
                         f"(see --list --grid full)")
    return [by_name[c] for c in wanted]


def main(argv: list[str]) -> int:
    a = parse_args(argv)
    rows = selected_rows(a)
    if a.list:
        print("\n".join(config_name(r) for r in rows))
        return 0
    os.makedirs(a.out, exist_ok=True)
    if a.child:
        cfg = make_config(next(r for r in rows if config_name(r) == a.child), a.steps)
        d = os.path.join(a.out, cfg["name"])
        cfg["recording"] = record_one(cfg, d, a.max_entries, a.device)
        cfg["status"] = "recorded"
        rc.write_json(os.path.join(d, "config.json"), cfg)
        return 0

    index = []
    for row in rows:
        cfg = make_config(row, a.steps)
        d = write_plan_files(cfg, a.out, a.vramsim, a.gpu)
        if a.dry_run:
            cfg["status"] = "dry-run"
            rc.write_json(os.path.join(d, "config.json"), cfg)
        else:
            started = time.monotonic()
            status = rc.run_child([sys.executable, os.path.abspath(__file__), "--out", a.out, "--grid", a.grid,
                                   "--configs", cfg["name"], "--steps", str(a.steps), "--max-entries",
                                   str(a.max_entries), "--device", str(a.device), "--child", cfg["name"]],
                                  None, a.timeout, os.path.join(d, "record.log"))
            status["seconds"] = round(time.monotonic() - started, 1)
            if status.get("exit_code") != 0:  # the child wrote no config.json: say why here
                cfg["status"] = "failed"
                cfg["failure"] = status
                rc.write_json(os.path.join(d, "config.json"), cfg)
            cfg["status"] = rc.read_json(os.path.join(d, "config.json")).get("status", "failed")
            cfg["child"] = status
        entry = {"name": cfg["name"], "status": cfg["status"]}
        if "child" in cfg:
            entry["child"] = cfg["child"]
        index.append(entry)
        print(f"{cfg['name']}: {cfg['status']}", flush=True)
    rc.write_json(os.path.join(a.out, "record_index.json"), index)
    failed = [i["name"] for i in index if i["status"] not in ("recorded", "dry-run")]
    if failed:
        print(f"record_training_steps.py: {len(failed)} configuration(s) failed: {', '.join(failed)} "
              f"(see their record.log)", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
