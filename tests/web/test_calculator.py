"""The calculator page (web/, built by web/build.sh) in headless Chromium against the native CLI.

Each case fills the form through the page's query parameters and runs it (run=1); the page runs
`vramsim predict` compiled to WebAssembly. The expected command line is written out by hand here from the
form's fields (not read from the page), and the native binary runs it with --json and --html: the page must
show the same command, print the same --json text byte for byte, carry the same --html page in its frame, and
the frame's DOM, as the browser built it, must hold the report's series and segments. A bad flag must give
the CLI's own one-line error.

    test_calculator.py VRAMSIM_BINARY WEB_DIR

Exit 77 (CTest: skipped) without chromium or without WEB_DIR/vramsim.js (emscripten not installed, web/build.sh
not run)."""

import fcntl
import html
import html.parser
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse

SKIP = 77
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
GEMMA_CONFIG = os.path.join(ROOT, "tests", "data", "hf_configs", "google__gemma-3-1b-it.config.json")

# (name, query parameters, the predict flags the form stands for). Written from the form's rules
# (web/calculator.js commandLine): --model --gpu --batch --seq always; --inference or --generate N (and
# --kv-cache when not dynamic) by mode; then each of precision, optimizer, checkpointing, world-size, tp, pp,
# zero, fsdp, lora-rank, base-weights that differs from the CLI's default; --fsdp2; then the extra flags.
CASES = [
    ("gpt2, the CLI's defaults",
     {"model": "gpt2", "gpu": "H100-80GB", "batch": "2", "seq": "256"},
     ["--model", "gpt2", "--gpu", "H100-80GB", "--batch", "2", "--seq", "256"]),
    ("QLoRA: llama-3-8b on an RTX 4090, nf4 base weights, LoRA rank 16, paged 8-bit AdamW, full checkpointing",
     {"model": "llama-3-8b", "gpu": "RTX-4090", "batch": "1", "seq": "2048", "precision": "bf16",
      "optimizer": "paged-adamw-8bit", "checkpointing": "full", "lora-rank": "16", "base-weights": "nf4"},
     ["--model", "llama-3-8b", "--gpu", "RTX-4090", "--batch", "1", "--seq", "2048", "--precision", "bf16",
      "--optimizer", "paged-adamw-8bit", "--checkpointing", "full", "--lora-rank", "16", "--base-weights",
      "nf4"]),
    ("FSDP2 full-shard over 8 GPUs, bf16, full checkpointing",
     {"model": "llama-2-7b", "gpu": "A100-80GB", "batch": "1", "seq": "4096", "precision": "amp-bf16",
      "checkpointing": "full", "world-size": "8", "fsdp": "full-shard", "fsdp2": "1"},
     ["--model", "llama-2-7b", "--gpu", "A100-80GB", "--batch", "1", "--seq", "4096", "--precision", "amp-bf16",
      "--checkpointing", "full", "--world-size", "8", "--fsdp", "full-shard", "--fsdp2"]),
    ("generation: 64 new tokens through a static KV cache",
     {"model": "tinyllama-1.1b", "gpu": "L4", "batch": "4", "seq": "512", "mode": "generate",
      "generate": "64", "kv-cache": "static", "precision": "bf16"},
     ["--model", "tinyllama-1.1b", "--gpu", "L4", "--batch", "4", "--seq", "512", "--generate", "64",
      "--kv-cache", "static", "--precision", "bf16"]),
    ("Megatron tensor x pipeline parallel with 4 micro-batches",
     {"model": "llama-2-13b", "gpu": "H100-80GB", "batch": "1", "seq": "4096", "precision": "bf16",
      "world-size": "4", "tp": "2", "pp": "2", "extra": "--grad-accumulation 4"},
     ["--model", "llama-2-13b", "--gpu", "H100-80GB", "--batch", "1", "--seq", "4096", "--precision", "bf16",
      "--world-size", "4", "--tp", "2", "--pp", "2", "--grad-accumulation", "4"]),
]

# A config.json pasted into the page: the model the CLI reads from the same file.
CONFIG_CASE = ("gemma-3-1b from its config.json, compiled",
               {"gpu": "L4", "batch": "1", "seq": "512", "precision": "bf16", "extra": "--compile"},
               ["--gpu", "L4", "--batch", "1", "--seq", "512", "--precision", "bf16", "--compile"])


