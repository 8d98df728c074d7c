#include "worker/tensor/storage.h"

#include "worker/tensor/allocator.h"
#include "worker/tensor/cuda_backend.h"

namespace trainyard {

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  Status s = CheckDeviceAvailable(device);
  TY_CHECK(s.ok()) << s.message() << " (check the device with CheckDeviceAvailable first)";
  if (device.is_cpu()) {
    data_ = CpuAllocator::Get().Allocate(nbytes);
    return;
  }
  StatusOr<void*> p = CudaAllocator(device.index).Allocate(nbytes, ComputeStream(device));
  TY_CHECK(p.ok()) << p.status().message();
  data_ = *p;
}

Storage::Storage(size_t nbytes, Device device, void* stream) : nbytes_(nbytes), device_(device) {
  TY_CHECK(device.is_cuda()) << "a storage on a stream needs a CUDA device, got "
                             << device.ToString();
  Status s = CheckDeviceAvailable(device);
  TY_CHECK(s.ok()) << s.message() << " (check the device with CheckDeviceAvailable first)";
  StatusOr<void*> p = CudaAllocator(device.index).Allocate(nbytes, stream);
  TY_CHECK(p.ok()) << p.status().message();
  data_ = *p;
}

Storage::~Storage() {
  if (device_.is_cpu()) {
    CpuAllocator::Get().Free(data_, nbytes_);
  } else {
    CudaAllocator(device_.index).Free(data_);
  }
}

MemoryStats DeviceMemoryStats(Device device) {
  if (device.is_cpu()) {
    const AllocatorStats s = CpuAllocator::Get().Stats();
    return {s.allocated_bytes, s.reserved_bytes, s.peak_allocated_bytes};
  }
  const DeviceAllocatorStats s = CudaAllocator(device.index).Stats();
  return {s.allocated_bytes, s.reserved_bytes, s.peak_allocated_bytes};
}

void ResetMemoryPeak(Device device) {
  if (device.is_cpu()) {
    CpuAllocator::Get().ResetPeak();
  } else {
    CudaAllocator(device.index).ResetPeak();
  }
}

}  // namespace trainyard
