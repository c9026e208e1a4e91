"""docs/python.md: estimate() on your own nn.Module, optimizer and loss, and simulate() around your own code."""
import torch

import vramsim


class MLP(torch.nn.Module):
    def __init__(self, width=4096, depth=8):
        super().__init__()
        self.layers = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(depth)])

    def forward(self, x):
        return self.layers(x)


model = MLP()
x = torch.randn(64, 4096)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
p = vramsim.estimate(model, x, opt, loss_fn=lambda y: y.pow(2).mean(), gpu="a100-40gb")
print(repr(p))
print("bill at the peak:", {k: f"{v / 2**20:.0f} MiB" for k, v in p.bill.items() if v})
print("the model is untouched:", next(model.parameters()).device)

with vramsim.simulate(gpu="a100-40gb") as run:
    m = MLP().cuda()
    for _ in range(2):
        m(torch.randn(64, 4096, device="cuda")).sum().backward()
print(repr(run))
