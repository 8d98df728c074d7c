#include "worker/tensor/storage.h"

#include "worker/tensor/allocator.h"

namespace trainyard {

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  Status s = CheckDeviceAvailable(device);
  TY_CHECK(s.ok()) << s.message() << " (check the device with CheckDeviceAvailable first)";
  data_ = CpuAllocator::Get().Allocate(nbytes);
}

Storage::~Storage() { CpuAllocator::Get().Free(data_, nbytes_); }

}  // namespace trainyard
