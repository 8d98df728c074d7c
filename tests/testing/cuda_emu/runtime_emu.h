// The host CUDA runtime (runtime_emu.cc): its devices, and its streams, on which the emulated
// kernels (emu.h), cuBLASLt, cuDNN and NCCL (nccl_emu.cc) queue their work.
//
// kDevices emulated devices, cuda:0 to cuda:3, all of compute capability 9.0 and all over host
// memory; the current device is per host thread, as CUDA's is, and cudaDeviceSynchronize waits
// for the streams of the current one. So test ranks on threads each have a device of their own,
// as NCCL requires.
//
// A stream made by cudaStreamCreate* runs its work, in order, on a host thread of its own, so
// its work is asynchronous as on a device: cudaStreamQuery, events and cudaStreamWaitEvent order
// it. The legacy default stream (null) is synchronous: work on it runs in the caller, before the
// call returns.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>

namespace ty_emu {

inline constexpr int kDevices = 4;

// Runs `work` on `stream`: queued behind the stream's earlier work, or at once on a synchronous
// handle.
void OnStream(cudaStream_t stream, std::function<void()> work);

}  // namespace ty_emu
