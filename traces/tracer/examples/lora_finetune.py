"""LoRA fine-tuning written by hand in plain PyTorch (no PEFT): the Llama-style model of llama_train.py with
bf16 base weights frozen, and trainable low-rank adapters (rank r, alpha, dropout) on chosen projections.

    python lora_finetune.py [--layers 16 --d-model 2048 --heads 16 --d-ff 5632] [--rank 16 --alpha 32]
                            [--targets q_proj,v_proj] [--batch 4 --seq 1024]
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from llama_train import Llama


class LoRALinear(nn.Module):
    """y = base(x) + B(A(dropout(x))) * alpha / r, with base frozen."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float, dropout: float):
        super().__init__()
        self.base = base
        self.base.weight.requires_grad_(False)
        self.lora_A = nn.Parameter(torch.empty(rank, base.in_features))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        self.scale = alpha / rank
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        return self.base(x) + F.linear(F.linear(self.drop(x), self.lora_A), self.lora_B) * self.scale


def add_lora(model: nn.Module, targets, rank, alpha, dropout):
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if name in targets and isinstance(child, nn.Linear):
                setattr(module, name, LoRALinear(child, rank, alpha, dropout))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--d-model", type=int, default=2048)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=16)
    p.add_argument("--d-ff", type=int, default=5632)
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--alpha", type=float, default=32)
    p.add_argument("--lora-dropout", type=float, default=0.05)
    p.add_argument("--targets", default="q_proj,v_proj")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--steps", type=int, default=2)
    a = p.parse_args()

    model = Llama(a.vocab, a.layers, a.d_model, a.heads, a.kv_heads, a.d_ff)
    for param in model.parameters():
        param.requires_grad_(False)
    model = model.to(torch.bfloat16)  # frozen base weights in bf16
    add_lora(model, set(a.targets.split(",")), a.rank, a.alpha, a.lora_dropout)  # adapters in fp32
    model = model.cuda()
    trainable = [q for q in model.parameters() if q.requires_grad]
    print(f"trainable parameters: {sum(q.numel() for q in trainable):,} "
          f"of {sum(q.numel() for q in model.parameters()):,}")
    opt = torch.optim.AdamW(trainable, lr=2e-4)
    for _ in range(a.steps):
        ids = torch.randint(0, a.vocab, (a.batch, a.seq), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(ids[:, :-1])
        loss = F.cross_entropy(logits.float().view(-1, a.vocab), ids[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


if __name__ == "__main__":
    main()
