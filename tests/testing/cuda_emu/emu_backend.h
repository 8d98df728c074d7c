// The CUDA backend of libtrainyard_cuda.so with its kernel files (kernels/cuda/*.cu) compiled
// for the host and run by the CUDA emulation (emu.h), for tests on machines without a GPU: every
// kernel the library launches runs, thread by thread, against the CPU reference, and so do its
// GEMM and cuDNN code (blas.cc, dnn.cc) over a host cuBLASLt and cuDNN (cublaslt_emu.cc,
// cudnn_emu.cc). Its runtime code (runtime.cc: memory, streams, events) is the library's too,
// over the emulated runtime (runtime_emu.h): its streams run their kernels, copies and library
// calls on host threads, in stream order, so a host read the library does not synchronise
// reads stale data. kDevices devices of compute capability 9.0.
#pragma once

#include "kernels/cuda/backend.h"

namespace trainyard::testing {

// The process's emulated backend (created on first use).
kernels::cuda::Backend* EmulatedCudaBackend();

}  // namespace trainyard::testing
