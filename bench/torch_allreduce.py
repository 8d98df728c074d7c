#!/usr/bin/env python3
"""PyTorch side of bench/allreduce_bench.cc: all-reduce of float32 tensors, timed.

N processes on loopback with torch.distributed's gloo backend (the same library Trainyard's
GlooProcessGroup drives). Per size every rank runs one warm-up all-reduce, then the same number
of timed ones as allreduce_bench, each preceded by a barrier; rank 0 prints one JSON line per
size with the median time and the bus bandwidth (bytes * 2(n-1)/n / time). Size 0 stands for
one float32 (4 bytes): the latency of a collective.

  torch_allreduce.py [--nproc N] [--sizes-mb 0,1,16,64,256]

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
except ImportError:
    sys.exit("torch_allreduce.py: PyTorch is not installed (pip install torch)")


def iters_for(mb):
    """Timed iterations per size; allreduce_bench.cc's ItersFor."""
    return 2000 if mb == 0 else 400 if mb <= 1 else 50 if mb <= 16 else 15 if mb <= 64 else 5


def run_rank(rank, nproc, port, sizes):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=nproc)
    for mb in sizes:
        numel = max(1, mb * (1 << 20) // 4)
        t = torch.ones(numel, dtype=torch.float32)
        seconds = []
        for i in range(-1, iters_for(mb)):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(t)
            t1 = time.perf_counter()
            if i >= 0:
                seconds.append(t1 - t0)
        seconds.sort()
        median = seconds[len(seconds) // 2]
        busbw = numel * 4 * 2 * (nproc - 1) / nproc / median / 1e9
        if rank == 0:
            print(json.dumps({"impl": "pytorch", "nproc": nproc, "size_mb": mb,
                              "iters": len(seconds), "time_ms": round(median * 1e3, 4),
                              "busbw_gbps": round(busbw, 3)}), flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--sizes-mb", default="0,1,16,64,256")
    args = p.parse_args()
    sizes = [int(s) for s in args.sizes_mb.split(",")]
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # The gloo backend listens on the host name's address unless told otherwise.
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    # fork: the ranks inherit the imported torch instead of importing it again.
    mp.start_processes(run_rank, args=(args.nproc, port, sizes), nprocs=args.nproc, join=True,
                       start_method="fork")


if __name__ == "__main__":
    main()
