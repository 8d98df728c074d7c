#!/usr/bin/env python3
"""PyTorch side of bench/cuda_bench.cc: a GPT-2 small training step, and plain matmuls.

  torch_gpt2_step.py [--batch B] [--steps S]   GPT-2 small step (cuda_bench gpt2)
  torch_gpt2_step.py --matmul                  torch.matmul at 4096/8192, bf16 and tf32
  torch_gpt2_step.py --batch-norm              F.batch_norm training (cuda_bench batchnorm)
  torch_gpt2_step.py --profile [--batch B]     GPU time per kernel over 3 steps (torch.profiler)

The step is cuda_bench's: nanoGPT's model (defined below, eager, no torch.compile) with 12
layers, width 768, 12 heads, context 1024, vocabulary 50257, dropout 0, bias; forward and
cross-entropy under torch.autocast('cuda', dtype=torch.bfloat16), backward, AdamW(lr 6e-4,
weight_decay 0.1, the default foreach implementation, every parameter decayed as the engine's
AdamW does), zero_grad(set_to_none=True), loss.item() every step, on random tokens fixed once on
the device. 2 warm-up steps, then S (default 10) timed ones; phase_ms: forward (with the loss),
backward and optimizer (with zero_grad), averaged over 3 more steps synchronised between phases.
--batch 0 (the default) tries 32,
16 and 8 and keeps the largest that does not run out of memory (PyTorch raises on OOM, so it can
simply try; cuda_bench has to estimate). Pass the batch cuda_bench reports to compare like for
like.

MFU is nanoGPT's estimate_mfu: (6 N + 12 n_layer n_embd T) * tokens/s / 989.4e12, N being
get_num_params() (position embeddings excluded), 989.4 TFLOP/s the H100/H200 dense bf16 peak.
Matmul: 3 warm-ups, then 20 products between two synchronisations; TFLOP/s = 2 n^3 / seconds.

Prints one JSON line per measurement, or {"skipped": ...} and exit 0 where CUDA is missing.
Needs `pip install torch`; never needed by the product.
"""
import argparse
import gc
import json
import math
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    sys.exit("torch_gpt2_step.py: PyTorch is not installed (pip install torch)")

PEAK_BF16_FLOPS = 989.4e12  # H100/H200 SXM dense bf16
N_LAYER, N_HEAD, N_EMBD, CONTEXT, VOCAB = 12, 12, 768, 1024, 50257
WARMUP = 2
PHASE_STEPS = 3  # more steps, synchronised between phases, for phase_ms
MATMUL_WARMUP, MATMUL_ITERS = 3, 20
BN_ITERS = 20


class LayerNorm(nn.Module):
    """LayerNorm with an optional bias (nanoGPT's)."""

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, bias):
        super().__init__()
        self.n_head, self.n_embd = n_head, n_embd
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)

    def forward(self, x):  # (B, T, C)
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, nh, T, hs)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))


class MLP(nn.Module):
    def __init__(self, n_embd, bias):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd, bias=bias)
        self.gelu = nn.GELU()  # erf form
        self.c_proj = nn.Linear(4 * n_embd, n_embd, bias=bias)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, bias):
        super().__init__()
        self.ln_1 = LayerNorm(n_embd, bias)
        self.attn = CausalSelfAttention(n_embd, n_head, bias)
        self.ln_2 = LayerNorm(n_embd, bias)
        self.mlp = MLP(n_embd, bias)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab, context, n_layer, n_head, n_embd, bias=True):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, n_embd),
            wpe=nn.Embedding(context, n_embd),
            h=nn.ModuleList([Block(n_embd, n_head, bias) for _ in range(n_layer)]),
            ln_f=LayerNorm(n_embd, bias)))
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def get_num_params(self):
        """nanoGPT's: parameters less the position embeddings (the tied weight counted once)."""
        return sum(p.numel() for p in self.parameters()) - self.transformer.wpe.weight.numel()

    def forward(self, idx):  # (B, T) int64 -> (B, T, vocab)
        t = idx.size(1)
        pos = torch.arange(t, dtype=torch.long, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


def make_setup(batch):
    """(model, optimizer, x, y) on cuda:0, from a fixed seed."""
    torch.manual_seed(1234)
    model = GPT(VOCAB, CONTEXT, N_LAYER, N_HEAD, N_EMBD).cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.1)
    tokens = torch.randint(0, VOCAB, (batch, CONTEXT + 1), dtype=torch.int64, device="cuda")
    x, y = tokens[:, :CONTEXT].contiguous(), tokens[:, 1:].contiguous()
    return model, opt, x, y


def train_step(model, opt, x, y, phases=None):
    """One step; the loss. With `phases` (a dict of seconds), the device is synchronised after
    forward, backward and optimizer, and each one's time added to its entry."""
    marks = [time.perf_counter()]

    def lap(name):
        if phases is not None:
            torch.cuda.synchronize()
            marks.append(time.perf_counter())
            phases[name] = phases.get(name, 0.0) + marks[-1] - marks[-2]

    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
    lap("forward")
    loss.backward()
    lap("backward")
    opt.step()
    opt.zero_grad(set_to_none=True)
    lap("optimizer")
    return loss.item()


def warmed_setup(batch):
    """make_setup(batch) after its warm-up steps, or None when it runs out of memory."""
    torch.cuda.reset_peak_memory_stats()
    try:
        setup = make_setup(batch)
        for _ in range(WARMUP):
            train_step(*setup)
        return setup
    except torch.cuda.OutOfMemoryError:
        return None


