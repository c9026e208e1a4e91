"""`vramsim trace` end to end: the examples under traces/tracer/examples run through the real PyTorch on the
CPU and the allocator model; errors are one line with exit status 2; outputs are deterministic.

    test_trace_cli.py PATH/TO/vramsim"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

from tracer_test_util import SOURCE, TRACER_DIR, require_torch

require_torch()
VRAMSIM = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(SOURCE, "build", "sim", "vramsim")
EXAMPLES = os.path.join(TRACER_DIR, "examples")
ENV = dict(os.environ, VRAMSIM_PYTHON=sys.executable)

# A small GPT (gpt2_train.py): vocab 1000, d 64, 4 heads, 2 layers, 32 positions, batch 2.
GPT_ARGS = ["--vocab", "1000", "--d-model", "64", "--heads", "4", "--layers", "2", "--seq", "32", "--batch", "2"]
# Its parameters, counted by hand: wte 1000x64, wpe 32x64, per block ln_1 2x64, c_attn 64x192+192, c_proj
# 64x64+64, ln_2 2x64, fc 64x256+256, proj 256x64+64, ln_f 2x64; lm_head is tied to wte.
GPT_PARAMS = 1000 * 64 + 32 * 64 + 2 * (128 + 64 * 192 + 192 + 64 * 64 + 64 + 128 + 64 * 256 + 256 + 256 * 64 + 64) + 128


def vramsim(*args, check=True):
    p = subprocess.run([VRAMSIM, *args], env=ENV, capture_output=True, text=True, timeout=600)
    if check and p.returncode != 0:
        raise AssertionError(f"vramsim {' '.join(args)} -> {p.returncode}\n{p.stderr}")
    return p


class TraceCli(unittest.TestCase):
    def test_json_report(self):
        p = vramsim("trace", "--gpu", "A100-80GB", "--json", os.path.join(EXAMPLES, "gpt2_train.py"), "--", *GPT_ARGS)
        j = json.loads(p.stdout)
        for key in ("peak_allocated_bytes", "peak_reserved_bytes", "fits", "bill", "phases", "steps", "script", "tracer"):
            self.assertIn(key, j)
        self.assertEqual(j["gpu"], "A100-80GB")
        # The bill at the peak, by hand from the script's tensors. The peak is step 2's first backward op: the
        # largest tensors of the run are logits-sized (b x s x vocab x 4 = 2 x 32 x 1000 x 4 = 256,000 B; a
        # hidden state is 16,384 B), and log_softmax's backward adds a third one (logits, log_softmax's output,
        # its gradient) before any parameter gradient exists (zero_grad(set_to_none=True) after step 1).
        bill = j["bill"]
        self.assertEqual(bill["parameters"], GPT_PARAMS * 4)
        self.assertEqual(bill["gradients"], 0)
        self.assertEqual(bill["optimizer_states"], 2 * GPT_PARAMS * 4)  # AdamW exp_avg, exp_avg_sq; 1.13's step is a CPU tensor
        self.assertEqual(bill["inputs"], 2 * 2 * 32 * 8)  # x and y, int64
        self.assertEqual(j["peak"]["step"], 2)
        self.assertEqual(j["peak"]["phase"], "backward")
        self.assertEqual(j["peak"]["op"], "aten._log_softmax_backward_data")
        top = [t["size_bytes"] for t in j["peak"]["top_tensors"]]
        self.assertGreaterEqual(top.count(2 * 32 * 1000 * 4), 2)
        self.assertTrue(j["fits"])
        self.assertEqual(j["phases"]["step"], 2)
        self.assertEqual(len(j["steps"]), 2)
        # Compute capability 8.0: cuBLAS workspaces of 8 MiB + 128 KiB (CublasHandlePool.cpp), two threads.
        self.assertEqual(j["tracer"]["cublas_workspace_bytes"], 2 * 4096 * 1024 + 8 * 16 * 1024)
        self.assertEqual(bill["workspace"], 2 * j["tracer"]["cublas_workspace_bytes"])
        # The script's own prints go to stderr; stdout is the report alone.
        self.assertIn("step 1: loss", p.stderr)

    def test_examples_bill_by_hand(self):
        # Parameter counts by hand. Llama-style (llama_train.py, lora_finetune.py) d 128, 2 layers, d_ff 344,
        # vocab 500, untied head: per layer 2 norms 256, q and o 128 x 128, k and v 128 x (kv_heads x 32),
        # gate, up, down 128 x 344; embeddings and head 2 x 500 x 128, the final norm 128; plus the inv_freq
        # buffer of head_dim / 2 = 16 values. GPT (accumulate_checkpoint.py) vocab 500, d 64, 32 positions.
        def llama(kv_heads):
            per_layer = 256 + 2 * 128 * 128 + 2 * 128 * kv_heads * 32 + 3 * 128 * 344
            return 2 * per_layer + 2 * 500 * 128 + 128
        gpt = 500 * 64 + 32 * 64 + 2 * (128 + 64 * 192 + 192 + 64 * 64 + 64 + 128 + 64 * 256 + 256 + 256 * 64 + 64) + 128
        adapters = 2 * 2 * (8 * 128 + 128 * 8)  # r 8 on q_proj and v_proj (the script's default targets), 2 layers
        llama_args = ["--layers", "2", "--d-model", "128", "--heads", "4", "--d-ff", "344", "--vocab", "500", "--seq", "64",
                      "--batch", "2"]
        cases = (
            # fp32 weights under bf16 autocast, AdamW: exp_avg and exp_avg_sq of every parameter
            ("llama_train.py", llama_args + ["--kv-heads", "2"],
             {"parameters": llama(2) * 4 + 16 * 4, "optimizer_states": 2 * llama(2) * 4}),
            # bf16 frozen base (inv_freq cast with it), fp32 adapters, AdamW over the adapters only
            ("lora_finetune.py", llama_args + ["--kv-heads", "4", "--rank", "8"],
             {"parameters": llama(4) * 2 + 16 * 2 + adapters * 4, "optimizer_states": 2 * adapters * 4}),
            # SGD with momentum, gradients accumulated over 3 micro-batches: at step 2's peak the gradients exist
            ("accumulate_checkpoint.py", ["--layers", "2", "--d-model", "64", "--heads", "4", "--vocab", "500",
                                          "--micro-batch", "2", "--accumulate", "3", "--seq", "32"],
             {"parameters": gpt * 4, "gradients": gpt * 4, "optimizer_states": gpt * 4, "inputs": 2 * 2 * 32 * 8}),
        )
        for script, args, bill in cases:
            with self.subTest(script=script):
                j = json.loads(vramsim("trace", "--json", os.path.join(EXAMPLES, script), "--", *args).stdout)
                self.assertEqual({k: j["bill"][k] for k in bill}, bill)
                self.assertTrue(j["fits"])
        out = vramsim("trace", os.path.join(EXAMPLES, "llama_train.py"), "--", *llama_args, "--kv-heads", "2").stdout
        self.assertIn("bill at the peak of allocated memory", out)
        self.assertRegex(out, r"verdict\s+FITS")

    def test_out_load_replay_and_determinism(self):
        with tempfile.TemporaryDirectory() as d:
            a, b = os.path.join(d, "a.vtrace"), os.path.join(d, "b.vtrace")
            script = os.path.join(EXAMPLES, "gpt2_train.py")
            first = vramsim("trace", "--json", "--out", a, script, "--", *GPT_ARGS).stdout
            vramsim("trace", "--out", b, script, "--", *GPT_ARGS)
            with open(a, "rb") as fa, open(b, "rb") as fb:
                self.assertEqual(fa.read(), fb.read())  # same script, same trace, byte for byte
            loaded = json.loads(vramsim("trace", "--json", "--load", a).stdout)
            traced = json.loads(first)
            for key in ("peak_allocated_bytes", "peak_reserved_bytes", "bill", "phases", "steps"):
                self.assertEqual(loaded[key], traced[key], key)
            replay = json.loads(vramsim("replay", a, "--json").stdout)
            self.assertEqual(replay["peak_reserved_bytes"], traced["peak_reserved_bytes"])
            pickle = os.path.join(d, "a.pickle")
            vramsim("trace", "--load", a, "--out", pickle)
            self.assertEqual(json.loads(vramsim("replay", pickle, "--json").stdout)["peak_allocated_bytes"],
                             traced["peak_allocated_bytes"])

    def test_html_and_perfetto(self):
        # The page and the trace-event file of a traced run: the requested-bytes series are the tracer's tensor
        # categories (parameters, gradients, optimizer states and activations at least, in a training step),
        # plus the model's reserved and allocated lines; the Perfetto file's allocator counter reaches the
        # report's peaks, and its cudaMalloc minus cudaFree instants, summed in order, the peak reserved.
        with tempfile.TemporaryDirectory() as tmp:
            page, events = os.path.join(tmp, "t.html"), os.path.join(tmp, "t.json")
            j = json.loads(vramsim("trace", "--gpu", "A100-80GB", "--json", "--html", page, "--perfetto", events,
                                   os.path.join(EXAMPLES, "gpt2_train.py"), "--", *GPT_ARGS).stdout)
            with open(page, encoding="utf-8") as f:
                html = f.read()
            self.assertNotIn("<script", html)
            for category in ("parameter", "gradient", "optimizer_state", "activation"):
                self.assertIn(f'data-series="{category}"', html)
            self.assertIn('data-series="reserved"', html)
            self.assertIn('class="segment"', html)
            self.assertIn('class="bill"', html)
            with open(events, encoding="utf-8") as f:
                trace = json.load(f)["traceEvents"]
            counters = [e["args"] for e in trace if e["ph"] == "C" and e["name"] == "allocator"]
            self.assertEqual(max(c["allocated"] for c in counters), j["peak_allocated_bytes"])
            self.assertEqual(max(c["reserved"] for c in counters), j["peak_reserved_bytes"])
            held = most = 0
            for e in trace:
                if e["ph"] == "i":
                    held += e["args"]["bytes"] if e["name"] == "cudaMalloc" else -e["args"]["bytes"] if e["name"] == "cudaFree" else 0
                    most = max(most, held)
            self.assertEqual(most, j["peak_reserved_bytes"])

    def test_python_api_record(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "step.vtrace")
            code = ("import torch, vramsim_trace\n"
                    f"with vramsim_trace.record({out!r}, gpu='H100-80GB'):\n"
                    "    lin = torch.nn.Linear(256, 256).cuda()\n"
                    "    lin(torch.randn(8, 256, device='cuda')).sum().backward()\n")
            env = dict(ENV, PYTHONPATH=TRACER_DIR)
            subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=300)
            j = json.loads(vramsim("trace", "--json", "--load", out, "--gpu", "h100").stdout)
            self.assertEqual(j["bill"]["parameters"], (256 * 256 + 256) * 4)

    def test_script_arguments_with_or_without_the_separator(self):
        small = ["--vocab", "100", "--d-model", "32", "--heads", "2", "--layers", "1", "--seq", "32", "--batch", "1"]
        script = os.path.join(EXAMPLES, "gpt2_train.py")
        with_sep = json.loads(vramsim("trace", "--json", script, "--", *small).stdout)
        without = json.loads(vramsim("trace", "--json", script, *small).stdout)
        self.assertEqual(with_sep["peak_allocated_bytes"], without["peak_allocated_bytes"])

    def test_errors_are_one_line_with_status_2(self):
        with tempfile.TemporaryDirectory() as d:
            bad = os.path.join(d, "bad.py")
            with open(bad, "w") as f:
                f.write("import torch\nx = torch.ones(4, device='cuda')\ny = x[x > 0]\n")
            cases = [
                (["trace", os.path.join(d, "missing.py")], "missing.py: no such file"),
                (["trace", bad], "bad.py:3"),
                (["trace", "--gpu", "no-such-gpu", bad], "no-such-gpu"),
                (["trace", "--load", os.path.join(d, "missing.vtrace")], "missing.vtrace"),
                (["trace", "--python", os.path.join(d, "no-python"), bad], "no interpreter with PyTorch"),
                (["trace", "--load", bad, bad], "--load"),
                (["trace", "--bogus", bad], "unknown option '--bogus'"),
                (["trace", "--gpu"], "--gpu"),
                (["replay", "--bogus", bad], "--bogus"),
            ]
            for args, needle in cases:
                with self.subTest(args=args[1:]):
                    p = vramsim(*args, check=False)
                    self.assertEqual(p.returncode, 2, p.stderr)
                    last = p.stderr.strip().splitlines()[-1]
                    self.assertTrue(last.startswith("vramsim: error: "), p.stderr)
                    self.assertIn(needle, last)
                    self.assertEqual(p.stdout, "")


if __name__ == "__main__":
    from ctest_unittest import run

    run()
