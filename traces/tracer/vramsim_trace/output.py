"""Writes what the tracer saw: the allocator trace as a vtrace (traces/FORMAT.md) and the phase markers as a
small JSON file beside it. vramsim reads both; the vtrace alone is a normal trace for `replay`, `compare`
and `sweep`."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import List, Optional

# The tensor categories of vramsim's bill (sim/graph/op_graph.h), strongest first: a storage that is a
# parameter and also saved for backward is billed as a parameter.
CATEGORY_RANK = {
    "parameter": 0,
    "gradient": 1,
    "optimizer_state": 2,
    "input": 3,
    "workspace": 4,
    "activation": 5,
    "temporary": 6,
}


@dataclass
class Allocation:
    """One device storage from its allocation to its free (the unit the caching allocator sees)."""

    index: int  # allocation number, also the synthetic address (index + 1) * 512
    size_bytes: int
    stream: int
    op: str  # "<module path>/<aten op>" or "<aten op>"
    layer: int  # -1 outside numbered layers
    phase: str
    category: str = "temporary"
    named: bool = False  # op carries the parameter / state name

    def promote(self, category: str) -> None:
        if CATEGORY_RANK[category] < CATEGORY_RANK[self.category]:
            self.category = category

    @property
    def address(self) -> int:
        return (self.index + 1) * 512


@dataclass
class Event:
    action: str  # "alloc" or "free"
    alloc: Allocation


@dataclass
class Marker:
    event_index: int  # number of trace events (alloc, free_requested, free_completed) before it
    step: int
    phase: str


@dataclass
class TraceLog:
    events: List[Event] = field(default_factory=list)
    markers: List[Marker] = field(default_factory=list)
    vtrace_events: int = 0  # a free is two vtrace events (free_requested + free_completed)
    notes: List[str] = field(default_factory=list)

    def alloc(self, a: Allocation) -> None:
        self.events.append(Event("alloc", a))
        self.vtrace_events += 1

    def free(self, a: Allocation) -> None:
        self.events.append(Event("free", a))
        self.vtrace_events += 2

    def mark(self, step: int, phase: str) -> None:
        if self.markers and self.markers[-1].step == step and self.markers[-1].phase == phase:
            return
        if self.markers and self.markers[-1].event_index == self.vtrace_events:
            self.markers[-1] = Marker(self.vtrace_events, step, phase)  # nothing happened in between
            return
        self.markers.append(Marker(self.vtrace_events, step, phase))


def _encode(text: str) -> str:
    """Percent-encodes %, #, space, control characters and DEL, as traces/FORMAT.md asks."""
    out = []
    for ch in text:
        o = ord(ch)
        if ch in "%#" or o <= 0x20 or o == 0x7F:
            out.append("".join(f"%{b:02X}" for b in ch.encode("utf-8")))
        else:
            out.append(ch)
    return "".join(out)


def write_vtrace(log: TraceLog, path: str, header_comment: Optional[str] = None) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        f.write("vramsim-trace 1\n")
        if header_comment:
            for line in header_comment.splitlines():
                f.write(f"# {line}\n")
        f.write("devices 1\nfinal_state no\n")
        time_ns = 0
        for e in log.events:
            a = e.alloc
            time_ns += 1000
            tags = f"op={_encode(a.op)}"
            if a.layer >= 0:
                tags += f" layer={a.layer}"
            tags += f" phase={_encode(a.phase)} cat={a.category}"
            if e.action == "alloc":
                f.write(f"0 alloc 0x{a.address:x} {a.size_bytes} {a.stream} {time_ns} {tags}\n")
            else:
                f.write(f"0 free_requested 0x{a.address:x} {a.size_bytes} {a.stream} {time_ns}\n")
                f.write(f"0 free_completed 0x{a.address:x} {a.size_bytes} {a.stream} {time_ns}\n")
    os.replace(tmp, path)


def write_markers(log: TraceLog, path: str, meta: dict) -> None:
    obj = dict(meta)
    obj["markers"] = [{"event_index": m.event_index, "step": m.step, "phase": m.phase} for m in log.markers]
    obj["notes"] = list(log.notes)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)
