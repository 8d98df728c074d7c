#!/usr/bin/env bash
# The checks that need a GPU, for a lent GPU machine (CUDA, CMake and ninja; no Gloo, no gRPC):
# builds the engine and libtrainyard_nccl.so, runs the NCCL process-group tests, prints a table.
#   tools/gpu_check.sh            # from the repository root
set -uo pipefail
cd "$(dirname "$0")/.."
build=${TY_GPU_BUILD_DIR:-build-gpu}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || echo "no nvidia-smi"
tests=ON
[ -f /usr/include/gtest/gtest.h ] || tests=OFF
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTY_WITH_CUDA=ON \
      -DTY_BUILD_TESTS=$tests -DTY_BUILD_BENCH=OFF >"$build.configure.log" 2>&1 ||
  { tail -20 "$build.configure.log"; exit 1; }
targets=(trainyard_nccl)
[ "$tests" = ON ] && targets+=(nccl_gpu_test dist_test)
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" 2>&1 | tail -3
printf '\n%-40s %s\n' check result
for t in nccl_gpu_test dist_test; do
  bin="$build/tests/$t"
  if [ -x "$bin" ]; then
    out=$("$bin" --gtest_brief=1 2>&1 | tail -3 | tr '\n' ' ')
    printf '%-40s %s\n' "$t" "$out"
  else
    printf '%-40s %s\n' "$t" "not built (tests=$tests)"
  fi
done
