// The CUDA backend of libtrainyard_cuda.so with its kernel files (kernels/cuda/*.cu) compiled
// for the host and run by the CUDA emulation (emu.h), for tests on machines without a GPU: every
// kernel the library launches runs, thread by thread, against the CPU reference, and so does its
// GEMM code (blas.cc) over a host cuBLASLt (cublaslt_emu.cc). Its runtime calls (memory,
// streams, events) and what it hands to cuDNN (the convolutions) are HostBackend's, over plain
// host memory; batch norm always takes the library's own kernels, which the real library uses
// where cuDNN does not take the shape. One emulated device, cuda:0, of compute capability 9.0.
#pragma once

#include "kernels/cuda/backend.h"

namespace trainyard::testing {

// The process's emulated backend (created on first use).
kernels::cuda::Backend* EmulatedCudaBackend();

}  // namespace trainyard::testing
