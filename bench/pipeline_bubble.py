#!/usr/bin/env python3
"""Pipeline parallelism's bubble and throughput (docs/design/010-zero-and-pipeline.md).

Trains examples/kjv-gpt.yaml for a few steps with `trainyard train --nproc 2`:
  - in 2 pipeline stages with M micro-batches of --batch windows per step, for M in --micro
    and both schedules: the bubble rank 0 (stage 0) measured (metrics.jsonl's pipeline_bubble:
    the part of the step it waited for the other stage, averaged over the steps after the
    first two) beside the theoretical (P - 1) / (M + P - 1), and tokens/s;
  - as plain data parallelism on the same 2 ranks with the same global batch (--batch / 2
    windows per rank, M micro-batches each), tokens/s.

    bench/pipeline_bubble.py [--bin build/bin/trainyard] [--steps 12] [--batch 16]
                             [--micro 1,2,4,8] [--threads 1]

Each rank gets --threads kernel threads; on a machine with fewer cores than 2 x threads the
ranks share cores and the figures say so (the measured bubble then includes that contention).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def train(args, workdir, name, sets):
    run = os.path.join(workdir, name)
    cmd = [args.bin, "train", os.path.join(ROOT, "examples/kjv-gpt.yaml"), "--quiet",
           "--nproc", "2", "--set", f"steps={args.steps}", "--set", f"checkpoint.dir={run}",
           "--set", "eval.every_steps=0", "--set", "eval.max_batches=1",
           "--set", f"num_threads={args.threads}", "--set", "data.num_workers=0",
           "--set", "schedule.cosine.warmup_steps=1"]
    for s in sets:
        cmd += ["--set", s]
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    steps = []
    with open(os.path.join(run, "metrics.jsonl")) as f:
        for line in f:
            m = json.loads(line)
            if m["type"] == "step" and m["step"] > 2:
                steps.append(m)
    mean = lambda key: sum(m[key] or 0 for m in steps) / len(steps)
    return mean("tokens_per_second"), mean("pipeline_bubble")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bin", default=os.path.join(ROOT, "build/bin/trainyard"))
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--micro", default="1,2,4,8")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    if args.batch % 2:
        sys.exit("--batch must be even (data parallelism halves it)")
    print(f"kjv-gpt, 2 ranks, {args.batch} windows x M micro-batches a step, "
          f"{args.threads} thread(s) per rank, {os.cpu_count()} cores")
    print(f"{'M':>3} {'schedule':>8} {'bubble':>7} {'(P-1)/(M+P-1)':>14} "
          f"{'pipeline tok/s':>15} {'data-parallel tok/s':>20} {'ratio':>6}")
    with tempfile.TemporaryDirectory() as workdir:
        for m in [int(x) for x in args.micro.split(",")]:
            accumulation = f"parallelism.grad_accumulation_steps={m}"
            dp, _ = train(args, workdir, f"dp{m}", [f"batch_size={args.batch // 2}", accumulation])
            for schedule in ("1f1b", "gpipe"):
                tps, bubble = train(args, workdir, f"pp{m}{schedule}", [
                    f"batch_size={args.batch}", accumulation, "parallelism.pipeline_stages=2",
                    f"parallelism.pipeline_schedule={schedule}"])
                print(f"{m:>3} {schedule:>8} {bubble:>7.3f} {1 / (m + 1):>14.3f} "
                      f"{tps:>15.0f} {dp:>20.0f} {tps / dp:>6.2f}")


if __name__ == "__main__":
    main()
