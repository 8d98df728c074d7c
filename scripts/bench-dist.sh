#!/usr/bin/env bash
# Data-parallel benchmarks beside torch.distributed (gloo backend), in one run:
#   1. all-reduce of 4 bytes and 1, 16, 64, 256 MB between 2 processes
#      (scripts/bench-allreduce.sh);
#   2. MLP 784-1024-1024-10 training throughput on 1 and 2 ranks, one thread per rank, batch 128
#      per rank (weak scaling): Trainyard's `trainyard train --nproc N` on Fashion-MNIST beside
#      PyTorch DDP (bench/torch_ddp_mlp.py), and the scaling efficiency S(2) / (2 S(1)).
# Trainyard's collectives use $TY_BENCH_ALGORITHM (default auto: shared memory on one host;
# ring: loopback TCP, as PyTorch's gloo).
# Needs the build packages, Fashion-MNIST (scripts/test.sh installs both) and PyTorch.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${TY_BENCH_BUILD_DIR:-build}
steps=${TY_BENCH_STEPS:-300}

scripts/bench-allreduce.sh
echo
cmake --build "$build" --target trainyard >/dev/null

spec=$(mktemp --suffix=.yaml)
trap 'rm -f "$spec"' EXIT
cat >"$spec" <<YAML
name: bench-mlp
model: {mlp: {sizes: [784, 1024, 1024, 10]}}
data: {fashion_mnist: {}}
optimizer: {sgd: {lr: 0.01, momentum: 0.9}}
batch_size: 128
steps: $steps
eval: {max_batches: 1}
num_threads: 1
parallelism: {all_reduce_algorithm: ${TY_BENCH_ALGORITHM:-auto}}
YAML

ours() {  # samples/s of all ranks together, from the run's JSON summary
  "$build/bin/trainyard" train "$spec" --nproc "$1" --quiet -o json |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["samples_per_second"])'
}
theirs() {
  python3 bench/torch_ddp_mlp.py --nproc "$1" --steps "$steps" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["samples_per_second"])'
}
ty1=$(ours 1); ty2=$(ours 2); pt1=$(theirs 1); pt2=$(theirs 2)
python3 - "$ty1" "$ty2" "$pt1" "$pt2" <<'PY'
import sys
ty1, ty2, pt1, pt2 = map(float, sys.argv[1:])
print("MLP 784-1024-1024-10, batch 128 per rank, 1 thread per rank (samples/s, all ranks)")
print(f"{'':10} {'1 rank':>9} {'2 ranks':>9} {'efficiency':>11}")
print(f"{'trainyard':10} {ty1:9.0f} {ty2:9.0f} {ty2 / (2 * ty1):10.0%}")
print(f"{'pytorch':10} {pt1:9.0f} {pt2:9.0f} {pt2 / (2 * pt1):10.0%}")
print("efficiency = S(2 ranks) / (2 x S(1 rank)); trainyard: whole runs on Fashion-MNIST"
      " (data loading included); pytorch: DDP on in-memory batches")
PY
