"""The Python package (python/vramsim) against the command line: every call runs the CLI's own commands in
this process, so its documents must be byte for byte what `vramsim ... --json` prints for the same options,
its pages what --html / --perfetto write, and its errors the CLI's error line. Also --model's Hugging Face
cache resolution on a fake cache made here, in the folder layout huggingface_hub writes
(file_download.py: models--ORG--NAME/refs/main, snapshots/<commit>/config.json).

    test_package.py PATH/TO/vramsim        (PYTHONPATH: the build's python/ folder)"""

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tracer"))
from ctest_unittest import run  # noqa: E402

try:
    import vramsim
    from vramsim._cli import cli_args
except ImportError as e:  # the extension is not built (SIM_PYTHON=OFF): nothing to test
    print(f"SKIPPED vramsim package: {e}")
    sys.exit(77)

SOURCE = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
VRAMSIM = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else os.path.join(SOURCE, "build", "sim", "vramsim")
TINY_LLAMA = os.path.join(SOURCE, "tests", "data", "tiny-llama.config.json")
SNAPSHOT = os.path.join(SOURCE, "tests", "data", "snap_small.json")


def cli(*args, env=None):
    return subprocess.run([VRAMSIM, *map(str, args)], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, **(env or {})))


def cli_json(*args, env=None):
    p = cli(*args, "--json", env=env)
    if p.returncode != 0:
        raise AssertionError(f"vramsim {' '.join(map(str, args))} -> {p.returncode}: {p.stderr}")
    return p.stdout


# predict's options as keyword arguments, and the same as CLI arguments (written out by hand, not by cli_args).
GRID = [
    (dict(model="gpt2", gpu="a100-40gb", batch=2, seq=256),
     ["--model", "gpt2", "--gpu", "a100-40gb", "--batch", "2", "--seq", "256"]),
    (dict(model="gpt2", gpu="a100-40gb", batch=2, seq=256, precision="bf16", optimizer="adamw-8bit",
          checkpointing="full"),
     ["--model", "gpt2", "--gpu", "a100-40gb", "--batch", "2", "--seq", "256", "--precision", "bf16",
      "--optimizer", "adamw-8bit", "--checkpointing", "full"]),
    (dict(model=TINY_LLAMA, gpu="h100-80gb", batch=4, seq=128, lora_rank=8, lora_targets=["q_proj", "v_proj"]),
     ["--model", TINY_LLAMA, "--gpu", "h100-80gb", "--batch", "4", "--seq", "128", "--lora-rank", "8",
      "--lora-targets", "q_proj,v_proj"]),
    # after a LoRA run: nothing of it may stay in the parser's storage
    (dict(model=TINY_LLAMA, gpu="h100-80gb", batch=4, seq=128),
     ["--model", TINY_LLAMA, "--gpu", "h100-80gb", "--batch", "4", "--seq", "128"]),
    (dict(model="gpt2", gpu="a100-80gb", batch=2, seq=256, compile=True, precision="amp-bf16"),
     ["--model", "gpt2", "--gpu", "a100-80gb", "--batch", "2", "--seq", "256", "--compile", "--precision",
      "amp-bf16"]),
    (dict(model="gpt2", gpu="a100-80gb", batch=2, seq=256, compile="max-autotune"),
     ["--model", "gpt2", "--gpu", "a100-80gb", "--batch", "2", "--seq", "256", "--compile=max-autotune"]),
    (dict(model="gpt2", gpu="l4", batch=2, seq=64, generate=16, kv_cache="static", precision="bf16"),
     ["--model", "gpt2", "--gpu", "l4", "--batch", "2", "--seq", "64", "--generate", "16", "--kv-cache", "static",
      "--precision", "bf16"]),
    (dict(model="gpt2", gpu="a100-40gb", batch=2, seq=256, world_size=4, fsdp="full-shard",
          offload=["optimizer", "params"], free_logits_before_backward=True, inference=False),
     ["--model", "gpt2", "--gpu", "a100-40gb", "--batch", "2", "--seq", "256", "--world-size", "4", "--fsdp",
      "full-shard", "--offload", "optimizer,params", "--free-logits-before-backward"]),
]