def choose_setup(batch):
    """(batch, warmed setup): the given batch, or the largest of 32, 16, 8 that fits."""
    for b in ([batch] if batch > 0 else [32, 16, 8]):
        setup = warmed_setup(b)
        if setup is not None:
            return b, setup
        gc.collect()
        torch.cuda.empty_cache()
        print(f"torch_gpt2_step.py: batch {b} ran out of memory", file=sys.stderr)
    sys.exit("torch_gpt2_step.py: no batch fits in device memory")


def run_gpt2(requested, steps):
    batch, (model, opt, x, y) = choose_setup(requested)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    loss = 0.0
    for _ in range(steps):
        loss = train_step(model, opt, x, y)
    torch.cuda.synchronize()
    secs = time.perf_counter() - t0
    phases = {}
    for _ in range(PHASE_STEPS):
        train_step(model, opt, x, y, phases)
    tokens_per_s = batch * CONTEXT * steps / secs
    n_params = model.get_num_params()
    flops_per_token = 6 * n_params + 12 * N_LAYER * N_EMBD * CONTEXT
    gib = 1 << 30
    print(json.dumps({
        "bench": "gpt2", "impl": "pytorch", "device": torch.cuda.get_device_name(0),
        "batch": batch, "batch_choice": "flag" if requested > 0 else "largest that fits",
        "seq_len": CONTEXT, "steps": steps, "tokens_per_s": round(tokens_per_s, 1),
        "step_ms": round(secs / steps * 1e3, 2),
        "peak_allocated_gib": round(torch.cuda.max_memory_allocated() / gib, 3),
        "peak_reserved_gib": round(torch.cuda.max_memory_reserved() / gib, 3),
        "mfu": round(flops_per_token * tokens_per_s / PEAK_BF16_FLOPS, 4),
        "params": sum(p.numel() for p in model.parameters()), "mfu_params": n_params,
        "loss": round(loss, 4),
        "phase_ms": {k: round(v / PHASE_STEPS * 1e3, 2) for k, v in phases.items()},
        "torch": torch.__version__}), flush=True)


def matmul_seconds(a, b):
    for _ in range(MATMUL_WARMUP):
        torch.matmul(a, b)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(MATMUL_ITERS):
        torch.matmul(a, b)
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / MATMUL_ITERS


def run_matmul():
    torch.backends.cuda.matmul.allow_tf32 = True  # f32 matmuls on TF32 tensor cores
    torch.manual_seed(1234)
    for n in (4096, 8192):
        for precision, dtype in (("bf16", torch.bfloat16), ("tf32", torch.float32)):
            a = torch.randn(n, n, device="cuda", dtype=dtype)
            b = torch.randn(n, n, device="cuda", dtype=dtype)
            secs = matmul_seconds(a, b)
            print(json.dumps({
                "bench": "matmul", "impl": "pytorch", "device": torch.cuda.get_device_name(0),
                "n": n, "precision": precision, "iters": MATMUL_ITERS,
                "torch_tflops": round(2 * n**3 / secs / 1e12, 2), "torch": torch.__version__}),
                flush=True)
            del a, b


def run_profile(requested):
    """GPU time per kernel over 3 steps (torch.profiler), the 15 largest: what to compare with
    the engine's nsys summary in gpu_check.sh."""
    batch, (model, opt, x, y) = choose_setup(requested)
    activities = [torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(3):
            train_step(model, opt, x, y)
        torch.cuda.synchronize()
    print(f"batch {batch}")
    table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=15,
                                      max_name_column_width=60)
    print(table)


def run_batch_norm():
    """F.batch_norm training forward + backward at cuda_bench batchnorm's shapes."""
    torch.manual_seed(7)
    for shape in ((32, 64, 112, 112), (32, 256, 56, 56), (32, 2048, 7, 7)):
        c = shape[1]
        x = torch.randn(shape, device="cuda", requires_grad=True)
        w = torch.ones(c, device="cuda", requires_grad=True)
        b = torch.zeros(c, device="cuda", requires_grad=True)
        mean, var = torch.zeros(c, device="cuda"), torch.ones(c, device="cuda")

        def once():
            F.batch_norm(x, mean, var, w, b, training=True).sum().backward()

        for _ in range(3):
            once()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(BN_ITERS):
            once()
        torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) / BN_ITERS * 1e3
        print(json.dumps({
            "bench": "batchnorm", "impl": "pytorch", "device": torch.cuda.get_device_name(0),
            "shape": "x".join(map(str, shape)) + " f32 training, forward+backward",
            "ms": round(ms, 3), "torch": torch.__version__}), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--matmul", action="store_true", help="time torch.matmul instead")
    p.add_argument("--batch-norm", action="store_true", help="time F.batch_norm instead")
    p.add_argument("--profile", action="store_true",
                   help="print GPU time per kernel over 3 steps instead")
    p.add_argument("--batch", type=int, default=0, help="0: the largest of 32, 16, 8 that fits")
    p.add_argument("--steps", type=int, default=10)
    a = p.parse_args()
    if a.batch < 0 or a.steps < 1:
        p.error("--batch must be >= 0 and --steps >= 1")
    if not torch.cuda.is_available():
        print("torch_gpt2_step.py: skipped: no CUDA device", file=sys.stderr)
        print(json.dumps({"skipped": "no CUDA device visible to PyTorch"}))
        return
    if a.matmul:
        run_matmul()
    elif a.batch_norm:
        run_batch_norm()
    elif a.profile:
        run_profile(a.batch)
    else:
        run_gpt2(a.batch, a.steps)


if __name__ == "__main__":
    main()
