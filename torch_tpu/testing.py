"""Reference workloads shared by the tests, the demo and the benchmarks:
an MLP, a small CNN and a small GPT, written as ordinary PyTorch."""
import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F


def mlp(d_in=64, hidden=256, d_out=10):
    return nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, d_out))


class SmallCNN(nn.Module):
    """conv-bn-relu-pool twice, global average pool, linear."""

    def __init__(self, channels=3, classes=10, width=16):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(channels, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1), nn.BatchNorm2d(2 * width), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.head = nn.Linear(2 * width, classes)

    def forward(self, x):
        x = self.features(x)
        return self.head(F.adaptive_avg_pool2d(x, 1).flatten(1))


@dataclass
class GPTConfig:
    vocab: int = 512
    d_model: int = 64
    layers: int = 2
    heads: int = 2
    seq: int = 64
    batch: int = 4
    dropout: float = 0.0


GPT_TINY = GPTConfig()
GPT_SMALL = GPTConfig(vocab=4096, d_model=256, layers=4, heads=4, seq=128, batch=8)


class Block(nn.Module):
    """Pre-LN transformer block: explicit causal softmax attention, tanh-GELU MLP of width 4d."""

    def __init__(self, cfg):
        super().__init__()
        self.heads = cfg.heads
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.fc = nn.Linear(cfg.d_model, 4 * cfg.d_model)
        self.out = nn.Linear(4 * cfg.d_model, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.register_buffer("mask", torch.tril(torch.ones(cfg.seq, cfg.seq, dtype=torch.bool)), persistent=False)

    def attention(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        scores = scores.masked_fill(~self.mask[:t, :t], float("-inf"))
        att = self.drop(F.softmax(scores, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, d)
        return self.drop(self.proj(y))

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.drop(self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh")))


class GPT(nn.Module):
    def __init__(self, cfg=GPT_TINY):
        super().__init__()
        self.cfg = cfg
        self.tokens = nn.Embedding(cfg.vocab, cfg.d_model)
        self.positions = nn.Embedding(cfg.seq, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.ln = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)

    def forward(self, idx, targets=None):
        t = idx.shape[1]
        pos = torch.arange(t, device=idx.device)
        x = self.drop(self.tokens(idx) + self.positions(pos))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln(x))
        if targets is None:
            return logits
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def gpt_batch(cfg, seed=0):
    """A deterministic batch of token ids with a learnable pattern (next = current + 1)."""
    g = torch.Generator().manual_seed(seed)
    start = torch.randint(0, cfg.vocab, (cfg.batch, 1), generator=g)
    seq = (start + torch.arange(cfg.seq + 1)) % cfg.vocab
    return seq[:, :-1].contiguous(), seq[:, 1:].contiguous()


def train_step(model, opt, tokens, targets):
    """One GPT training step (forward with targets, backward, optimizer step); returns the loss."""
    _, loss = model(tokens, targets)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss
