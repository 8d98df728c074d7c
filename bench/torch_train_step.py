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
import os
import resource
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    sys.exit("torch_train_step.py: PyTorch is not installed (pip install torch)")

# The zoo's PyTorch twins, as the golden tests define them.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "golden"))
from make_nn_golden import CNN, MLP, gpt  # noqa: E402


def make_setup(name):
    """(model, optimizer, input, target, batch, items per step, units)."""
    if name == "gpt":
        b, t, vocab = 16, 128, 65
        model = gpt(vocab, 128, n_layer=4, n_head=4, n_embd=256, dropout=0.0, bias=True)
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


def perf_control(command):
    """Under scripts/profile-train.sh, turns perf record's events on or off through the fifo
    named by TY_PERF_CONTROL, so that the profile holds the timed steps only."""
    path = os.environ.get("TY_PERF_CONTROL")
    if not path:
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return  # no perf reading it
    os.write(fd, command.encode())
    os.close(fd)


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
    perf_control("enable\n")
    for w in range(windows):
        n = a.steps // windows + (1 if w < a.steps % windows else 0)
        t0 = time.perf_counter()
        for _ in range(n):
            train_step(model, opt, x, y)
        rates.append(n * items / (time.perf_counter() - t0))
    perf_control("disable\n")
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