class PredictEqualsCli(unittest.TestCase):
    def test_grid(self):
        for kwargs, args in GRID:
            with self.subTest(args=" ".join(args)):
                p = vramsim.predict(**kwargs)
                self.assertEqual(p.to_json(), cli_json("predict", *args))
                expected = json.loads(p.to_json())
                self.assertEqual(p.fits, expected["fits"])
                self.assertEqual(p.peak_reserved, expected["peak_reserved_bytes"])
                self.assertEqual(p.bill, expected["bill"])
                text = cli("predict", *args).stdout
                self.assertEqual(str(p), text)
                verdict = [line for line in text.splitlines() if line.startswith("verdict")][0]
                self.assertEqual("verdict          " + p.verdict, verdict)

    def test_keywords_become_the_cli_options(self):
        self.assertEqual(
            cli_args("predict", dict(lora_rank=8, compile=True, bnb_double_quant=False, zero=None,
                                     lora_targets=("q_proj", "v_proj"), fsdp_use_orig_params=False,
                                     compile_mode="reduce-overhead")),
            ["--lora-rank", "8", "--compile", "--lora-targets", "q_proj,v_proj", "--fsdp-use-orig-params",
             "false", "--compile-mode", "reduce-overhead"])

    def test_model_as_dict_and_folder(self):
        with open(TINY_LLAMA) as f:
            config = json.load(f)
        expected = json.loads(cli_json("predict", "--model", TINY_LLAMA, "--gpu", "a100-40gb", "--batch", "2",
                                       "--seq", "64"))
        with tempfile.TemporaryDirectory() as folder:
            shutil.copy(TINY_LLAMA, os.path.join(folder, "config.json"))
            for model in (config, folder):
                got = vramsim.predict(model=model, gpu="a100-40gb", batch=2, seq=64).to_dict()
                self.assertNotEqual(got.pop("model"), None)
                expected_rest = dict(expected)
                expected_rest.pop("model")
                self.assertEqual(got, expected_rest)

    def test_pages_equal_the_files_the_cli_writes(self):
        with tempfile.TemporaryDirectory() as folder:
            page, trace = os.path.join(folder, "p.html"), os.path.join(folder, "p.json")
            args = ["--model", "gpt2", "--gpu", "a100-40gb", "--batch", "1", "--seq", "128"]
            self.assertEqual(cli("predict", *args, "--html", page, "--perfetto", trace).returncode, 0)
            p = vramsim.predict(model="gpt2", gpu="a100-40gb", batch=1, seq=128)
            with open(page, encoding="utf-8") as f:
                self.assertEqual(p.to_html(), f.read())
            mine = os.path.join(folder, "mine.json")
            p.save_perfetto(mine)
            with open(trace, encoding="utf-8") as f, open(mine, encoding="utf-8") as g:
                self.assertEqual(g.read(), f.read())
            self.assertIn("<iframe", p._repr_html_())


class OtherCommandsEqualCli(unittest.TestCase):
    def test_fit(self):
        f = vramsim.fit(model="gpt2", gpu="a100-40gb", seq=512, precision="bf16")
        self.assertEqual(f.to_json(), cli_json("fit", "--model", "gpt2", "--gpu", "a100-40gb", "--seq", "512",
                                               "--precision", "bf16"))
        self.assertEqual(f.best, json.loads(f.to_json())["best"])

    def test_plan_rows_are_the_csv_rows(self):
        p = vramsim.plan(model="gpt2", gpu="a100-40gb", global_batch=8, seq=256, threads=1)
        with tempfile.TemporaryDirectory() as folder:
            csv = os.path.join(folder, "plan.csv")
            self.assertEqual(p.to_json(), cli_json("plan", "--model", "gpt2", "--gpu", "a100-40gb", "--global-batch",
                                                   "8", "--seq", "256", "--threads", "1", "--csv", csv))
            with open(csv) as f:
                lines = f.read().splitlines()
        rows = p.rows
        self.assertEqual(len(rows), len(lines) - 1)
        first = rows.iloc[0].to_dict() if hasattr(rows, "iloc") else rows[0]
        self.assertEqual(first["command"], lines[1].split(",\"")[1].rstrip("\""))

    def test_compare_and_sweep(self):
        c = vramsim.compare(SNAPSHOT)
        self.assertEqual(c.to_json(), cli_json("compare", SNAPSHOT))
        s = vramsim.sweep(model="gpt2", gpu="a100-40gb", batch=2, seq="uniform:64..256", steps=3, policies="pytorch")
        self.assertEqual(s.to_json(), cli_json("sweep", "--model", "gpt2", "--gpu", "a100-40gb", "--batch", "2",
                                               "--seq", "uniform:64..256", "--steps", "3", "--policies", "pytorch"))
        self.assertEqual(len(s.steps), 3)


