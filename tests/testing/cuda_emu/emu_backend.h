// The CUDA backend of libtrainyard_cuda.so with its kernel files (kernels/cuda/*.cu) compiled
// for the host and run by the CUDA emulation (emu.h), for tests on machines without a GPU: every
// kernel the library launches runs, thread by thread, against the CPU reference, and so do its
// GEMM and cuDNN code (blas.cc, dnn.cc) over a host cuBLASLt and cuDNN (cublaslt_emu.cc,
// cudnn_emu.cc). Its runtime calls (memory, streams, events) are HostBackend's, over plain host
// memory. The runtime's emulated devices (runtime_emu.h), of compute capability 9.0.
#pragma once

#include "kernels/cuda/backend.h"

namespace trainyard::testing {

// The process's emulated backend (created on first use).
kernels::cuda::Backend* EmulatedCudaBackend();

}  // namespace trainyard::testing
