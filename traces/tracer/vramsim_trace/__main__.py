"""python -m vramsim_trace [options] SCRIPT.py [-- ARGS...]: runs SCRIPT.py unmodified on a simulated GPU
and writes its allocator trace. Exit status: 0 traced, 2 bad options, 3 the script failed or needs
something the simulation cannot give (one line on stderr says what and where), 4 this interpreter has no
PyTorch. The outcome is also written to OUT.status ("traced", "failed" or "no-torch"): a script can end the
interpreter with any status itself (os._exit(4)), so vramsim trusts the exit status only with that file."""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import threading
import traceback


def _write_status(out: str, outcome: str) -> None:
    try:
        with open(out + ".status", "w", encoding="utf-8") as f:
            f.write(outcome)
    except OSError:
        pass


def _script_error(script: str, exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    where = None
    script_abs = os.path.abspath(script)
    for f in reversed(frames):
        if os.path.abspath(f.filename) == script_abs:
            where = f"{f.filename}:{f.lineno}"
            break
    if where is None:
        for f in reversed(frames):
            if "/torch/" not in f.filename and "vramsim_trace" not in f.filename:
                where = f"{f.filename}:{f.lineno}"
                break
    msg = str(exc).splitlines()[0] if str(exc) else ""
    return f"{where or script}: {type(exc).__name__}: {msg}"


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    script_args = []
    if "--" in argv:
        i = argv.index("--")
        argv, script_args = argv[:i], argv[i + 1:]
    p = argparse.ArgumentParser(prog="python -m vramsim_trace", description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="the vtrace to write (markers go to OUT.markers.json)")
    p.add_argument("--gpu", default="H100-80GB", help="GPU name the program sees")
    p.add_argument("--compute-capability", type=float, default=9.0)
    p.add_argument("--total-memory", type=int, default=85520809984, help="bytes the program sees as total")
    p.add_argument("--cublas-workspace-bytes", type=int, default=None,
                   help="per handle and stream (default: PyTorch's choice for the compute capability)")
    p.add_argument("script")
    a = p.parse_args(argv)
    if not os.path.isfile(a.script):
        print(f"{a.script}: no such file", file=sys.stderr)
        _write_status(a.out, "failed")
        return 2

    try:
        import torch  # noqa: F401  (after argument errors, so that they come fast)
    except ImportError:
        _write_status(a.out, "no-torch")
        return 4  # silent: vramsim tries the next interpreter, and names them all if none has PyTorch

    from . import write_outputs
    from .session import GpuInfo, Session

    session = Session(GpuInfo(a.gpu, a.compute_capability, a.total_memory), a.cublas_workspace_bytes)
    sys.argv = [a.script] + script_args
    sys.path.insert(0, os.path.dirname(os.path.abspath(a.script)))
    status = 0
    # An exception in one of the script's threads ends that thread only (Python prints it and goes on): the
    # trace holds what ran, and the run says that a thread raised.
    thread_errors = []
    previous_hook = threading.excepthook

    def _thread_hook(args):
        if args.exc_value is not None and not thread_errors:
            thread_errors.append(_script_error(a.script, args.exc_value))
        previous_hook(args)

    threading.excepthook = _thread_hook
    session.start()
    try:
        runpy.run_path(a.script, run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            print(f"{a.script}: the script exited with status {e.code}", file=sys.stderr)
            status = 3
    except BaseException as e:  # noqa: BLE001 - everything the script raises is reported in one line
        print(_script_error(a.script, e), file=sys.stderr)
        if os.environ.get("VRAMSIM_TRACE_DEBUG"):
            traceback.print_exc()
        status = 3
    finally:
        session.stop()
        threading.excepthook = previous_hook
    if status == 0:
        write_outputs(session, a.out, {"script": a.script, "script_args": script_args})
        _write_status(a.out, "traced")
        if thread_errors:
            print(f"note: a thread of the script raised ({thread_errors[0]}); the trace holds what ran",
                  file=sys.stderr)
    else:
        _write_status(a.out, "failed")
    return status


if __name__ == "__main__":
    sys.exit(main())
