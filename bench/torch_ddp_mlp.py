#!/usr/bin/env python3
"""PyTorch side of the data-parallel scaling bench (scripts/bench-dist.sh).

The MLP 784-1024-1024-10 (ReLU) trained with SGD(lr 0.01, momentum 0.9) and batch 128 per
rank under DistributedDataParallel on the gloo backend, N processes on loopback with one
thread each, on Fashion-MNIST-shaped data held in memory. Rank 0 prints one JSON line with
the throughput of all ranks together (samples/s) over the timed steps.

  torch_ddp_mlp.py --nproc N [--steps S] [--warmup W]

Needs `pip install torch`; never needed by the product.
"""
import argparse
import json
import os
import socket
import sys
import time

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import torch.nn.functional as F
except ImportError:
    sys.exit("torch_ddp_mlp.py: PyTorch is not installed (pip install torch)")

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "golden"))
from make_nn_golden import MLP  # noqa: E402

BATCH = 128


def run_rank(rank, nproc, port, steps, warmup):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=nproc)
    torch.manual_seed(1)
    model = MLP([784, 1024, 1024, 10])
    if nproc > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(rank)
    x = torch.rand(BATCH, 784, generator=g)
    y = torch.randint(0, 10, (BATCH,), generator=g)
    for i in range(warmup + steps):
        if i == warmup:
            dist.barrier()
            start = time.perf_counter()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    dist.barrier()
    seconds = time.perf_counter() - start
    if rank == 0:
        print(json.dumps({"side": "pytorch", "nproc": nproc,
                          "samples_per_second": nproc * BATCH * steps / seconds}), flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    a = p.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(run_rank, args=(a.nproc, port, a.steps, a.warmup), nprocs=a.nproc,
                       start_method="fork")


if __name__ == "__main__":
    main()
