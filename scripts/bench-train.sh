#!/usr/bin/env bash
# One training step of the zoo's mlp, cnn and gpt, Trainyard beside PyTorch on this machine:
# the same models, batches, optimizers and thread counts (bench/train_step_bench.cc and
# bench/torch_train_step.py), one model per process, the two sides alternated so that they
# share the machine's noise. Prints a table of throughputs, their ratio and peak RSS.
#
#   scripts/bench-train.sh                    # threads 1 and 2, 3 rounds
#   TY_BENCH_THREADS="1" TY_BENCH_ROUNDS=5 TY_BENCH_MODELS="gpt" scripts/bench-train.sh
#
# Each run reports the median over 5 timing windows; over the rounds the script keeps each
# side's best median (noise on a shared VM only ever slows a run down). Both sides run under
# one environment (scripts/train-step-env.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

threads=${TY_BENCH_THREADS:-1 2}
models=${TY_BENCH_MODELS:-mlp cnn gpt}
rounds=${TY_BENCH_ROUNDS:-3}
steps=${TY_BENCH_STEPS:-}
build=${TY_BENCH_BUILD_DIR:-build}

script=bench-train
source scripts/train-step-env.sh

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

steps_for() {
  if [[ -n "$steps" ]]; then echo "$steps"; return; fi
  case "$1" in mlp) echo 100 ;; cnn) echo 40 ;; gpt) echo 15 ;; esac
}

for round in $(seq "$rounds"); do
  for m in $models; do
    for t in $threads; do
      s=$(steps_for "$m")
      args=(--model "$m" --threads "$t" --steps "$s" --warmup 3 --windows 5)
      # Alternate which side goes first from round to round.
      if (( round % 2 )); then
        "$build/bench/train_step_bench" "${args[@]}" >>"$out/trainyard.jsonl"
        python3 bench/torch_train_step.py "${args[@]}" >>"$out/pytorch.jsonl"
      else
        python3 bench/torch_train_step.py "${args[@]}" >>"$out/pytorch.jsonl"
        "$build/bench/train_step_bench" "${args[@]}" >>"$out/trainyard.jsonl"
      fi
    done
  done
done

python3 - "$out" <<'EOF'
import json, sys
d = sys.argv[1]
runs = {}
for side in ("trainyard", "pytorch"):
    for line in open(f"{d}/{side}.jsonl"):
        r = json.loads(line)
        key = (r["model"], r["threads"], side)
        best = runs.get(key)
        if best is None or r["throughput"] > best["throughput"]:
            peak = max(r["peak_rss_mib"], best["peak_rss_mib"]) if best else r["peak_rss_mib"]
            runs[key] = dict(r, peak_rss_mib=peak)
        else:
            best["peak_rss_mib"] = max(best["peak_rss_mib"], r["peak_rss_mib"])
print(f"{'model':6} {'threads':>7} {'units/s':>8} {'trainyard':>10} {'pytorch':>10} {'ratio':>6}"
      f" {'ty MiB':>7} {'pt MiB':>7}")
for model, threads in sorted({k[:2] for k in runs}, key=lambda k: (["mlp", "cnn", "gpt"].index(k[0]), k[1])):
    ty, pt = runs.get((model, threads, "trainyard")), runs.get((model, threads, "pytorch"))
    if not ty or not pt:
        continue
    print(f"{model:6} {threads:7d} {ty['units']:>8} {ty['throughput']:10.0f} {pt['throughput']:10.0f}"
          f" {ty['throughput'] / pt['throughput']:6.2f} {ty['peak_rss_mib']:7.0f} {pt['peak_rss_mib']:7.0f}")
print("throughput: best over rounds of each run's median over 5 windows; peak: max RSS over runs")
EOF
