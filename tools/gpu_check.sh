#!/usr/bin/env bash
# The checks that need a GPU, for a lent GPU machine (CUDA, CMake, ninja and PyTorch; no Gloo,
# gRPC, OpenBLAS, Google Benchmark or GoogleTest): builds the engine, libtrainyard_cuda.so and
# libtrainyard_nccl.so, runs the CUDA parity tests, the NCCL tests and the GPU benchmarks
# (engine and PyTorch side by side), and prints one short table. Meant to fit 8 minutes.
#
#   tools/gpu_check.sh            # from the repository root
#
# TY_GPU_BUILD_DIR (default build-gpu) and TY_GPU_CMAKE_ARGS (more CMake flags, e.g. to rehearse
# the GPU machine's missing packages elsewhere: -DCMAKE_DISABLE_FIND_PACKAGE_gRPC=ON ...).
#
# GoogleTest: the machine has none, so carry Debian's sources along (not committed):
#   mkdir -p .gpu-deps && cp -r /usr/src/googletest .gpu-deps/ && echo /.gpu-deps/ >>.git/info/exclude
# and name .gpu-deps in the device tool's `carry`. cuDNN and NCCL come from PyTorch's wheels.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${TY_GPU_BUILD_DIR:-build-gpu}
out=${OUT:-$build/out}
mkdir -p "$build" "$out"
start=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || echo "no nvidia-smi"

# cuDNN and NCCL from the nvidia-* wheels next to PyTorch, where the toolkit has none.
wheel_dir() { python3 -c "import os, nvidia.$1 as m; print(os.path.dirname(m.__file__))" 2>/dev/null; }
cudnn=$(wheel_dir cudnn)
nccl=$(wheel_dir nccl)
extra=()
[ -n "$cudnn" ] && extra+=(-DTY_CUDNN_ROOT="$cudnn") && export LD_LIBRARY_PATH="$cudnn/lib:${LD_LIBRARY_PATH:-}"
if [ -n "$nccl" ]; then
  extra+=(-DTY_NCCL_INCLUDE_DIR="$nccl/include" -DTY_NCCL_LIBRARY="$(ls "$nccl"/lib/libnccl.so* | head -1)")
  export LD_LIBRARY_PATH="$nccl/lib:$LD_LIBRARY_PATH"
fi
[ -f /usr/include/gtest/gtest.h ] || [ ! -d .gpu-deps/googletest ] ||
  extra+=(-DTY_GTEST_SOURCE_DIR="$PWD/.gpu-deps/googletest")

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTY_WITH_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES=90 "${extra[@]}" ${TY_GPU_CMAKE_ARGS:-} >"$out/configure.log" 2>&1 ||
  { tail -30 "$out/configure.log"; exit 1; }
targets=(trainyard_cuda cuda_bench)
grep -q "^cuda_test:" <(ninja -C "$build" -t targets all 2>/dev/null) && targets+=(cuda_test)
grep -q "^nccl_gpu_test:" <(ninja -C "$build" -t targets all 2>/dev/null) && targets+=(nccl_gpu_test)
# -k 0: a target that fails to build does not stop the others, so one lease still measures what
# did build; the errors are printed and the missing binaries reported below.
ninja -C "$build" -k 0 -j "$(nproc)" "${targets[@]}" >"$out/build.log" 2>&1 ||
  grep -E "error|FAILED" "$out/build.log" | head -40
echo "built in $(( $(date +%s) - start )) s"
[ -f "$build/lib/libtrainyard_cuda.so" ] || { echo "libtrainyard_cuda.so did not build"; exit 1; }

