#!/usr/bin/env bash
# Builds and runs the engine benchmarks (bench/), then prints them beside PyTorch's figures
# for the same work when PyTorch is installed (pip install torch; never needed by the product).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
ty_ensure_packages "${TY_BUILD_PACKAGES[@]}" python3

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release ${TY_CMAKE_ARGS:-} >/dev/null
cmake --build build -j "$(nproc)" --target autograd_bench matmul_bench bandwidth_bench
out=$(mktemp -d)
for b in autograd_bench matmul_bench bandwidth_bench; do
  "build/bench/$b" --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true \
    --benchmark_out="$out/$b.json" --benchmark_out_format=json >/dev/null
done
if python3 -c "import torch" 2>/dev/null; then
  python3 bench/torch_reference.py 2>/dev/null > "$out/torch.json" || true
fi
python3 bench/report.py "$out"