class ReplayInTorchShapes(unittest.TestCase):
    def test_memory_stats_and_summary(self):
        r = vramsim.replay(SNAPSHOT)
        self.assertEqual(r.to_json(), cli_json("replay", SNAPSHOT, "--stats"))
        stats = r.memory_stats()
        # torch.cuda.memory_stats()'s flat keys (torch/cuda/memory.py, memory_stats: _recurse_add_to_result)
        for key in ("allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.peak",
                    "num_alloc_retries", "num_ooms"):
            self.assertIn(key, stats)
        self.assertEqual(stats["reserved_bytes.all.peak"], r.peak_reserved)
        summary = cli("replay", SNAPSHOT, "--summary").stdout
        self.assertTrue(summary.endswith(r.memory_summary()))
        self.assertIn("PyTorch CUDA memory summary", r.memory_summary())


class ErrorsAreTheCliMessages(unittest.TestCase):
    def check(self, call, *args):
        p = cli(*args)
        self.assertEqual(p.returncode, 2, p.stderr)
        with self.assertRaises(vramsim.VramsimError) as raised:
            call()
        self.assertEqual("vramsim: error: " + str(raised.exception) + "\n", p.stderr)

    def test_bad_inputs(self):
        self.check(lambda: vramsim.predict(model="gpt5", gpu="a100-40gb", batch=1, seq=128),
                   "predict", "--model", "gpt5", "--gpu", "a100-40gb", "--batch", "1", "--seq", "128")
        self.check(lambda: vramsim.predict(model="gpt2", gpu="a100-40gb", batch=-1, seq=128),
                   "predict", "--model", "gpt2", "--gpu", "a100-40gb", "--batch", "-1", "--seq", "128")
        self.check(lambda: vramsim.predict(model="gpt2", gpu="b300-9000gb", batch=1, seq=128),
                   "predict", "--model", "gpt2", "--gpu", "b300-9000gb", "--batch", "1", "--seq", "128")
        self.check(lambda: vramsim.predict(model="gpt2", gpu="a100-40gb", batch=1),
                   "predict", "--model", "gpt2", "--gpu", "a100-40gb", "--batch", "1")
        self.check(lambda: vramsim.predict(model="gpt2", gpu="a100-40gb", batch=1, seq=128, lora_rnak=8),
                   "predict", "--model", "gpt2", "--gpu", "a100-40gb", "--batch", "1", "--seq", "128",
                   "--lora-rnak", "8")
        self.check(lambda: vramsim.replay("/no/such/snapshot.pickle"), "replay", "/no/such/snapshot.pickle",
                   "--stats")
        self.assertTrue(issubclass(vramsim.VramsimError, ValueError))

    def test_model_of_the_wrong_type(self):
        with self.assertRaises(TypeError):
            vramsim.predict(model=42, gpu="a100-40gb", batch=1, seq=128)


