"""The objects the package's calls return: each wraps the document of the command's --json (to_dict() is
that document, to_json() its exact text) and the command's text report (str())."""

from __future__ import annotations

import copy
import html
import json
from typing import Any, List, Optional

from ._cli import table


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


class _Report:
    def __init__(self, json_text: str) -> None:
        self._json = json_text if json_text.endswith("\n") else json_text + "\n"
        self._doc = json.loads(json_text)

    def to_dict(self) -> dict:
        """The command's --json document (a copy)."""
        return copy.deepcopy(self._doc)

    def to_json(self) -> str:
        """The document exactly as `vramsim ... --json` prints it."""
        return self._json

    def __getitem__(self, key: str) -> Any:
        return self._doc[key]

    def __str__(self) -> str:
        return self.to_json()


class _Pages(_Report):
    """A report with the command's pages: the --html page and the --perfetto trace."""

    def __init__(self, result) -> None:
        super().__init__(result.json)
        self._result = result
        self._text_cache: Optional[str] = None

    def __str__(self) -> str:
        if self._text_cache is None:
            self._text_cache = self._result.text()
        return self._text_cache

    def to_html(self) -> str:
        """The self-contained page `--html` writes."""
        return self._result.html()

    def save_html(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.to_html())

    def save_perfetto(self, path: str) -> None:
        """The Chrome trace-event JSON `--perfetto` writes (open it in ui.perfetto.dev)."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(self._result.perfetto())

    def _repr_html_(self) -> str:
        """Jupyter: the text report, and the page in an isolated frame (its scripts and styles stay in it)."""
        report = f"<pre>{html.escape(str(self))}</pre>"
        try:
            page = self.to_html()
        except ValueError:  # no page for this run (every stage of a pipeline): the text alone
            return report
        return (report + '<iframe style="width:100%;height:760px;border:1px solid #ddd" sandbox="allow-scripts" '
                f'srcdoc="{html.escape(page, quote=True)}"></iframe>')


class Prediction(_Pages):
    """What `predict` (and `trace`, `estimate`, `simulate`) found: to_dict() is `vramsim predict --json`'s
    document; str() its text report."""

    @property
    def fits(self) -> bool:
        return bool(self._doc["fits"])

    @property
    def peak_allocated(self) -> int:
        """Peak allocated bytes of the allocator model (torch.cuda.max_memory_allocated())."""
        return self._doc["peak_allocated_bytes"]

    @property
    def peak_reserved(self) -> int:
        """Peak reserved bytes (torch.cuda.max_memory_reserved()), without the CUDA context."""
        return self._doc["peak_reserved_bytes"]

    @property
    def bill(self) -> dict:
        """Bytes by category at the peak (parameters, gradients, optimizer_states, activations, ...)."""
        return dict(self._doc["bill"])

    @property
    def phases(self) -> dict:
        return dict(self._doc.get("phases") or {})

    @property
    def steps(self) -> List[dict]:
        return list(self._doc.get("steps") or [])

    @property
    def verdict(self) -> str:
        """The report's verdict line: "FITS: headroom ...", "OOM: at least ... short ..."."""
        for line in str(self).splitlines():
            if line.startswith("verdict"):
                return line[len("verdict"):].strip()
        return "FITS" if self.fits else "OOM"

    @property
    def checkpoint(self) -> Optional[dict]:
        """The model folder's safetensors checkpoint as its headers describe it (source, files, tensors,
        elements, bytes, bytes_by_dtype, warnings), or None when `model` has none beside its config.json."""
        c = self._doc.get("checkpoint")
        return dict(c) if c is not None else None

    def __repr__(self) -> str:
        where = self._doc.get("gpu") or "the device"
        return (f"<vramsim.Prediction {self._doc.get('model') or self._doc.get('script')} on {where}: "
                f"{'fits' if self.fits else 'OOM'}, peak reserved {_gib(self.peak_reserved)}>")


class Replay(_Pages):
    """What `replay` found: to_dict() is `vramsim replay FILE --json --stats`'s document."""

    @property
    def peak_allocated(self) -> int:
        return self._doc["peak_allocated_bytes"]

    @property
    def peak_reserved(self) -> int:
        return self._doc["peak_reserved_bytes"]

    def memory_stats(self) -> dict:
        """torch.cuda.memory_stats() of the allocator model at the end of the trace: the same flat keys
        ("allocated_bytes.all.current", "num_alloc_retries", ...)."""
        return dict(self._doc["memory_stats"])

    def memory_summary(self) -> str:
        """torch.cuda.memory_summary()'s table of the allocator model at the end of the trace."""
        return self._result.summary()

    def __repr__(self) -> str:
        return (f"<vramsim.Replay {self._doc['file']}: {self._doc['events']} events, peak reserved "
                f"{_gib(self.peak_reserved)}>")


class Fit(_Report):
    """`vramsim fit --json`'s document: best (the largest value that fits; 0: none), trials."""

    @property
    def best(self) -> int:
        return self._doc["best"]

    @property
    def trials(self):
        return table(self._doc["trials"])

    def __repr__(self) -> str:
        return f"<vramsim.Fit largest {self._doc['vary']} that fits: {self.best}>"


class Plan(_Report):
    """`vramsim plan --json`'s document; rows: every configuration predicted (the --csv file's rows)."""

    def __init__(self, json_text: str, rows: List[dict]) -> None:
        super().__init__(json_text)
        self._rows = rows

    @property
    def best(self) -> Optional[dict]:
        return self._doc.get("best")

    @property
    def rows(self):
        return table(self._rows)

    @property
    def pareto(self):
        return table(self._doc.get("pareto") or [])

    def __repr__(self) -> str:
        best = self.best
        return f"<vramsim.Plan {len(self._rows)} configurations; best: {best['configuration'] if best else None}>"


class Compare(_Report):
    """`vramsim compare --json`'s document; rows: one per allocator policy."""

    @property
    def rows(self):
        return table(self._doc["policies"])

    def __repr__(self) -> str:
        return f"<vramsim.Compare {len(self._doc['policies'])} policies on {self._doc['source']}>"


class Sweep(_Report):
    """`vramsim sweep --json`'s document; rows: one per policy; steps: one per policy and step (--csv)."""

    def __init__(self, json_text: str, steps: List[dict]) -> None:
        super().__init__(json_text)
        self._steps = steps

    @property
    def rows(self):
        return table(self._doc["policies"])

    @property
    def steps(self):
        return table(self._steps)

    def __repr__(self) -> str:
        return f"<vramsim.Sweep {self._doc['steps']} steps, {len(self._doc['policies'])} policies>"
