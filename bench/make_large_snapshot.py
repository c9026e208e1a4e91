#!/usr/bin/python3
"""Makes a large `_dump_snapshot`-shaped pickle for the replay speed and memory measurements (bench/RESULTS.md).

The events are a real allocation sequence: a trace written by `vramsim predict --trace-out` (generated, so it
replays from an empty allocator). Each trace entry then gets a stack, as PyTorch records one: a new `frames`
list per entry whose frame dicts ({"filename", "line", "name"}) come from a shared pool, so that pickle writes
each frame once and refers to it through the memo afterwards, as in the real snapshots.

    make_large_snapshot.py IN.pickle OUT.pickle --entries N --frames K [--pool P]

The first N entries of the input are kept (it must have that many; `predict --steps` sets how many there
are), each with K frames.
"""
import argparse
import pickle
import random
import sys


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("input")
    parser.add_argument("output")
    parser.add_argument("--entries", type=int, required=True)
    parser.add_argument("--frames", type=int, required=True)
    parser.add_argument("--pool", type=int, default=5000, help="distinct frames")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    with open(args.input, "rb") as f:
        snapshot = pickle.load(f)
    base = snapshot["device_traces"][0]
    rng = random.Random(args.seed)
    pool = [{"filename": f"/usr/lib/python3/site-packages/torch/nn/modules/module_{i % 97}.py",
             "line": rng.randrange(1, 3000), "name": f"forward_{i}"} for i in range(args.pool)]
    # A stack is a few call paths that share their outer frames: the outer half of every stack is one of 64
    # prefixes, the inner half drawn from the pool.
    prefixes = [[pool[rng.randrange(args.pool)] for _ in range(args.frames // 2)] for _ in range(64)]
    if len(base) < args.entries:
        parser.error(f"{args.input} has {len(base)} trace entries, fewer than --entries {args.entries}")
    trace = []
    for entry in base[:args.entries]:
        # One str object per distinct key and tag, as CPython's interned identifiers are in PyTorch's dicts:
        # pickle then writes each once and refers to it through the memo.
        entry = {sys.intern(k): sys.intern(v) if isinstance(v, str) else v for k, v in entry.items()}
        inner = [pool[rng.randrange(args.pool)] for _ in range(args.frames - args.frames // 2)]
        entry["frames"] = inner + prefixes[rng.randrange(64)]
        trace.append(entry)
    snapshot["device_traces"] = [trace]
    with open(args.output, "wb") as f:
        pickle.dump(snapshot, f, protocol=4)


if __name__ == "__main__":
    main()
