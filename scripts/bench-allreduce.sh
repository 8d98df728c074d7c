#!/usr/bin/env bash
# All-reduce of float32 tensors (4 bytes, 1, 16, 64, 256 MB) between 2 processes on one host:
# Trainyard's GlooProcessGroup (bench/allreduce_bench.cc) beside torch.distributed's gloo
# backend (bench/torch_allreduce.py), alternated round by round so that both share the
# machine's noise. Prints one table: median time per all-reduce and bus bandwidth
# (busbw = bytes * 2(n-1)/n / time), and the ratio of the two bandwidths.
#
#   scripts/bench-allreduce.sh                       # 2 processes, 7 rounds (about 90 s)
#   TY_BENCH_ALGORITHM=ring scripts/bench-allreduce.sh   # Trainyard over loopback TCP too
#   TY_BENCH_NPROC=3 TY_BENCH_ROUNDS=5 TY_BENCH_SIZES_MB=16,64 scripts/bench-allreduce.sh
#
# Each run reports the median over its timed iterations; over the rounds the script keeps
# each side's best median (noise on a shared VM only ever slows a run down).
set -euo pipefail
cd "$(dirname "$0")/.."

nproc=${TY_BENCH_NPROC:-2}
rounds=${TY_BENCH_ROUNDS:-7}
sizes=${TY_BENCH_SIZES_MB:-0,1,16,64,256}
algorithm=${TY_BENCH_ALGORITHM:-auto}
build=${TY_BENCH_BUILD_DIR:-build}

if ! python3 -c "import torch" 2>/dev/null; then
  echo "bench-allreduce: PyTorch is not installed for $(command -v python3 || echo python3);" \
       "install it (pip install torch) to compare against it" >&2
  exit 1
fi

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release ${TY_CMAKE_ARGS:-} >/dev/null
if ! cmake --build "$build" --target allreduce_bench >/dev/null; then
  echo "bench-allreduce: could not build allreduce_bench; it needs Gloo (libgloo-dev) and" \
       "Google Benchmark (libbenchmark-dev) for the bench folder" >&2
  exit 1
fi

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

args=(--nproc "$nproc" --sizes-mb "$sizes")
for round in $(seq "$rounds"); do
  # Alternate which side goes first from round to round.
  if (( round % 2 )); then
    "$build/bench/allreduce_bench" "${args[@]}" --algorithm "$algorithm" >>"$out/trainyard.jsonl"
    python3 bench/torch_allreduce.py "${args[@]}" >>"$out/pytorch.jsonl"
  else
    python3 bench/torch_allreduce.py "${args[@]}" >>"$out/pytorch.jsonl"
    "$build/bench/allreduce_bench" "${args[@]}" --algorithm "$algorithm" >>"$out/trainyard.jsonl"
  fi
done

python3 - "$out" "$nproc" "$rounds" <<'EOF'
import json, sys
d, nproc, rounds = sys.argv[1], sys.argv[2], sys.argv[3]
best = {}
for side in ("trainyard", "pytorch"):
    for line in open(f"{d}/{side}.jsonl"):
        r = json.loads(line)
        key = (r["size_mb"], side)
        if key not in best or r["time_ms"] < best[key]["time_ms"]:
            best[key] = r
print(f"all-reduce float32, {nproc} processes on one host, best of {rounds} rounds")
print(f"{'size':>7} {'ty ms':>9} {'ty busbw':>9} {'pt ms':>9} {'pt busbw':>9} {'ratio':>6}")
for mb in sorted({k[0] for k in best}):
    ty, pt = best.get((mb, "trainyard")), best.get((mb, "pytorch"))
    if not ty or not pt:
        continue
    size = "   4 B " if mb == 0 else f"{mb:>4} MB"
    print(f"{size} {ty['time_ms']:9.3f} {ty['busbw_gbps']:7.2f}GB {pt['time_ms']:9.3f}"
          f" {pt['busbw_gbps']:7.2f}GB {pt['time_ms'] / ty['time_ms']:6.2f}")
print("ms: median over a run's timed iterations; busbw = bytes * 2(n-1)/n / time (GB/s); "
      "ratio = pytorch time / trainyard time (the busbw ratio)")
EOF
