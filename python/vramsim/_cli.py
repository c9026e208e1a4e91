"""Keyword arguments to the command line's arguments, and the model argument's forms.

Every Python call of this package becomes a `vramsim COMMAND --option value ...` argument list parsed by the
CLI's own parser in this process (vramsim._native): `lora_rank=8` is `--lora-rank 8`, `compile=True` is
`--compile`, `offload=["optimizer", "params"]` is `--offload optimizer params`. An option the command does not
have reaches the parser as well, which rejects it with the CLI's message."""

from __future__ import annotations

import csv
import json
import os
import re
import tempfile
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, Dict, Iterator, List, Optional, Tuple

from . import _native

VramsimError = _native.VramsimError


@lru_cache(maxsize=None)
def _options(command: str) -> Dict[str, Tuple[bool, bool]]:
    """--name -> (is a flag, takes several values), for every long name of `vramsim COMMAND`."""
    table = {}
    for names, flag, many, _help in _native.options(command):
        for name in names:
            table[name] = (flag, many)
    return table


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return str(value)


def cli_args(command: str, options: Dict[str, Any]) -> List[str]:
    """`options` (Python names: lora_rank=8) as `vramsim COMMAND`'s arguments, in the order given. None leaves
    an option out (the CLI's default), as False does for a flag."""
    table = _options(command)
    args: List[str] = []
    for key, value in options.items():
        if value is None:
            continue
        name = "--" + key.replace("_", "-")
        flag, many = table.get(name, (False, False))
        if flag:
            if value is True:
                args.append(name)
            elif value is not False:
                args.append(f"{name}={_text(value)}")  # --compile=max-autotune
        elif isinstance(value, (list, tuple)):
            items = [_text(v) for v in value]
            args += [name, *items] if many else [name, ",".join(items)]
        else:
            args += [name, _text(value)]
    return args


def _hf_config_dict(model: Any) -> Optional[dict]:
    """A transformers PretrainedConfig (duck-typed: transformers need not be installed) as config.json's dict."""
    to_json_string = getattr(model, "to_json_string", None)
    if callable(to_json_string) and hasattr(model, "model_type"):
        return json.loads(to_json_string(use_diff=False))
    return None


@contextmanager
def model_arg(model: Any) -> Iterator[str]:
    """--model's text for `model`: a preset name, a config.json path, a model folder or a Hugging Face hub id
    (str or path) as given; a dict or a transformers config written to a config.json in a scratch folder for
    the call (the report names that file)."""
    if isinstance(model, (str, os.PathLike)):
        yield os.fspath(model)
        return
    config = model if isinstance(model, dict) else _hf_config_dict(model)
    if config is None:
        raise TypeError(
            "model: a preset name, a config.json path, a model folder, a Hugging Face hub id, a dict in "
            f"config.json's form or a transformers config; got {type(model).__name__}")
    name = str(config.get("_name_or_path") or config.get("model_type") or "config")
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "config"
    with tempfile.TemporaryDirectory(prefix="vramsim-model-") as folder:
        path = os.path.join(folder, name + ".json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(config, f)
        yield path


def run_json(args: List[str]) -> str:
    """What `vramsim ARGS... --json` prints, run in this process."""
    _status, out = _native.run(args + ["--json"])
    return out.decode("utf-8")


def read_csv_rows(path: str) -> List[dict]:
    """A --csv file's rows, numbers as int or float, empty cells as None."""
    def value(text: str):
        if text == "":
            return None
        for kind in (int, float):
            try:
                return kind(text)
            except ValueError:
                pass
        return text

    with open(path, newline="", encoding="utf-8") as f:
        return [{k: value(v) for k, v in row.items()} for row in csv.DictReader(f)]


def table(rows: List[dict]):
    """`rows` as a pandas DataFrame when pandas is importable, else the list of dicts itself."""
    try:
        import pandas
    except ImportError:
        return rows
    return pandas.DataFrame(rows)