def browser():
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Chromium:
    """Headless chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe: the browser reads
    JSON messages ending in a NUL byte on fd 3 and writes its own on fd 4). The page's run is awaited in real
    time, by reading <body data-state> until it says "done" or "error": a --dump-dom under a virtual time budget
    could write the DOM while the WebAssembly was still compiling in the background (a CI run caught one page
    still "running")."""

    def __init__(self, path, profile):
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        # The child's fds 3 and 4, dup'ed apart from any pipe end that already sits at 3 or 4.
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_child_r, from_child_w)]

        def pipes_at_3_and_4():
            os.dup2(high[0], 3)
            os.dup2(high[1], 4)

        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [path, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", f"--user-data-dir={profile}",
             "--remote-debugging-pipe", "--enable-logging=stderr", "--v=0", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.log, pass_fds=(3, 4),
            preexec_fn=pipes_at_3_and_4)
        for fd in [to_child_r, from_child_w, *high]:
            os.close(fd)
        self._next_id, self._buffer = 0, b""

    def call(self, method, session=None, **params):
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session is not None:
            message["sessionId"] = session
        os.write(self._to_child, json.dumps(message).encode() + b"\0")
        while True:  # events and other replies are skipped: only this call's reply is awaited
            while b"\0" not in self._buffer:
                chunk = os.read(self._from_child, 1 << 16)
                if not chunk:
                    raise RuntimeError(f"chromium closed its pipe during {method}")
                self._buffer += chunk
            line, self._buffer = self._buffer.split(b"\0", 1)
            reply = json.loads(line)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]

    def evaluate(self, session, expression):
        return self.call("Runtime.evaluate", session, expression=expression,
                         returnByValue=True)["result"].get("value")

    def close(self):
        try:
            self.call("Browser.close")
        except (RuntimeError, OSError):
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_child)
        os.close(self._from_child)
        self.log.seek(0)
        return self.log.read()


def run_page(chromium, web_dir, query, timeout_s=180):
    """The page's DOM once its run ended (or once timeout_s passed: the slowest case takes a few seconds on an idle
    2-core machine), and chromium's log."""
    url = "file://" + os.path.join(web_dir, "index.html") + "?" + urllib.parse.urlencode(dict(query, run="1"))
    with tempfile.TemporaryDirectory() as profile:
        chrome = Chromium(chromium, profile)
        try:
            target = chrome.call("Target.createTarget", url=url)["targetId"]
            session = chrome.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                state = chrome.evaluate(session, "document.body ? document.body.dataset.state : null")
                if state in ("done", "error"):
                    break
                time.sleep(0.2)
            dom = chrome.evaluate(session, "document.documentElement.outerHTML")
        finally:
            log = chrome.close()
    return dom or "", log


class Dom(html.parser.HTMLParser):
    """The attributes and the text of the elements with an id in a dumped DOM (attribute values unescaped:
    the frame's srcdoc holds a whole page, '>' included)."""

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.attrs, self.text, self._open = {}, {}, []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "body":
            self.attrs["<body>"] = a
        if "id" in a:
            self.attrs[a["id"]] = a
            self.text[a["id"]] = ""
        if tag not in ("meta", "link", "input", "br", "img"):
            self._open.append(a.get("id"))

    def handle_endtag(self, tag):
        if self._open:
            self._open.pop()

    def handle_data(self, data):
        for ident in self._open:
            if ident is not None:
                self.text[ident] += data


def cli(vramsim, flags, work):
    page = os.path.join(work, "cli.html")
    if os.path.exists(page):
        os.remove(page)
    out = subprocess.run([vramsim, "predict", *flags, "--json", "--html", page], capture_output=True, text=True,
                         timeout=600)
    html_text = open(page, encoding="utf-8").read() if os.path.exists(page) else None
    return out, html_text


class Failures:
    def __init__(self):
        self.count = 0

    def check(self, ok, what):
        print(("ok      " if ok else "FAILED  ") + what)
        self.count += 0 if ok else 1


