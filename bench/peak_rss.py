#!/usr/bin/python3
"""Runs a command and reports its peak memory split the way the large-snapshot target needs it.

    peak_rss.py CMD [ARGS...]

Prints one line: `peak_rss_kib anon_peak_kib file_peak_kib wall_s exit`. peak_rss is the kernel's VmHWM (the
same figure as `/usr/bin/time -v`'s "Maximum resident set size"); anon and file are the largest RssAnon
(the heap: decoded values, tables) and RssFile (pages of mapped files, the snapshot among them) seen while
sampling /proc/PID/status every 2 ms, so a peak shorter than that can be missed (they are lower bounds).
"""
import subprocess
import sys
import time


def status_kib(pid, keys):
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                name, _, rest = line.partition(":")
                if name in keys:
                    out[name] = int(rest.split()[0])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return out


def main():
    start = time.monotonic()
    proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
    peak = {"VmHWM": 0, "RssAnon": 0, "RssFile": 0}
    while proc.poll() is None:
        s = status_kib(proc.pid, peak.keys())
        for k, v in s.items():
            peak[k] = max(peak[k], v)
        time.sleep(0.002)
    wall = time.monotonic() - start
    print(f"{peak['VmHWM']} {peak['RssAnon']} {peak['RssFile']} {wall:.2f} {proc.returncode}")


if __name__ == "__main__":
    main()
