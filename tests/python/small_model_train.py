"""The training loop vramsim.estimate() runs (python/vramsim/_simulate.py), written out as a script for
`vramsim trace`: the model and sample moved to the GPU, then each step forward, loss, backward, step,
zero_grad(set_to_none=True)."""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from small_model import STEPS, SmallLM, loss_fn, optimizer, sample  # noqa: E402

model = SmallLM()
x = sample()
model.to("cuda")
opt = optimizer(list(model.parameters()))
x = x.to("cuda")
for _ in range(STEPS):
    output = model(x)
    loss = loss_fn(output)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
