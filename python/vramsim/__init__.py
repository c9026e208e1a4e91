"""vramsim from Python: will this PyTorch job fit in GPU memory, and why not?

    import vramsim
    p = vramsim.predict(model="llama-2-7b", gpu="h100-80gb", batch=4, seq=4096, precision="bf16",
                        optimizer="adamw-8bit", checkpointing="full")
    p.fits, p.peak_reserved, p.bill          # what `vramsim predict --json` says, as Python values
    print(p)                                 # its text report
    vramsim.estimate(my_module, x, torch.optim.AdamW(my_module.parameters()), gpu="a100-40gb")

Every call runs the command line's own commands in this process (the C++ library, vramsim._native): the
keyword arguments are the CLI's options (lora_rank=8 is --lora-rank 8), the results are its --json documents
and its errors are raised as VramsimError with the CLI's message. See docs/python.md."""

from __future__ import annotations

import os
import tempfile
import warnings
from contextlib import contextmanager
from typing import Any, Iterator, List, Optional, Sequence

from . import _native
from ._cli import VramsimError, cli_args, model_arg, read_csv_rows, run_json
from ._simulate import Simulation, default_loss, estimate, simulate
from .results import Compare, Fit, Plan, Prediction, Replay, Sweep

__all__ = ["predict", "fit", "plan", "replay", "compare", "sweep", "estimate", "simulate", "cli",
           "Prediction", "Replay", "Fit", "Plan", "Compare", "Sweep", "Simulation", "VramsimError",
           "default_loss"]
__version__ = "0.1"


@contextmanager
def _request(command: str, model: Any, options: dict, positional: Sequence[str] = ()) -> Iterator[List[str]]:
    """`vramsim COMMAND [POSITIONAL] --model M --option value ...`, the model written to a file for the call
    when it is a dict or a transformers config."""
    args = [command, *positional]
    if model is None:
        yield args + cli_args(command, options)
        return
    with model_arg(model) as m:
        yield args + ["--model", m] + cli_args(command, options)


def predict(model: Any = None, gpu: Optional[str] = None, batch: Optional[int] = None, seq: Any = None,
            **options: Any) -> Prediction:
    """`vramsim predict --model MODEL --gpu GPU --batch BATCH --seq SEQ --OPTION VALUE ...` in this process.
    `model`: a preset name, a config.json path, a model folder, a Hugging Face hub id in the local cache, a dict
    in config.json's form or a transformers config. Options are predict's (`vramsim predict --help`):
    precision="bf16", optimizer="adamw-8bit", checkpointing="full", lora_rank=16, compile=True, ..."""
    with _request("predict", model, {"gpu": gpu, "batch": batch, "seq": seq, **options}) as args:
        prediction = Prediction(_native.result(args))
    for message in (prediction.checkpoint or {}).get("warnings", []):
        warnings.warn(message, stacklevel=2)  # the CLI's "vramsim: warning:" lines
    return prediction


def fit(model: Any = None, gpu: Optional[str] = None, seq: Any = None, **options: Any) -> Fit:
    """`vramsim fit ...`: the largest batch (vary="seq": sequence length) that fits with `margin` kept free."""
    with _request("fit", model, {"gpu": gpu, "seq": seq, **options}) as args:
        return Fit(run_json(args))


def plan(model: Any = None, gpu: Optional[str] = None, global_batch: Optional[int] = None, seq: Any = None,
         **options: Any) -> Plan:
    """`vramsim plan ...`: the fastest configuration that fits. `.rows` is every configuration predicted (a
    pandas DataFrame when pandas is importable, else a list of dicts); `.best`, `.pareto` as plan --json's."""
    with tempfile.TemporaryDirectory(prefix="vramsim-plan-") as folder:
        csv_path = os.path.join(folder, "plan.csv")
        with _request("plan", model, {"gpu": gpu, "global_batch": global_batch, "seq": seq, **options,
                                      "csv": csv_path}) as args:
            text = run_json(args)
        return Plan(text, read_csv_rows(csv_path))


def compare(file: Optional[str] = None, model: Any = None, **options: Any) -> Compare:
    """`vramsim compare [FILE] ...`: every allocator policy on a recorded snapshot (`file`) or a generated
    training step (`model=`, `gpu=`, `batch=`, `seq=` as predict's). `.rows`: one per policy."""
    positional = [os.fspath(file)] if file is not None else []
    with _request("compare", model, options, positional) as args:
        return Compare(run_json(args))


def sweep(model: Any = None, seq: Any = None, **options: Any) -> Sweep:
    """`vramsim sweep ...`: steps of drawn shapes (seq="uniform:128..2048") through the allocator policies.
    `.rows`: one per policy; `.steps`: one per policy and step."""
    with tempfile.TemporaryDirectory(prefix="vramsim-sweep-") as folder:
        csv_path = os.path.join(folder, "sweep.csv")
        with _request("sweep", model, {"seq": seq, **options, "csv": csv_path}) as args:
            text = run_json(args)
        return Sweep(text, read_csv_rows(csv_path))


def replay(path: Any, **options: Any) -> Replay:
    """`vramsim replay PATH --stats ...`: a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot's pickle,
    its JSON, or a .vtrace) through the allocator model. memory_stats() and memory_summary() are PyTorch's."""
    args = ["replay", os.fspath(path), "--stats"] + cli_args("replay", options)
    return Replay(_native.result(args))


def cli(*args: str) -> str:
    """`vramsim ARGS...` in this process; returns what it printed (raises VramsimError as it would fail)."""
    _status, out = _native.run([str(a) for a in args])
    return out.decode("utf-8")
