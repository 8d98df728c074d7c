#!/usr/bin/env bash
# Where one training step's time goes, Trainyard beside PyTorch: both sides of
# scripts/bench-train.sh (same model, batch, optimizer and thread count, same environment)
# run under `perf record`, and bench/perf_categories.py groups the samples by symbol into GEMM,
# elementwise and other kernels, copies, the allocator, the framework, threads, Python and
# the OS.
#
#   scripts/profile-train.sh                  # gpt at 1 thread
#   TY_BENCH_MODEL=mlp TY_BENCH_THREADS=2 scripts/profile-train.sh
#
# Needs perf (linux-perf) with access to this process's samples, and PyTorch.
set -euo pipefail
cd "$(dirname "$0")/.."

model=${TY_BENCH_MODEL:-gpt}
threads=${TY_BENCH_THREADS:-1}
build=${TY_BENCH_BUILD_DIR:-build}
case "$model" in mlp) steps=200 ;; cnn) steps=60 ;; gpt) steps=25 ;;
  *) echo "profile-train: TY_BENCH_MODEL = \"$model\": allowed: mlp, cnn, gpt" >&2; exit 1 ;;
esac

command -v perf >/dev/null || { echo "profile-train: perf is not installed" >&2; exit 1; }
script=profile-train
source scripts/train-step-env.sh

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mkfifo "$out/control"
profile() {  # label command...: perf samples per symbol of the command's timed steps
  local label=$1; shift
  # Events start off (-D -1); the bench turns them on for its timed steps through the fifo.
  TY_PERF_CONTROL="$out/control" perf record -q -F 1999 -D -1 --control "fifo:$out/control" \
    -o "$out/$label.data" -- "$@" --model "$model" --threads "$threads" --steps "$steps" \
    --warmup 3 --windows 1 >"$out/$label.json"
  perf report -q -n -i "$out/$label.data" --stdio --no-children --sort dso,sym -g none \
    --percent-limit 0 >"$out/$label.txt" 2>/dev/null
}
profile trainyard "$build/bench/train_step_bench"
profile pytorch python3 bench/torch_train_step.py

echo "$model, $threads thread(s), $steps steps: perf samples (CPU time) by category"
python3 bench/perf_categories.py 1999 "$steps" trainyard="$out/trainyard.txt" \
  pytorch="$out/pytorch.txt"
python3 - "$out/trainyard.json" "$out/pytorch.json" <<'PY'
import json, sys
for path in sys.argv[1:]:
    r = json.load(open(path))
    print(f"{r['impl']}: {r['throughput']} {r['units']}/s under perf")
PY
for side in trainyard pytorch; do
  echo "top symbols, $side:"
  head -12 "$out/$side.txt" | cut -c1-160
done