class HuggingFaceCache(unittest.TestCase):
    COMMIT = "0123456789abcdef0123456789abcdef01234567"

    def make_cache(self, hub):
        repo = os.path.join(hub, "models--acme--tiny-llama")
        os.makedirs(os.path.join(repo, "refs"))
        os.makedirs(os.path.join(repo, "snapshots", self.COMMIT))
        with open(os.path.join(repo, "refs", "main"), "w") as f:
            f.write(self.COMMIT)
        shutil.copy(TINY_LLAMA, os.path.join(repo, "snapshots", self.COMMIT, "config.json"))

    def test_hub_id_in_the_cache(self):
        args = ["--gpu", "a100-40gb", "--batch", "2", "--seq", "64"]
        by_path = json.loads(cli_json("predict", "--model", TINY_LLAMA, *args))
        by_path.pop("model")
        with tempfile.TemporaryDirectory() as home:
            for variable, hub in (("HF_HUB_CACHE", os.path.join(home, "elsewhere")),
                                  ("HF_HOME", os.path.join(home, "hf"))):
                with self.subTest(variable=variable):
                    self.make_cache(hub if variable == "HF_HUB_CACHE" else os.path.join(hub, "hub"))
                    env = {"HF_HUB_CACHE": "", "HUGGINGFACE_HUB_CACHE": "", "HF_HOME": "", variable: hub}
                    got = json.loads(cli_json("predict", "--model", "acme/tiny-llama", *args, env=env))
                    self.assertEqual(got.pop("model"), "acme/tiny-llama")
                    self.assertEqual(got, by_path)
                    saved = {k: os.environ.get(k) for k in env}
                    try:
                        os.environ.update(env)
                        p = vramsim.predict(model="acme/tiny-llama", gpu="a100-40gb", batch=2, seq=64)
                    finally:
                        for k, v in saved.items():
                            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
                    self.assertEqual(p.to_dict()["peak_reserved_bytes"], by_path["peak_reserved_bytes"])

    def test_missing_id_and_folder_without_config(self):
        with tempfile.TemporaryDirectory() as hub:
            p = cli("predict", "--model", "acme/absent-model", "--gpu", "a100-40gb", "--batch", "1", "--seq", "64",
                    env={"HF_HUB_CACHE": hub})
            self.assertEqual(p.returncode, 2)
            self.assertIn("'acme/absent-model' is not a preset, a file or a folder, and not in the Hugging Face "
                          f"cache (no {hub}/models--acme--absent-model;", p.stderr)
            os.makedirs(os.path.join(hub, "empty"))
            p = cli("predict", "--model", os.path.join(hub, "empty"), "--gpu", "a100-40gb", "--batch", "1",
                    "--seq", "64")
            self.assertEqual(p.stderr, f"vramsim: error: --model: {hub}/empty: a folder without config.json\n")
            # refs/main missing: huggingface_hub finds no "main" revision either
            os.makedirs(os.path.join(hub, "models--acme--no-ref", "snapshots", self.COMMIT))
            p = cli("predict", "--model", "acme/no-ref", "--gpu", "a100-40gb", "--batch", "1", "--seq", "64",
                    env={"HF_HUB_CACHE": hub})
            self.assertIn("acme/no-ref: no refs/main", p.stderr)


def safetensors_bytes(entries, dtype="BF16", element_bytes=2):
    """A safetensors file written by hand: little-endian u64 header length, the JSON header, zero data."""
    header, offset = {}, 0
    for name, shape in entries:
        size = element_bytes
        for d in shape:
            size *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(text)) + text + bytes(offset)


