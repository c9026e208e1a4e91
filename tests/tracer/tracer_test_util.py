"""Shared by the tracer's tests: find PyTorch or skip (exit 77, which CTest reports as skipped), and run code
under a tracing session."""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.normpath(os.path.join(HERE, "..", ".."))
TRACER_DIR = os.path.join(SOURCE, "traces", "tracer")
SKIP = 77

sys.dont_write_bytecode = True
sys.path.insert(0, TRACER_DIR)


def require_torch():
    try:
        import torch  # noqa: F401
    except ImportError:
        print(f"SKIPPED: {sys.executable} has no PyTorch (Debian: apt-get install python3-torch)")
        sys.exit(SKIP)


def traced(fn, **gpu):
    """Runs fn() on a simulated GPU; returns the session (its tracer's log holds the events)."""
    from vramsim_trace.session import GpuInfo, Session

    session = Session(GpuInfo(**gpu) if gpu else None)
    session.start()
    try:
        fn()
    finally:
        session.stop()
    return session


def events(session):
    """[(action, allocation index, size_bytes, category)] in order."""
    return [(e.action, e.alloc.index, e.alloc.size_bytes, e.alloc.category) for e in session.tracer.log.events]


def run_tracer(script_text: str, tmpdir: str, args=()):
    """`python -m vramsim_trace` on a script written to tmpdir; returns (status, stderr, vtrace path)."""
    script = os.path.join(tmpdir, "script.py")
    with open(script, "w", encoding="utf-8") as f:
        f.write(script_text)
    out = os.path.join(tmpdir, "out.vtrace")
    env = dict(os.environ, PYTHONPATH=TRACER_DIR, PYTHONDONTWRITEBYTECODE="1")
    p = subprocess.run([sys.executable, "-m", "vramsim_trace", "--out", out, script, "--", *args],
                       env=env, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stderr, out
