"""The snapshots vramsim writes (`replay --snapshot-out`, `predict --trace-out`) have the keys and types that
PyTorch's `torch.cuda.memory._dump_snapshot()` writes and that its memory viewer (MemoryViz.js, behind
pytorch.org/memory_viz) and `torch.cuda._memory_viz` read.

    test_snapshot_viewer_format.py PATH/TO/vramsim [TestClass ...]

CTest runs the cases that can skip (SchemaAgainstRealSnapshots without shared/traces/real,
PyTorchMemoryVizOracle without torch.cuda._memory_viz) as tests of their own, so that a skip is reported as
skipped (exit 77, ctest_unittest.py) without hiding the cases that ran.

The expected schema is written out below from PyTorch's sources, not derived from vramsim's output. The
project targets the dict form of PyTorch 2.1 and later (segments + device_traces, blocks with `address`,
`requested_size` and `frames`). PyTorch 1.13 and 2.0 stored a per-block `history` instead; vramsim does not
write it, and the viewers of 2.1+ and 1.13's `_memory_viz` functions do not need it (both fall back to
`requested_size`/`size` when it is absent). Sources, repository pytorch/pytorch:

  [MS-2.4]  torch/csrc/cuda/memory_snapshot.cpp @ 00067369c9339bed950762afec327514d6fa2566 (about 2.3-2.4),
            _memory_snapshot_pickled(): every key and type of the segment, block and trace-entry dicts,
            the top level {segments, device_traces, allocator_settings}.
  [MS-new]  the same file @ 127b7ad1e585768808db4c3d1420a39ca7ac7338 (newest stored copy): adds trace-entry
            compile_context and user_metadata, top-level external_annotations.
  [VIZ-2.1] torch/utils/viz/MemoryViz.js @ c4b5ac720f8359f20813826d66b5e880bfdf07ca (about 2.1).
  [VIZ-2.4] torch/utils/viz/MemoryViz.js @ 00067369c9339bed950762afec327514d6fa2566: annotate_snapshot,
            process_alloc_data, MemoryView, and its own unpickle() (the opcodes it accepts).
  [VIZ-new] torch/utils/viz/process_alloc_data.js @ a8f30ff877ba07d1421207bf7b5fa4e142f0249d (newest).
  [PYVIZ]   torch/cuda/_memory_viz.py @ 0044eb6704e63eec2a52110f4b1a44331e3d4342: segsum, trace, segments.
  [PY-1.13] torch/cuda/_memory_viz.py of the installed torch 1.13 (run below as an oracle when present).
  [REAL]    shared/traces/real/*.pickle: cranberrii (PyTorch about 2.1-2.3), kkaitlyn111_memory_ctx128_forward
            (2.6.0), MAGMA27 (2.11.0); the schema below is also checked against them."""

import copy
import io
import json
import os
import pickle
import pickletools
import subprocess
import sys
import tempfile
import unittest
from contextlib import redirect_stdout

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.normpath(os.path.join(HERE, "..", ".."))
NAME = "test_snapshot_viewer_format"
VRAMSIM = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(SOURCE, "build", "sim", "vramsim")
SAMPLE = os.path.join(SOURCE, "traces", "samples", "kkaitlyn111_memory_ctx128_forward.pickle")
REAL_DIR = os.path.normpath(os.path.join(SOURCE, "..", "shared", "traces", "real"))
REAL_FILES = ("cranberrii_memory_snapshot.pickle", "kkaitlyn111_memory_ctx128_forward.pickle",
              "MAGMA27_memory_snapshot.pickle")
# A small, fast prediction (README: predict presets); it allocates parameters, activations, gradients, ...
PREDICT_ARGS = ["predict", "--model", "gpt2", "--gpu", "A100-80GB", "--batch", "1", "--seq", "64"]


def skip(why):
    print(f"SKIPPED {NAME}: {why}")
    sys.exit(77)


# ---------------------------------------------------------------------------------------------------------
# The schema. Types are Python types after pickle.load; "pickle"/"json" differ only where JSON has no tuple.

