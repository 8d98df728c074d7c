#include "worker/data/device_copier.h"

#include <cstring>

#include "worker/tensor/cuda_backend.h"

namespace trainyard::data {
namespace {

constexpr size_t kAlign = 256;

size_t Aligned(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

size_t BytesOf(const Tensor& t) {
  return t.defined() ? static_cast<size_t>(t.numel()) * ElementSize(t.dtype()) : 0;
}

}  // namespace

DeviceCopier::DeviceCopier(Device device) : device_(device) {
  TY_CHECK(device.is_cuda()) << "DeviceCopier needs a CUDA device, got " << device.ToString();
  copy_stream_ = CudaBackend().CreateStream(device.index);
  for (Slot& s : slots_) s.done = CudaBackend().CreateEvent(device.index);
}

DeviceCopier::~DeviceCopier() {
  cuda::Backend& b = CudaBackend();
  for (Slot& s : slots_) {
    if (s.used) b.EventSynchronize(s.done);
    b.DestroyEvent(s.done);
    if (s.host != nullptr) b.HostFree(s.host);
  }
}

Batch DeviceCopier::ToDevice(const Batch& batch) {
  cuda::Backend& b = CudaBackend();
  Slot& slot = slots_[next_];
  next_ = 1 - next_;
  if (slot.used) b.EventSynchronize(slot.done);  // the copy two batches ago
  const size_t need = Aligned(BytesOf(batch.input)) + Aligned(BytesOf(batch.target));
  if (need > slot.capacity) {
    if (slot.host != nullptr) b.HostFree(slot.host);
    slot.host = nullptr;
    const size_t capacity = need + need / 4;  // room for a slightly larger batch
    Status s = b.HostMalloc(capacity, &slot.host);
    TY_CHECK(s.ok()) << s.message();
    slot.capacity = capacity;
  }
  Batch out;
  out.input = Copy(batch.input, slot, 0);
  out.target = Copy(batch.target, slot, Aligned(BytesOf(batch.input)));
  b.RecordEvent(slot.done, copy_stream_);
  slot.used = true;
  // Ops read the batch on the compute stream: order them after the copy.
  b.StreamWaitEvent(ComputeStream(device_), slot.done);
  for (const Tensor& t : {out.input, out.target}) {
    if (t.defined())
      CudaAllocator(device_.index).RecordStream(t.raw_data(), ComputeStream(device_));
  }
  return out;
}

Tensor DeviceCopier::Copy(const Tensor& t, Slot& slot, size_t offset) {
  if (!t.defined()) return t;
  const Tensor c = ContiguousData(t);
  const size_t n = BytesOf(c);
  char* staging = static_cast<char*>(slot.host) + offset;
  if (n > 0) std::memcpy(staging, c.raw_data(), n);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(n, device_, copy_stream_);
  impl->sizes = c.shape();
  impl->strides = ContiguousStrides(c.shape());
  impl->dtype = c.dtype();
  Tensor out(std::move(impl));
  CudaBackend().Memcpy(out.raw_data(), staging, n, copy_stream_);
  return out;
}

}  // namespace trainyard::data
