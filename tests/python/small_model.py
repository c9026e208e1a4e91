"""A small model and its training loop, shared by the script `vramsim trace` runs (small_model_train.py) and by
test_estimate.py's vramsim.estimate() call: the same module, input, optimizer and loop on both sides."""

import torch

VOCAB, D, SEQ, BATCH, STEPS = 512, 64, 32, 4, 2


class SmallLM(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, D)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(D, 4 * D), torch.nn.GELU(), torch.nn.Linear(4 * D, D))
        self.norm = torch.nn.LayerNorm(D)
        self.head = torch.nn.Linear(D, VOCAB, bias=False)
        self.head.weight = self.embed.weight  # tied, as GPT-2's lm_head

    def forward(self, tokens):
        h = self.embed(tokens)
        h = h + self.mlp(h)
        return self.head(self.norm(h))


def sample():
    return torch.randint(0, VOCAB, (BATCH, SEQ))


def loss_fn(logits):
    return logits.float().logsumexp(-1).mean()


def optimizer(params):
    return torch.optim.AdamW(params, lr=1e-3)
