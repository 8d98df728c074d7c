// HostBackend: a fake CUDA device over host memory, for unit tests of the engine's CUDA
// dispatch (worker/tensor/cuda_backend.h SetCudaBackendForTesting) on machines without a GPU.
//
// Every kernel runs synchronously through the CPU kernels of kernels/cpu (the specification);
// bf16 and f16 storage is converted to f32 temporaries, computed and rounded back, as the CUDA
// kernels compute in f32. Streams and events are dummy handles (every event is complete).
//
// Device pointers are host addresses plus kDeviceTag, which no host mapping uses: host code
// that reads or writes "device" memory directly (instead of through a kernel or a copy) faults
// here as it would on a GPU. Memcpy tells the two kinds apart by the tag.
//
// Thread-safe for the allocation bookkeeping; kernels are as thread-safe as the CPU kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/cuda/backend.h"

namespace trainyard::testing {

struct HostBackendOptions {
  int device_count = 1;
  // Malloc fails with ResourceExhausted once this many bytes are allocated on a device.
  size_t memory_limit = SIZE_MAX;
  // The largest head size AttentionFits accepts (a GPU's shared memory bounds the fused kernels').
  int64_t attention_max_head = 128;
};

class HostBackend final : public kernels::cuda::Backend {
 public:
  using Stream = kernels::cuda::Stream;
  using Event = kernels::cuda::Event;
  using ScalarType = kernels::cuda::ScalarType;
  using StridedIter = kernels::cuda::StridedIter;
  using UnaryOp = kernels::cuda::UnaryOp;
  using BinaryOp = kernels::cuda::BinaryOp;
  using CompareOp = kernels::cuda::CompareOp;
  using Pool2dShape = kernels::cuda::Pool2dShape;
  using IndexCheck = kernels::cuda::IndexCheck;
  using IndexFault = kernels::cuda::IndexFault;
  using AdamTensor = kernels::cuda::AdamTensor;
  using AttentionArgs = kernels::cuda::AttentionArgs;
  using GemmArgs = kernels::cuda::GemmArgs;
  using ConvDims = kernels::cuda::ConvDims;

  // Bit 54 of an address: outside the user address space of x86-64 and arm64 Linux processes.
  static constexpr uintptr_t kDeviceTag = uintptr_t{1} << 54;
  // The host address behind a device pointer (null and host pointers pass through).
  static void* Host(const void* p);

  explicit HostBackend(HostBackendOptions options = {});
  ~HostBackend() override;

  // Kernel launches by name ("Gemm", "AttentionForward", ...; "Gemm.bf16" and "Gemm.f16" count
  // the products on 16-bit inputs; "Memcpy.to_host" the copies from device to host memory and
  // "Sync" the stream and event synchronisations, where a real device makes the host wait), for
  // tests that check which path an op took.
  int64_t launches(const std::string& kernel) const;
  int64_t kernel_launches() const;  // of every kernel: Memcpy and Sync excluded
  size_t allocated_bytes(int device) const;

  // ---- Runtime ----
  int DeviceCount() override { return options_.device_count; }
  Status Properties(int device, kernels::cuda::DeviceProperties* out) override;
  Status SetDevice(int device) override;
  Status Malloc(int device, size_t nbytes, void** out) override;
  void Free(int device, void* ptr) override;
  // Scratch and workspaces of the real library are host memory here: nothing to release.
  void SetMemoryReleaser(void (*)(int)) override {}
  Status HostMalloc(size_t nbytes, void** out) override;
  void HostFree(void* ptr) override;
  Stream ComputeStream(int device) override;
  Stream CreateStream(int device) override;
  void Memcpy(void* dst, const void* src, size_t nbytes, Stream stream) override;
  void StreamSynchronize(Stream) override { Count("Sync"); }
  Event CreateEvent(int device) override;
  // Timing events keep the host time of their RecordEvent: every kernel here has finished by
  // then, so the span between two is the work's time, as on a device.
  Event CreateTimingEvent(int device) override;
  double EventSeconds(Event start, Event end) override;
  void DestroyEvent(Event event) override;
  void RecordEvent(Event event, Stream stream) override;
  void StreamWaitEvent(Stream, Event) override {}
  bool EventQuery(Event) override { return true; }
  void EventSynchronize(Event) override { Count("Sync"); }

  // ---- Every kernel of backend_kernels.inc: elementwise to optimizers in host_backend.cc,
  // pooling, batch norm, attention, GEMM and convolution in host_backend_nn.cc ----
#define TY_CUDA_KERNEL(name, params) void name params override;
#include "kernels/cuda/backend_kernels.inc"
#undef TY_CUDA_KERNEL
  bool AttentionFits(int device, ScalarType type, int64_t e) override;

 private:
  void Count(const char* kernel);
  void CheckDevice(int device) const;
  void CheckStream(Stream stream) const;

  const HostBackendOptions options_;
  mutable std::mutex mu_;
  std::map<std::string, int64_t> launches_;
  std::vector<size_t> allocated_;                   // per device
  std::map<void*, std::pair<int, size_t>> blocks_;  // host address -> (device, bytes)
  std::vector<char> stream_handles_;                // ComputeStream(d) is &stream_handles_[d]
  std::vector<std::vector<char>*> extra_streams_;
};

}  // namespace trainyard::testing
