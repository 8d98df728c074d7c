#!/usr/bin/env python3
"""PyTorch side of the engine benchmarks (run by hand or by scripts/bench.sh).

Measures, on the CPU, what bench/*_bench.cc measure in Trainyard:
  - autograd overhead: y = y + x, 10 000 times on 4-element tensors, forward + backward;
  - matmul n x n float32 (n = 512, 1024, 2048) in GFLOP/s;
  - elementwise add and row softmax (rows of 1024) over 16 M floats in GB/s (read + written).
Prints one JSON object. Needs `pip install torch` (PyPI), never needed by the product.
"""
import json
import time

import torch


def best_of(fn, repeats=5, warmup=1):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def autograd_chain(n=10000):
    x = torch.randn(4, requires_grad=True)

    def run():
        y = x
        for _ in range(n):
            y = y + x
        y.sum().backward()

    return best_of(run) / n * 1e6  # us per op


def matmul(n):
    a, b = torch.randn(n, n), torch.randn(n, n)
    reps = max(1, int(2e9 / (2 * n**3)))

    def run():
        for _ in range(reps):
            torch.matmul(a, b)

    return 2 * n**3 * reps / best_of(run) / 1e9


def bandwidth():
    n = 16 << 20
    a, b = torch.randn(n), torch.randn(n)
    out = {}
    out["add_GBps"] = 3 * 4 * n / best_of(lambda: torch.add(a, b)) / 1e9
    rows = a.view(-1, 1024)
    out["softmax_GBps"] = 2 * 4 * n / best_of(lambda: torch.softmax(rows, -1)) / 1e9
    dst = torch.empty_like(a)
    out["copy_GBps"] = 2 * 4 * n / best_of(lambda: dst.copy_(a)) / 1e9
    return out


def main():
    result = {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "autograd_us_per_op": autograd_chain(),
    }
    for n in (512, 1024, 2048):
        result[f"matmul_{n}_GFLOPS"] = matmul(n)
    result.update(bandwidth())
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