# Top level. [MS-2.4] result.insert("segments"/"device_traces"/"allocator_settings"); [MS-new] adds
# "external_annotations". MemoryViz reads snapshot.segments and iterates snapshot.device_traces
# unconditionally ([VIZ-2.4] annotate_snapshot), so both are required; allocator_settings is optional to the
# viewer (newest: "No allocator settings found." when absent) and absent before about 2.3 [REAL cranberrii].
TOP_REQUIRED = {"segments": list, "device_traces": list}
TOP_OPTIONAL = {"allocator_settings": dict, "external_annotations": list,
                # vramsim's own (traces/FORMAT.md): a generated trace has no final state.
                "vramsim_has_final_state": bool,
                # vramsim's own, for the viewer (see check_categories).
                "categores": list}

# Segment dict, [MS-2.4] = [MS-new] segmentInfoToDict. segment_pool_id is std::tuple<int64_t, int64_t>, which
# the C++ Pickler writes as a tuple ([REAL]: type tuple in every 2.x file); Python code compares it with
# tuples (`seg["segment_pool_id"] == (0, 0)`), which a list never equals.
SEGMENT_KEYS = {"device": int, "address": int, "total_size": int, "allocated_size": int, "active_size": int,
                "requested_size": int, "stream": int, "segment_type": str, "segment_pool_id": tuple,
                "is_expandable": bool, "frames": list, "blocks": list}
SEGMENT_TYPES = {"small", "large"}  # [MS-2.4]: is_large ? "large" : "small"

# Block dict, [MS-2.4] blockDict. If "frames" is present the viewer takes requested_size as is ([VIZ-2.4]
# annotate_snapshot: the legacy fallback only runs without "frames"), and so does [PYVIZ] _block_extra.
BLOCK_KEYS = {"address": int, "size": int, "requested_size": int, "state": str, "frames": list}
BLOCK_STATES = {"active_allocated", "active_pending_free", "inactive"}  # [MS-2.4]

# A stack frame, [MS-2.4] ivalue_symbolize; the viewer formats `${f.filename}:${f.line}:${f.name}`.
FRAME_KEYS = {"filename": str, "line": int, "name": str}

# Trace entries, [MS-2.4]: action, addr (device_free for oom), size, stream, time_us, and frames only when
# a context was recorded ([VIZ-2.4] annotate_snapshot sets frames = [] when absent). time_us is absent in
# older files ([REAL cranberrii]); compile_context (str) and user_metadata come with [MS-new] / 2.6+.
TRACE_REQUIRED = {"action": str, "size": int, "stream": int}
TRACE_OPTIONAL = {"time_us": int, "frames": list, "compile_context": str, "user_metadata": (str, dict),
                  # vramsim's own tags (traces/FORMAT.md); "category" is what MemoryViz colours by.
                  "op": str, "category": str, "phase": str, "layer": int}
# [MS-2.4] action_to_str, the actions the viewer's switch statements know ([VIZ-2.4], [VIZ-new]).
ACTIONS = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "segment_map",
           "segment_unmap", "snapshot", "oom"}

# allocator_settings, [MS-2.4] (+ graph_capture_record_stream_reuse in [MS-new]); the viewer only prints it.
SETTINGS_KEYS = {"PYTORCH_CUDA_ALLOC_CONF": str, "max_split_size": int, "garbage_collection_threshold": float,
                 "expandable_segments": bool, "pinned_num_register_threads": int,
                 "release_lock_on_cudamalloc": bool, "pinned_use_cuda_host_register": bool,
                 "graph_capture_record_stream_reuse": bool, "roundup_power2_divisions": dict}