def tiny_llama_entries():
    """modeling_llama.py's state_dict for tests/data/tiny-llama.config.json (hidden 256, MLP 512, 2 layers,
    4 heads, 2 key/value heads, vocabulary 1,024, untied): embeddings and lm_head 1,024 x 256 = 262,144 each;
    per layer q and o 256 x 256 = 65,536, k and v 128 x 256 = 32,768, gate, up, down 131,072 and two norms of
    256 = 590,336; the final norm 256. 524,288 + 2 x 590,336 + 256 = 1,705,216 elements, 3,410,432 B in bf16."""
    entries = [("model.embed_tokens.weight", [1024, 256])]
    for i in range(2):
        layer = f"model.layers.{i}."
        entries += [(layer + "input_layernorm.weight", [256]), (layer + "self_attn.q_proj.weight", [256, 256]),
                    (layer + "self_attn.k_proj.weight", [128, 256]), (layer + "self_attn.v_proj.weight", [128, 256]),
                    (layer + "self_attn.o_proj.weight", [256, 256]), (layer + "post_attention_layernorm.weight", [256]),
                    (layer + "mlp.gate_proj.weight", [512, 256]), (layer + "mlp.up_proj.weight", [512, 256]),
                    (layer + "mlp.down_proj.weight", [256, 512])]
    return entries + [("model.norm.weight", [256]), ("lm_head.weight", [1024, 256])]


class ModelFolderCheckpoint(unittest.TestCase):
    """model= a folder holding config.json and model.safetensors (issue 41): the checkpoint as its header says,
    the prediction unchanged (it follows config.json), warnings and errors as the CLI's."""

    ARGS = dict(gpu="a100-40gb", batch=2, seq=64)
    CLI_ARGS = ["--gpu", "a100-40gb", "--batch", "2", "--seq", "64"]

    def folder(self, root, entries):
        os.makedirs(root)
        shutil.copy(TINY_LLAMA, os.path.join(root, "config.json"))
        with open(os.path.join(root, "model.safetensors"), "wb") as f:
            f.write(safetensors_bytes(entries))
        return root

    def test_folder_with_safetensors(self):
        with tempfile.TemporaryDirectory() as tmp:
            folder = self.folder(os.path.join(tmp, "tiny"), tiny_llama_entries())
            p = vramsim.predict(model=folder, **self.ARGS)
            self.assertEqual(p.checkpoint["bytes"], 3410432)
            self.assertEqual(p.checkpoint["elements"], 1705216)
            self.assertEqual(p.checkpoint["tensors"], 21)
            self.assertEqual(p.checkpoint["bytes_by_dtype"], {"BF16": 3410432})
            self.assertEqual(p.checkpoint["warnings"], [])
            self.assertIn("checkpoint       1 file (model.safetensors), 21 tensors, 3,410,432 B: BF16 3,410,432 B",
                          str(p))
            self.assertEqual(p.to_dict(), json.loads(cli_json("predict", "--model", folder, *self.CLI_ARGS)))
            by_path = json.loads(cli_json("predict", "--model", TINY_LLAMA, *self.CLI_ARGS))
            self.assertEqual(p.peak_reserved, by_path["peak_reserved_bytes"])
            self.assertNotIn("checkpoint", by_path)

    def test_warning_and_bad_header(self):
        with tempfile.TemporaryDirectory() as tmp:
            folder = self.folder(os.path.join(tmp, "tiny"), tiny_llama_entries()[:-1])  # no lm_head
            with self.assertWarns(UserWarning) as caught:
                vramsim.predict(model=folder, **self.ARGS)
            cli_run = cli("predict", "--model", folder, *self.CLI_ARGS)
            self.assertEqual(cli_run.stderr, f"vramsim: warning: {caught.warning}\n")
            self.assertIn("fewer by 262,144 (the size of lm_head.weight [1024, 256], which the checkpoint lacks)",
                          str(caught.warning))
            with open(os.path.join(folder, "model.safetensors"), "r+b") as f:
                f.write(struct.pack("<Q", 1 << 40))  # a header length no file has
            with self.assertRaises(vramsim.VramsimError) as raised:
                vramsim.predict(model=folder, **self.ARGS)
            cli_run = cli("predict", "--model", folder, *self.CLI_ARGS)
            self.assertEqual(cli_run.returncode, 2)
            self.assertEqual(cli_run.stderr, f"vramsim: error: {raised.exception}\n")
            self.assertEqual(str(raised.exception), f"{folder}/model.safetensors: byte 0: header length "
                             "1099511627776 is over safetensors' limit of 100000000 bytes (not a safetensors file?)")


if __name__ == "__main__":
    run()