def check_case(f, chromium, vramsim, web_dir, work, name, query, flags, config_path=None):
    print(f"--- {name}")
    text, log = run_page(chromium, web_dir, query)
    dom = Dom(text)
    state = dom.attrs.get("<body>", {}).get("data-state")
    f.check(state == "done", f"the page's run ended: data-state {state}")
    cli_flags = (["--model", config_path] if config_path else []) + flags
    shown = ["--model", "config.json"] + flags if config_path else flags
    f.check(dom.text.get("command") == "vramsim predict " + " ".join(shown),
            f"the page's command: {dom.text.get('command')}")
    expected, expected_html = cli(vramsim, cli_flags, work)
    no_picture = expected.returncode != 0 and "--html: one rank's run only" in expected.stderr
    if no_picture:  # the page falls back to the numbers alone, as the CLI does without --html
        expected = subprocess.run([vramsim, "predict", *cli_flags, "--json"], capture_output=True, text=True)
    f.check(expected.returncode == 0, f"the CLI ran {expected.stderr.strip()}")
    page_json = dom.text.get("json")
    if config_path:  # the model is named by its path: the page's file system holds it at /input/config.json
        got, want = json.loads(page_json or "null"), json.loads(expected.stdout)
        f.check(got is not None and got.pop("model") == "/input/config.json" and
                want.pop("model") == config_path, "the model is the config.json")
        f.check(got == want, "--json equals the CLI's, but for the model's path")
    else:
        f.check(page_json is not None and page_json + "\n" == expected.stdout,
                "--json equals the CLI's byte for byte")
    p = json.loads(expected.stdout)
    print(f"        CLI: peak reserved {p['peak_reserved_bytes']}, peak allocated {p['peak_allocated_bytes']}, "
          f"fits {p['fits']}")
    f.check("Content Security Policy" not in log, "nothing the page's policy had to block")
    f.check("Uncaught" not in log and ":ERROR:CONSOLE" not in log, "no console error")
    report = dom.attrs.get("report", {})
    if no_picture:
        f.check("add --pp-stage N" in dom.text.get("error", ""), "no picture, and the page says why")
        return
    if not config_path:
        f.check(report.get("srcdoc") == expected_html, "the frame holds the CLI's --html page byte for byte")
    series = expected_html.count('class="series"')
    segments = expected_html.count('class="segment"')
    f.check(series >= 3 and segments >= 1, f"the CLI's page has {series} series, {segments} segments")
    f.check(report.get("data-series") == str(series) and report.get("data-segments") == str(segments),
            f"the browser drew them in the frame: {report.get('data-series')} series, "
            f"{report.get('data-segments')} segments")


def check_bad_flag(f, chromium, vramsim, web_dir):
    print("--- a bad flag")
    query = {"model": "gpt2", "gpu": "H100-80GB", "batch": "1", "seq": "128", "extra": "--optimizer adamx"}
    text, _ = run_page(chromium, web_dir, query)
    dom = Dom(text)
    expected = subprocess.run([vramsim, "predict", "--model", "gpt2", "--gpu", "H100-80GB", "--batch", "1",
                               "--seq", "128", "--optimizer", "adamx", "--json"], capture_output=True, text=True)
    state = dom.attrs.get("<body>", {}).get("data-state")
    f.check(state == "error", f"the page's run failed: data-state {state}")
    f.check(expected.returncode == 2 and expected.stderr.count("\n") == 1, "the CLI: one line, exit status 2")
    f.check(dom.text.get("error", "") + "\n" == expected.stderr,
            f"the page shows the CLI's line: {dom.text.get('error')}")


def main():
    vramsim, web_dir = sys.argv[1], os.path.abspath(sys.argv[2])
    chromium = browser()
    if chromium is None:
        print("SKIPPED the calculator page: no chromium on PATH")
        return SKIP
    if not os.path.exists(os.path.join(web_dir, "vramsim.js")):
        print(f"SKIPPED the calculator page: no {web_dir}/vramsim.js (emscripten and web/build.sh)")
        return SKIP
    f = Failures()
    with tempfile.TemporaryDirectory() as work:
        for name, query, flags in CASES:
            check_case(f, chromium, vramsim, web_dir, work, name, query, flags)
        name, query, flags = CONFIG_CASE
        with open(GEMMA_CONFIG, encoding="utf-8") as config:
            query = dict(query, config=config.read())
        check_case(f, chromium, vramsim, web_dir, work, name, query, flags, config_path=GEMMA_CONFIG)
        check_bad_flag(f, chromium, vramsim, web_dir)
    print(f"{f.count} check(s) failed" if f.count else "all checks passed")
    return 1 if f.count else 0


if __name__ == "__main__":
    sys.exit(main())
