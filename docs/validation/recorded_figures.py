#!/usr/bin/env python3
"""The recorded figures of docs/validation/measurements.json, read from a snapshot's JSON form alone.

peak_reserved: reserved at the end = the final segments' total_size; walking the trace backwards undoes
segment_alloc/map (+size) and segment_free/unmap (-size) to the reserved bytes at trace start; walking forwards
again, the maximum of the running sum. peak_rise: the maximum over the trace of the live requested bytes
(alloc +size, free_completed -size of the same address) relative to the trace's start.

  python3 docs/validation/recorded_figures.py ../shared/traces/real/*.pickle.json   # one JSON line per file

Run on the JSON forms in ../shared/traces/real/ (`vramsim convert` writes one from a pickle); prints one JSON
line per file. Independent of vramsim's code on purpose: these are the figures vramsim is compared with."""
import json, sys, os, collections
for path in sys.argv[1:]:
    d = json.load(open(path))
    traces = d.get("device_traces", [])
    dev = next((i for i, t in enumerate(traces) if t), None)
    if dev is None:
        dev = collections.Counter(s.get("device", 0) for s in d["segments"]).most_common(1)[0][0]
    end = sum(s["total_size"] for s in d["segments"] if s.get("device", 0) == dev)
    ev = traces[dev] if dev < len(traces) else []
    steps = [e["size"] if e["action"] in ("segment_alloc", "segment_map") else -e["size"]
             for e in ev if e["action"] in ("segment_alloc", "segment_map", "segment_free", "segment_unmap")]
    start = end - sum(steps)
    cur = peak = start
    for s in steps:
        cur += s
        peak = max(peak, cur)
    live, rise, best = {}, 0, 0
    for e in ev:
        if e["action"] == "alloc":
            live[e["addr"]] = e["size"]; rise += e["size"]; best = max(best, rise)
        elif e["action"] == "free_completed":
            rise -= live.pop(e["addr"], e["size"])
    print(json.dumps({"file": os.path.basename(path)[:-5], "device": dev, "events": len(ev),
                      "reserved_at_start": start, "peak_reserved": peak, "peak_rise": best}))
