#!/usr/bin/env python3
"""PyTorch side of bench/train_step_bench.cc: one training step of the same model, timed.

A step is forward, cross-entropy, backward, optimizer step and zero_grad(set_to_none=True) on
data fixed in memory once. The models are the PyTorch modules that worker/nn/{mlp,cnn,gpt}.h
document (the zoo matches them name for name):
  mlp  784-1024-1024-10, relu, batch 128, SGD(lr 0.01, momentum 0.9)
  cnn  zoo CNN defaults (dropout 0.25, train mode), 1x28x28, 10 classes, batch 64, same SGD
  gpt  nanoGPT, 4 layers, width 256, 4 heads, context 128, vocab 65, dropout 0, bias,
       batch 16, AdamW(lr 3e-4, weight_decay 0.1)

  torch_train_step.py --model mlp|cnn|gpt [--threads N] [--steps S] [--warmup W] [--windows K]

The S timed steps are split into K windows; "throughput" is the median over windows, "best"
the highest. Peak RSS is the process's (ru_maxrss), so run one model per process. Prints one
JSON line. Needs `pip install torch`; never needed by the product.
"""
import argparse
import json
import math
import resource
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    sys.exit("torch_train_step.py: PyTorch is not installed (pip install torch)")


class MLP(nn.Module):
    def __init__(self, sizes, dropout=0.0):
        super().__init__()
        for i in range(len(sizes) - 1):
            setattr(self, f"fc{i + 1}", nn.Linear(sizes[i], sizes[i + 1]))
        self.act = nn.ReLU()
        self.dropout = nn.Dropout(dropout)
        self.n = len(sizes) - 1

    def forward(self, x):
        x = x.flatten(1)
        for i in range(1, self.n + 1):
            x = getattr(self, f"fc{i}")(x)
            if i < self.n:
                x = self.dropout(self.act(x))
        return x


class CNN(nn.Module):
    def __init__(self, in_channels=1, image_size=28, num_classes=10, channels1=32,
                 channels2=64, hidden=128, dropout=0.25):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, channels1, 3, padding=1)
        self.conv2 = nn.Conv2d(channels1, channels2, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        side = image_size // 2 // 2
        self.fc1 = nn.Linear(channels2 * side * side, hidden)
        self.dropout = nn.Dropout(dropout)
        self.fc2 = nn.Linear(hidden, num_classes)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = torch.flatten(x, 1)
        x = self.dropout(F.relu(self.fc1(x)))
        return self.fc2(x)


class LayerNorm(nn.Module):
    """nanoGPT's LayerNorm with an optional bias."""

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, dropout, bias):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)
        self.n_head, self.n_embd, self.dropout = n_head, n_embd, dropout

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None,
                                           dropout_p=self.dropout if self.training else 0,
                                           is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class GptMLP(nn.Module):
    def __init__(self, n_embd, dropout, bias):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd, bias=bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * n_embd, n_embd, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, dropout, bias):
        super().__init__()
        self.ln_1 = LayerNorm(n_embd, bias)
        self.attn = CausalSelfAttention(n_embd, n_head, dropout, bias)
        self.ln_2 = LayerNorm(n_embd, bias)
        self.mlp = GptMLP(n_embd, dropout, bias)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size, block_size, n_layer, n_head, n_embd, dropout, bias):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, n_embd),
            wpe=nn.Embedding(block_size, n_embd),
            drop=nn.Dropout(dropout),
            h=nn.ModuleList([Block(n_embd, n_head, dropout, bias) for _ in range(n_layer)]),
            ln_f=LayerNorm(n_embd, bias)))
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx):
        t = idx.size(1)
        pos = torch.arange(0, t, dtype=torch.long)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


def make_setup(name):
    """(model, optimizer, input, target, batch, items per step, units)."""
    if name == "gpt":
        b, t, vocab = 16, 128, 65
        model = GPT(vocab, 128, n_layer=4, n_head=4, n_embd=256, dropout=0.0, bias=True)
        tokens = torch.randint(0, vocab, (b, t + 1), dtype=torch.int64)
        x, y = tokens[:, :t].contiguous(), tokens[:, 1:].contiguous()
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
        return model, opt, x, y, b, b * t, "tokens"
    if name == "mlp":
        b = 128
        model = MLP([784, 1024, 1024, 10])
        x = torch.randn(b, 784)
    else:
        b = 64
        model = CNN()
        x = torch.randn(b, 1, 28, 28)
    y = torch.randint(0, 10, (b,), dtype=torch.int64)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    return model, opt, x, y, b, b, "samples"


def train_step(model, opt, x, y):
    logits = model(x)
    loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=["mlp", "cnn", "gpt"], default="mlp")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--windows", type=int, default=5)
    a = p.parse_args()
    if a.threads < 1 or a.steps < 1 or a.warmup < 0 or a.windows < 1:
        p.error("--threads, --steps and --windows must be >= 1 and --warmup >= 0")
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(1234)
    model, opt, x, y, batch, items, units = make_setup(a.model)
    model.train()
    for _ in range(a.warmup):
        train_step(model, opt, x, y)
    windows = min(a.windows, a.steps)
    rates = []
    for w in range(windows):
        n = a.steps // windows + (1 if w < a.steps % windows else 0)
        t0 = time.perf_counter()
        for _ in range(n):
            train_step(model, opt, x, y)
        rates.append(n * items / (time.perf_counter() - t0))
    rates.sort()
    k = len(rates)
    median = rates[k // 2] if k % 2 else (rates[k // 2 - 1] + rates[k // 2]) / 2
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB
    print(json.dumps({
        "impl": "pytorch", "model": a.model, "threads": a.threads, "batch": batch,
        "units": units, "throughput": round(median, 1), "best": round(rates[-1], 1),
        "stat": f"median of {k} windows", "steps": a.steps, "peak_rss_mib": round(peak, 1),
        "torch": torch.__version__}))


if __name__ == "__main__":
    main()