# The opcodes [VIZ-2.4] unpickle() accepts (anything else: "UNKNOWN OPCODE"), protocol 2-4. LONG1 longer
# than 8 bytes becomes a BigInt there, which the address arithmetic of that version cannot mix with Numbers.
VIEWER_OPCODES = {"PROTO", "APPEND", "APPENDS", "LIST", "TUPLE", "NEWFALSE", "NEWTRUE", "NONE", "BINGET",
                  "BININT", "BININT1", "BININT2", "EMPTY_DICT", "EMPTY_LIST", "FRAME", "LONG1", "LONG_BINGET",
                  "MARK", "MEMOIZE", "BINPUT", "LONG_BINPUT", "SETITEMS", "SETITEM", "DICT", "SHORT_BINUNICODE",
                  "BINUNICODE", "STOP", "EMPTY_TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "BINFLOAT"}
# The viewer holds integers as JS Numbers: exact below 2^53.
JS_SAFE = 2 ** 53


def type_ok(value, expected):
    """isinstance, except that bool is not an int (True would pickle as NEWTRUE, not a number)."""
    kinds = expected if isinstance(expected, tuple) else (expected,)
    if isinstance(value, bool):
        return bool in kinds
    return isinstance(value, kinds)


def type_name(t):
    return "/".join(k.__name__ for k in t) if isinstance(t, tuple) else t.__name__


class Checker:
    """Collects every deviation from the schema and from the consistency rules the viewers rely on."""

    def __init__(self, form):
        self.form = form  # "pickle" or "json"
        self.problems = []

    def bad(self, where, what):
        self.problems.append(f"{where}: {what}")

    def keys(self, obj, where, required, optional=None, allow_unknown=False):
        if not isinstance(obj, dict):
            self.bad(where, f"expected a dict, got {type(obj).__name__}")
            return False
        optional = optional or {}
        for key, t in required.items():
            if key not in obj:
                self.bad(where, f"missing key {key!r}")
        for key, value in obj.items():
            t = required.get(key, optional.get(key))
            if t is None:
                if not allow_unknown:
                    self.bad(where, f"key {key!r} is not in the schema")
                continue
            if self.form == "json" and t is tuple:
                t = list  # JSON has no tuples; the .pickle.json files hold lists
            if not type_ok(value, t):
                self.bad(f"{where}.{key}", f"expected {type_name(t)}, got {type(value).__name__} {value!r:.60}")
        return True

    def uint(self, value, where, limit=JS_SAFE):
        if type_ok(value, int) and not 0 <= value < limit:
            self.bad(where, f"{value} is outside [0, {limit})")

    def frames(self, frames, where):
        if isinstance(frames, list):
            for i, f in enumerate(frames):
                self.keys(f, f"{where}[{i}]", FRAME_KEYS)

    def snapshot(self, d, where="top"):
        if not self.keys(d, where, TOP_REQUIRED, TOP_OPTIONAL):
            return self.problems
        segments = d.get("segments") if isinstance(d.get("segments"), list) else []
        traces = d.get("device_traces") if isinstance(d.get("device_traces"), list) else []
        for i, seg in enumerate(segments):
            self.segment(seg, f"segments[{i}]")
        self.segment_order(segments)
        devices = {s.get("device") for s in segments if isinstance(s, dict) and type_ok(s.get("device"), int)}
        if devices and max(devices) >= len(traces):
            # The viewer's segment view reads snapshot.device_traces[device] for every device with segments.
            self.bad("device_traces", f"{len(traces)} lists, but segments on device {max(devices)}")
        for dev, trace in enumerate(traces):
            if not isinstance(trace, list):
                self.bad(f"device_traces[{dev}]", f"expected a list, got {type(trace).__name__}")
                continue
            for i, e in enumerate(trace):
                self.entry(e, f"device_traces[{dev}][{i}]")
            if d.get("vramsim_has_final_state") is False:
                self.pairing(trace, f"device_traces[{dev}]")
        if isinstance(d.get("allocator_settings"), dict):
            self.keys(d["allocator_settings"], "allocator_settings", {}, SETTINGS_KEYS)
        self.categories(d, traces)
        return self.problems

    def segment(self, seg, where):
        if not self.keys(seg, where, SEGMENT_KEYS):
            return
        for key in ("address", "total_size", "allocated_size", "active_size", "requested_size"):
            self.uint(seg.get(key), f"{where}.{key}")
        if seg.get("segment_type") not in SEGMENT_TYPES:
            self.bad(f"{where}.segment_type", f"{seg.get('segment_type')!r} not in {sorted(SEGMENT_TYPES)}")
        pool = seg.get("segment_pool_id")
        if isinstance(pool, (list, tuple)) and (len(pool) != 2 or not all(type_ok(p, int) for p in pool)):
            self.bad(f"{where}.segment_pool_id", f"expected two ints, got {pool!r}")
        self.frames(seg.get("frames"), f"{where}.frames")
        blocks = seg.get("blocks")
        if not isinstance(blocks, list):
            return
        if not blocks:
            self.bad(f"{where}.blocks", "a segment has at least one block")
        # [MS-2.4]: blockDict address = segment address + sizes of the earlier blocks; the viewer recomputes
        # b.addr the same way ([VIZ-2.4] annotate_snapshot), so a recorded one must agree.
        addr = seg.get("address")
        allocated = active = requested = total = 0
        for j, b in enumerate(blocks):
            bw = f"{where}.blocks[{j}]"
            if not self.keys(b, bw, BLOCK_KEYS):
                continue
            size, state = b.get("size"), b.get("state")
            if not (type_ok(size, int) and type_ok(b.get("requested_size"), int) and type_ok(addr, int)):
                return
            self.uint(size, f"{bw}.size")
            if b.get("address") != addr:
                self.bad(f"{bw}.address", f"{b.get('address')} != segment address + earlier sizes = {addr}")
            if state not in BLOCK_STATES:
                self.bad(f"{bw}.state", f"{state!r} not in {sorted(BLOCK_STATES)}")
            if state != "inactive":
                active += size
                requested += b["requested_size"]
                # The viewer draws requested_size and size - requested_size ([VIZ-2.4] MemoryView.draw).
                if b["requested_size"] > size:
                    self.bad(f"{bw}.requested_size", f"{b['requested_size']} > size {size}")
            if state == "active_allocated":
                allocated += size
            self.frames(b.get("frames"), f"{bw}.frames")
            addr += size
            total += size
        # [PY-1.13] stats asserts total_size == sum of block sizes; [PYVIZ] segsum asserts the same via free +
        # allocated; allocated/active/requested_size follow the blocks (spec §8.3, [REAL] all agree exactly;
        # [PYVIZ] trace() uses allocated_size to find an address's segment).
        for key, value in (("total_size", total), ("allocated_size", allocated), ("active_size", active),
                           ("requested_size", requested)):
            if seg.get(key) != value:
                self.bad(f"{where}.{key}", f"{seg.get(key)} != {value} from the blocks")

    def segment_order(self, segments):
        # [MS-2.4] segments come per device in address order; they never overlap (one address space).
        last = {}
        for i, s in enumerate(segments):
            if not (isinstance(s, dict) and type_ok(s.get("address"), int) and type_ok(s.get("total_size"), int)):
                continue
            dev = s.get("device")
            if dev in last and s["address"] < last[dev]:
                self.bad(f"segments[{i}]", f"address {s['address']:#x} overlaps or precedes the previous segment")
            last[dev] = s["address"] + s["total_size"]

    def entry(self, e, where):
        if not isinstance(e, dict):
            self.bad(where, f"expected a dict, got {type(e).__name__}")
            return
        action = e.get("action")
        addr_key = "device_free" if action == "oom" else "addr"  # [MS-2.4]: OOM == action ? device_free : addr
        self.keys(e, where, dict(TRACE_REQUIRED, **{addr_key: int}), TRACE_OPTIONAL)
        if action not in ACTIONS:
            self.bad(f"{where}.action", f"{action!r} is not an action the viewer knows")
        self.uint(e.get(addr_key), f"{where}.{addr_key}")
        self.uint(e.get("size"), f"{where}.size")
        self.frames(e.get("frames"), f"{where}.frames")

    def pairing(self, trace, where):
        """A trace that starts from an empty allocator: the viewer pairs alloc and free_completed by address
        ([VIZ-2.4] process_alloc_data, addr_to_alloc), so a live address is never allocated again, every free
        frees a live allocation, with its size, and free_requested / free_completed come in pairs."""
        live, requested = {}, set()
        for i, e in enumerate(trace):
            if not isinstance(e, dict) or not type_ok(e.get("addr"), int):
                continue
            a, action, size = e["addr"], e.get("action"), e.get("size")
            if action == "alloc":
                if a in live:
                    self.bad(f"{where}[{i}]", f"alloc at {a:#x}, which is still live")
                live[a] = size
            elif action == "free_requested":
                if a not in live or a in requested:
                    self.bad(f"{where}[{i}]", f"free_requested of {a:#x}, which is not live")
                requested.add(a)
            elif action == "free_completed":
                if a not in requested:
                    self.bad(f"{where}[{i}]", f"free_completed of {a:#x} without free_requested")
                elif live[a] != size:
                    self.bad(f"{where}[{i}]", f"freed size {size} != allocated size {live[a]}")
                requested.discard(a)
                live.pop(a, None)

    def categories(self, d, traces):
        """[VIZ-2.1], [VIZ-2.4] and the newest MemoryViz.js end annotate_snapshot with
            if (snapshot.categories.length > 0 && !snapshot.categories.includes('unknown'))
              snapshot.categores.push('unknown');   // sic
        so a file whose trace entries carry categories, none of them "unknown", throws a TypeError in the
        viewer unless the top level has a "categores" list for that push to land in."""
        cats = {e.get("category") for t in traces if isinstance(t, list) for e in t
                if isinstance(e, dict) and "category" in e}
        if cats and "unknown" not in cats and not isinstance(d.get("categores"), list):
            self.bad("top", f"trace categories {sorted(map(str, cats))} without 'unknown' and no 'categores' "
                            "list: MemoryViz throws on snapshot.categores.push")


def check(d, form="pickle"):
    return Checker(form).snapshot(d)


def pickle_problems(data):
    """Opcodes the viewer's own unpickler ([VIZ-2.4] unpickle) does not know, or a protocol outside 2-4."""
    problems = []
    for op, arg, _pos in pickletools.genops(data):
        if op.name not in VIEWER_OPCODES:
            problems.append(f"opcode {op.name} is not read by MemoryViz's unpickle")
        elif op.name == "PROTO" and not 2 <= arg <= 4:
            problems.append(f"protocol {arg} (MemoryViz reads 2-4)")
        elif op.name == "LONG1" and arg >= JS_SAFE:
            problems.append(f"integer {arg} is not exact as a JS Number")
    return sorted(set(problems))


# ---------------------------------------------------------------------------------------------------------

def vramsim(*args):
    p = subprocess.run([VRAMSIM, *args], capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise AssertionError(f"vramsim {' '.join(args)} -> {p.returncode}\n{p.stderr}")
    return p


class Outputs:
    """vramsim's snapshot (replay --snapshot-out) and trace (predict --trace-out), pickle and JSON, made once."""
    dir = None

    @classmethod
    def make(cls):
        if cls.dir is None:
            cls.tmp = tempfile.TemporaryDirectory()
            cls.dir = cls.tmp.name
            vramsim("replay", SAMPLE, "--snapshot-out", cls.path("snap.pickle"))
            vramsim("replay", SAMPLE, "--snapshot-out", cls.path("snap.json"))
            vramsim(*PREDICT_ARGS, "--trace-out", cls.path("trace.pickle"))
            vramsim(*PREDICT_ARGS, "--trace-out", cls.path("trace.json"))

    @classmethod
    def path(cls, name):
        return os.path.join(cls.dir, name)

    @classmethod
    def raw(cls, name):
        cls.make()
        with open(cls.path(name), "rb") as f:
            return f.read()

    @classmethod
    def load(cls, name):
        data = cls.raw(name)
        return json.loads(data) if name.endswith(".json") else pickle.loads(data)


def report(problems, shown=12):
    more = [f"... and {len(problems) - shown} more"] if len(problems) > shown else []
    return "\n  ".join([f"{len(problems)} problem(s):"] + problems[:shown] + more)


class Case(unittest.TestCase):
    def assertClean(self, problems):  # noqa: N802 (unittest style)
        if problems:
            self.fail(report(problems))


class SchemaOfVramsimOutput(Case):
    def test_snapshot_out(self):
        d = Outputs.load("snap.pickle")
        self.assertClean(check(d))
        # The replayed model's final state: the sample's 516 segments, blocks in every state it has.
        self.assertGreater(len(d["segments"]), 100)
        states = {b["state"] for s in d["segments"] for b in s["blocks"]}
        self.assertIn("active_allocated", states)
        self.assertIn("inactive", states)

    def test_trace_out(self):
        d = Outputs.load("trace.pickle")
        self.assertClean(check(d))
        actions = {e["action"] for e in d["device_traces"][0]}
        self.assertEqual(actions, {"alloc", "free_requested", "free_completed"})
        self.assertGreater(len(d["device_traces"][0]), 1000)

    def test_json_forms(self):
        for name in ("snap.json", "trace.json"):
            with self.subTest(name=name):
                d = Outputs.load(name)
                self.assertClean(check(d, "json"))

    def test_pickles_use_only_opcodes_the_viewer_reads(self):
        for name in ("snap.pickle", "trace.pickle"):
            with self.subTest(name=name):
                self.assertClean(pickle_problems(Outputs.raw(name)))

    def test_vramsim_reads_its_output_back(self):
        Outputs.make()
        for name in ("snap.pickle", "trace.pickle", "trace.json"):
            with self.subTest(name=name):
                j = json.loads(vramsim("replay", Outputs.path(name), "--json").stdout)
                self.assertIn("peak_reserved_bytes", j)


class SchemaAgainstRealSnapshots(Case):
    """The schema above describes what PyTorch 2.1-2.11 wrote: real files pass the same checks."""

    def test_real_files(self):
        if not os.path.isdir(REAL_DIR):
            self.skipTest(f"{REAL_DIR} is missing")
        for name in REAL_FILES:
            with self.subTest(name=name):
                with open(os.path.join(REAL_DIR, name), "rb") as f:
                    data = f.read()
                d = pickle.loads(data)
                self.assertClean(check(d))
                self.assertClean(pickle_problems(data))


class CheckerCatchesBreakage(unittest.TestCase):
    """Each check can fail: a broken copy of vramsim's output is reported."""

    def broken(self, name, mutate):
        d = copy.deepcopy(Outputs.load(name))
        mutate(d)
        return check(d)

    def test_breaks_are_reported(self):
        seg = lambda d: d["segments"][0]  # noqa: E731
        ev = lambda d: d["device_traces"][0]  # noqa: E731
        cases = {
            "missing segment key": ("snap.pickle", lambda d: seg(d).pop("segment_type")),
            "address as str": ("snap.pickle", lambda d: seg(d).__setitem__("address", str(seg(d)["address"]))),
            "pool id as list": ("snap.pickle", lambda d: seg(d).__setitem__("segment_pool_id", [0, 0])),
            "is_expandable as int": ("snap.pickle", lambda d: seg(d).__setitem__("is_expandable", 0)),
            "unknown state": ("snap.pickle", lambda d: seg(d)["blocks"][0].__setitem__("state", "allocated")),
            "block size off": ("snap.pickle", lambda d: seg(d)["blocks"][0].__setitem__(
                "size", seg(d)["blocks"][0]["size"] + 512)),
            "allocated_size off": ("snap.pickle", lambda d: seg(d).__setitem__(
                "allocated_size", seg(d)["allocated_size"] + 1)),
            "block frames not a list": ("snap.pickle", lambda d: seg(d)["blocks"][0].__setitem__("frames", None)),
            "bad frame": ("snap.pickle", lambda d: seg(d)["frames"].append({"filename": "x.py", "line": "1"})),
            "no device_traces": ("snap.pickle", lambda d: d.pop("device_traces")),
            "unknown action": ("trace.pickle", lambda d: ev(d)[0].__setitem__("action", "malloc")),
            "addr as float": ("trace.pickle", lambda d: ev(d)[0].__setitem__("addr", float(ev(d)[0]["addr"]))),
            "missing stream": ("trace.pickle", lambda d: ev(d)[0].pop("stream")),
            "double alloc": ("trace.pickle", lambda d: ev(d).insert(1, dict(ev(d)[0]))),
            "categores dropped": ("trace.pickle", lambda d: d.pop("categores", None)),
        }
        for label, (name, mutate) in cases.items():
            with self.subTest(label=label):
                self.assertNotEqual(self.broken(name, mutate), [], f"{label}: not reported")
        self.assertNotEqual(pickle_problems(pickle.dumps({"a": {1, 2}}, protocol=4)), [])  # EMPTY_SET
        self.assertNotEqual(pickle_problems(pickle.dumps({"a": 1}, protocol=5)), [])


class PyTorchMemoryVizOracle(unittest.TestCase):
    """The installed torch's own torch.cuda._memory_viz on vramsim's snapshot: real PyTorch code. torch 1.13
    ([PY-1.13]) has stats/segments/memory/compare, which take the list of segments (1.13's
    torch.cuda.memory_snapshot()); 2.1+ ([PYVIZ]) take the dict and add segsum and trace."""

    def setUp(self):
        try:
            import torch.cuda._memory_viz as viz  # noqa: F401
        except ImportError as e:
            self.skipTest(f"no torch.cuda._memory_viz ({e})")
        self.viz = viz
        self.d = Outputs.load("snap.pickle")
        self.dict_form = hasattr(viz, "segsum")  # 2.1+: the functions take the snapshot dict
        self.arg = self.d if self.dict_form else self.d["segments"]

    def flame_lines(self, fn, *args):
        lines = fn(*args, format_flamegraph=lambda text: text).splitlines()  # no flamegraph.pl download
        return [(line.rsplit(" ", 1)[0], int(line.rsplit(" ", 1)[1])) for line in lines]

    def test_segments_and_memory(self):
        reserved = sum(s["total_size"] for s in self.d["segments"])
        for fn in (self.viz.segments, self.viz.memory):
            with self.subTest(fn=fn.__name__):
                lines = self.flame_lines(fn, self.arg)
                self.assertEqual(sum(n for _, n in lines), reserved)
                states = {key.split(";")[2 if fn is self.viz.segments else 1] for key, _ in lines}
                self.assertTrue(states <= BLOCK_STATES, states)

    def test_stats_or_segsum(self):
        reserved = sum(s["total_size"] for s in self.d["segments"])
        allocated = sum(s["allocated_size"] for s in self.d["segments"])
        if self.dict_form:
            text = self.viz.segsum(self.d)  # asserts free + allocated == total_size per segment
            self.assertIn(f"segments: {len(self.d['segments'])}", text)
            self.viz.trace(self.d)
        else:
            stats = self.viz.stats(self.arg)  # asserts total_size == sum of block sizes per segment
            self.assertEqual(stats["segments"], len(self.d["segments"]))
            self.assertEqual(stats["total_size"].value, reserved)
            self.assertEqual(stats["active_allocated"].value, allocated)

    def test_compare(self):
        segs = self.d["segments"]  # compare takes two lists of segments in 1.13 and 2.x alike
        before, after = segs[: len(segs) // 2], segs[len(segs) // 4:]
        with redirect_stdout(io.StringIO()) as out:
            lines = self.flame_lines(self.viz.compare, before, after)
        self.assertIn("only_before", out.getvalue())
        only = sum(s["total_size"] for s in segs[: len(segs) // 4]) + \
            sum(s["total_size"] for s in segs[len(segs) // 2:])
        self.assertEqual(sum(n for _, n in lines), only)


if __name__ == "__main__":
    for need in (VRAMSIM, SAMPLE):
        if not os.path.exists(need):
            skip(f"{need} is missing")
    from ctest_unittest import run

    run(sys.argv[2:])