row() { printf '%-34s %s\n' "$1" "$2"; }
printf '\n%-34s %s\n' check result
for t in cuda_test nccl_gpu_test; do
  bin="$build/tests/$t"
  if [ -x "$bin" ]; then
    filter='*'
    [ "$t" = cuda_test ] && filter='Gpu/*'
    # Bounded: a kernel that hangs must not take the rest of the lease.
    timeout 180 "$bin" --gtest_filter="$filter" --gtest_brief=1 >"$out/$t.log" 2>&1
    rc=$?
    row "$t" "rc $rc: $(grep -E '^\[  (PASSED|FAILED)  \]|SKIPPED \]' "$out/$t.log" | tr '\n' ' ' | cut -c1-110)"
    grep -E '^\[  FAILED  \]' "$out/$t.log" | head -20
    [ "$rc" = 124 ] && tail -5 "$out/$t.log"
  else
    row "$t" "not built"
  fi
done

bench="$build/bench/cuda_bench"
timeout 180 "$bench" matmul >"$out/matmul.jsonl" 2>"$out/matmul.err"; row "cuda_bench matmul" "rc $?"
timeout 120 "$bench" attention >"$out/attention.jsonl" 2>"$out/attention.err"; row "cuda_bench attention" "rc $?"
timeout 60 "$bench" batchnorm >"$out/batchnorm.jsonl" 2>"$out/batchnorm.err"; row "cuda_bench batchnorm" "rc $?"
timeout 60 python3 bench/torch_gpt2_step.py --batch-norm >"$out/torch_batchnorm.jsonl" 2>&1
timeout 120 python3 bench/torch_gpt2_step.py --matmul >"$out/torch_matmul.jsonl" 2>&1
timeout 180 "$bench" gpt2 >"$out/gpt2.jsonl" 2>"$out/gpt2.err"; row "cuda_bench gpt2" "rc $?"
timeout 180 python3 bench/torch_gpt2_step.py >"$out/torch_gpt2.jsonl" 2>&1
row "torch gpt2" "rc $?"
echo
cat "$out"/matmul.jsonl "$out"/torch_matmul.jsonl "$out"/attention.jsonl "$out"/batchnorm.jsonl \
    "$out"/torch_batchnorm.jsonl "$out"/gpt2.jsonl "$out"/torch_gpt2.jsonl
tail -5 "$out"/gpt2.err "$out"/matmul.err 2>/dev/null

# Where a GPT-2 step's GPU time goes, kernel by kernel, on both sides: nsys over 3 engine steps
# (when the toolkit has it) and torch.profiler over 3 PyTorch steps, at the engine's batch.
# Last and bounded, and skipped past 6 minutes, so it never costs the figures above.
if [ $(( $(date +%s) - start )) -lt 360 ]; then
  batch=$(grep -o '"batch":[0-9]*' "$out/gpt2.jsonl" | head -1 | cut -d: -f2)
  batch=${batch:-8}
  nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys 2>/dev/null)
  if [ -n "$nsys" ]; then
    timeout 150 "$nsys" profile -o "$out/gpt2" --force-overwrite true \
        "$bench" gpt2 --batch "$batch" --steps 3 >"$out/nsys.log" 2>&1 &&
      { "$nsys" stats --report cuda_gpu_kern_sum --format csv "$out/gpt2.nsys-rep" 2>/dev/null ||
        "$nsys" stats --report gpukernsum --format csv "$out/gpt2.nsys-rep"; } \
        >"$out/gpt2_kernels.csv" 2>>"$out/nsys.log"
    echo; echo "engine kernels (nsys, 3 steps, batch $batch): top 15 by GPU time"
    grep -v '^$' "$out/gpt2_kernels.csv" | head -16 | cut -c1-160
  else
    echo "no nsys: engine kernel breakdown skipped"
  fi
  timeout 150 python3 bench/torch_gpt2_step.py --profile --batch "$batch" \
      >"$out/torch_kernels.txt" 2>&1
  echo; echo "PyTorch kernels (torch.profiler, 3 steps, batch $batch):"; head -25 "$out/torch_kernels.txt"
fi
echo "total $(( $(date +%s) - start )) s"
