# Sourced by scripts/bench-train.sh and scripts/profile-train.sh: checks that PyTorch is there,
# builds bench/train_step_bench into $build, and exports the one environment both sides of a
# training-step comparison run under. OpenMP threads sleep when idle (PyTorch's OpenMP would
# otherwise spin and steal the core from the other thread), glibc malloc keeps freed memory
# instead of returning it to the OS (PyTorch re-faults pages every step otherwise; Trainyard has
# its own cache), and OpenBLAS (Trainyard's GEMM; PyTorch uses MKL) runs single-threaded under
# Trainyard's pool. Needs $build and $script (the caller's name, for messages).

if ! python3 -c "import torch" 2>/dev/null; then
  echo "$script: PyTorch is not installed for $(command -v python3 || echo python3);" \
       "install it (pip install torch) to compare against it" >&2
  exit 1
fi

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release ${TY_CMAKE_ARGS:-} >/dev/null
cmake --build "$build" --target train_step_bench >/dev/null

export OMP_WAIT_POLICY=PASSIVE
export MALLOC_TRIM_THRESHOLD_=4294967296  # never trim the heap top
export MALLOC_MMAP_THRESHOLD_=33554432    # glibc's maximum: blocks up to 32 MiB from the heap
export OPENBLAS_NUM_THREADS=1
