"""A custom training loop: the GPT of gpt2_train.py with activation checkpointing per block
(torch.utils.checkpoint, non-reentrant), gradient accumulation over micro-batches, gradient clipping and SGD
with momentum.

    python accumulate_checkpoint.py [--layers 12 --d-model 768 --heads 12] [--micro-batch 4 --accumulate 4 --seq 1024]
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from gpt2_train import GPT


class CheckpointedGPT(GPT):
    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = checkpoint(block, x, use_reentrant=False)
        return self.lm_head(self.ln_f(x))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--d-model", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--micro-batch", type=int, default=4)
    p.add_argument("--accumulate", type=int, default=4)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--steps", type=int, default=2)
    a = p.parse_args()

    model = CheckpointedGPT(a.vocab, a.seq, a.layers, a.d_model, a.heads, 0.0).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    for _ in range(a.steps):
        for _ in range(a.accumulate):
            x = torch.randint(0, a.vocab, (a.micro_batch, a.seq)).cuda(non_blocking=True)
            y = torch.randint(0, a.vocab, (a.micro_batch, a.seq)).cuda(non_blocking=True)
            logits = model(x)
            loss = F.cross_entropy(logits.view(-1, a.vocab), y.view(-1)) / a.accumulate
            del logits
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)


if __name__ == "__main__":
    main()
