"""The training run of traces/recorders/record_training_steps.py (record_one), for `vramsim trace`: the same
model code (transformer_models.py), the same loop, the same order of allocations, built the way PyTorch 1.13
allows (on the CPU, then to_empty() on the GPU: 1.13 has no `with torch.device(...)`).

    vramsim trace tests/tracer/trace_recorder_config.py -- CONFIG_NAME [--layers N] [--steps N]

CONFIG_NAME is a record_training_steps.py configuration (gpt2_b8_s512_fp32_none_math, ...); --layers
overrides the layer count (the tests trace small versions of the grid's models)."""

import argparse
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "traces", "recorders"))
import record_training_steps as rts  # noqa: E402
import transformer_models as tm  # noqa: E402


def config_from_name(name: str, steps: int) -> dict:
    model, b, s, precision, ckpt, attention = name.split("_")
    return rts.make_config((model, int(b[1:]), int(s[1:]), precision, ckpt, attention), steps)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("config", help="a record_training_steps.py configuration name, or a JSON file of one")
    p.add_argument("--layers", type=int)
    p.add_argument("--steps", type=int, default=2)
    a = p.parse_args()
    if a.config.endswith(".json"):
        with open(a.config, encoding="utf-8") as f:
            cfg = json.load(f)
    else:
        cfg = config_from_name(a.config, a.steps)
    if a.layers:
        cfg["n_layers"] = a.layers
    dev = torch.device("cuda", 0)
    amp = cfg["precision"] == "amp-bf16"
    model_cls = tm.GPT2LMHeadModel if cfg["family"] == "gpt2" else tm.LlamaForCausalLM
    model = model_cls(cfg).to_empty(device=dev)  # parameters allocated in registration order
    model.init_on_device()
    model.train()
    ids = torch.randint(0, cfg["vocab_size"], (cfg["batch"], cfg["seq"])).to(dev)
    labels = torch.randint(0, cfg["vocab_size"], (cfg["batch"], cfg["seq"])).to(dev)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    logits = loss = None
    mode = cfg.get("mode", "train")
    for _ in range(cfg["steps"]):
        if mode == "inference":  # vramsim predict --inference
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
                logits = model(ids)
            continue
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            logits = model(ids)
            if mode == "forward-only":  # vramsim predict --forward-only
                continue
            loss = tm.causal_lm_loss(logits, labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    del logits, loss


if __name__ == "__main__":
    main()
