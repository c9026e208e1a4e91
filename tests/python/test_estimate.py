"""vramsim.estimate() and vramsim.simulate() on a small nn.Module against `vramsim trace` on the same model,
input, optimizer and loop written as a script (small_model_train.py): the same run recorded in this process
must give the same report (all of `vramsim trace --json`'s document but "model", "script" and "tracer", which name the
script and its interpreter). Needs PyTorch: exit 77 (skipped) without it.

    test_estimate.py PATH/TO/vramsim        (PYTHONPATH: the build's python/ folder)"""

import json
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tracer"))
sys.path.insert(0, HERE)
from ctest_unittest import run  # noqa: E402

try:
    import torch
except ImportError:
    print("SKIPPED test_estimate: no PyTorch in this interpreter")
    sys.exit(77)
try:
    import vramsim
except ImportError as e:
    print(f"SKIPPED vramsim package: {e}")
    sys.exit(77)

import small_model  # noqa: E402

VRAMSIM = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else "vramsim"


def traced_script(gpu):
    p = subprocess.run([VRAMSIM, "trace", "--gpu", gpu, "--python", sys.executable, "--json",
                        os.path.join(HERE, "small_model_train.py")], capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise AssertionError(f"vramsim trace -> {p.returncode}: {p.stderr}")
    d = json.loads(p.stdout)
    del d["script"], d["tracer"], d["model"]
    return d


def report(prediction):
    d = prediction.to_dict()
    del d["script"], d["tracer"], d["model"]
    return d


def memory_report(d):
    """All but "ops": the count of every operator the tracer dispatched, host-side ones included. The script
    builds the model and the sample inside the traced run (25 operators: 24 for SmallLM's initialisation, 1
    randint, measured with simulate()); estimate() gets them built and makes shape-only copies of the user's
    tensors instead. Every memory figure, the bill and the steps must be equal."""
    d = dict(d)
    del d["ops"]
    return d


class EstimateEqualsTrace(unittest.TestCase):
    maxDiff = None

    def test_estimate(self):
        torch.manual_seed(0)
        model = small_model.SmallLM()
        before = {k: v.clone() for k, v in model.state_dict().items()}
        opt = small_model.optimizer(model.parameters())
        p = vramsim.estimate(model, small_model.sample(), opt, loss_fn=small_model.loss_fn, gpu="a100-40gb",
                             steps=small_model.STEPS)
        self.assertEqual(memory_report(report(p)), memory_report(traced_script("a100-40gb")))
        # The user's model is left as it was: CPU tensors, same values, the tie kept, no gradients.
        for k, v in model.state_dict().items():
            self.assertEqual(v.device.type, "cpu")
            self.assertTrue(torch.equal(v, before[k]), k)
        self.assertIs(model.head.weight, model.embed.weight)
        self.assertTrue(all(q.grad is None for q in model.parameters()))
        # The parameters' bytes at the peak, by hand: fp32 embedding 512 x 64 (the head tied to it, counted
        # once), Linear 64 -> 256 and 256 -> 64 with biases, LayerNorm 64 weight and bias.
        self.assertEqual(p.bill["parameters"], (512 * 64 + 64 * 256 + 256 + 256 * 64 + 64 + 2 * 64) * 4)

    def test_optimizer_factory_and_simulate(self):
        p = vramsim.estimate(small_model.SmallLM(), small_model.sample(), small_model.optimizer,
                             loss_fn=small_model.loss_fn, gpu="h100-80gb", steps=small_model.STEPS)
        expected = traced_script("h100-80gb")
        self.assertEqual(memory_report(report(p)), memory_report(expected))
        with vramsim.simulate(gpu="h100-80gb") as run:
            model = small_model.SmallLM()
            x = small_model.sample()
            model.to("cuda")
            opt = small_model.optimizer(list(model.parameters()))
            x = x.to("cuda")
            for _ in range(small_model.STEPS):
                output = model(x)
                loss = small_model.loss_fn(output)
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
            # the script's globals are dropped when it ends, inside its traced run: their frees are requests
            del model, x, opt, output, loss
        self.assertEqual(report(run.prediction), expected)  # the same program in the block: "ops" too
        self.assertEqual(run.peak_reserved, expected["peak_reserved_bytes"])

    def test_bad_arguments(self):
        with self.assertRaises(vramsim.VramsimError) as raised:
            vramsim.estimate(small_model.SmallLM(), small_model.sample(), gpu="z100")
        p = subprocess.run([VRAMSIM, "trace", "--gpu", "z100", "--load", "x.vtrace"], capture_output=True, text=True)
        self.assertEqual(p.stderr, "vramsim: error: " + str(raised.exception) + "\n")
        with self.assertRaises(ValueError):
            vramsim.estimate(small_model.SmallLM(), small_model.sample(), steps=0)
        other = small_model.SmallLM()
        with self.assertRaisesRegex(ValueError, "optimizer: holds parameters that are not the model's"):
            vramsim.estimate(small_model.SmallLM(), small_model.sample(), small_model.optimizer(other.parameters()))


if __name__ == "__main__":
    run()
