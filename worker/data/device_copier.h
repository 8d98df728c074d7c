// DeviceCopier: moves a DataLoader's batches to a CUDA device without stalling the host.
//
// Per batch: the CPU tensors are packed into a page-locked host buffer, copied to the device
// on a copy stream (asynchronous, so the transfer overlaps kernels of the step before still
// queued on the compute stream), and the compute stream waits for the copy through an event
// before anything reads the batch. The loader's worker threads already gather batches ahead of
// use; this adds the transfer, leaving the loader's position() exact for checkpoints.
//
// Buffers: two page-locked slots, used in turn; a slot is reused only after its copy is done.
// The device tensors are allocated for the copy stream and marked as used by the compute stream
// (RecordStream), so their memory is not handed out again before the step reading them is over.
// Thread safety: one thread (the trainer's).
#pragma once

#include <cstddef>

#include "common/status.h"
#include "worker/data/dataset.h"
#include "worker/tensor/device.h"

namespace trainyard::data {

class DeviceCopier {
 public:
  // `device` must be an available CUDA device (CheckDeviceAvailable).
  explicit DeviceCopier(Device device);
  ~DeviceCopier();  // waits for copies in flight
  DeviceCopier(const DeviceCopier&) = delete;
  DeviceCopier& operator=(const DeviceCopier&) = delete;

  // The batch on the device; its tensors may be read by ops on the compute stream at once.
  Batch ToDevice(const Batch& batch);

 private:
  struct Slot {
    void* host = nullptr;  // page-locked
    size_t capacity = 0;
    void* done = nullptr;  // event: the slot's last copy finished
    bool used = false;
  };
  Tensor Copy(const Tensor& t, Slot& slot, size_t offset);

  const Device device_;
  void* copy_stream_ = nullptr;
  Slot slots_[2];
  int next_ = 0;
};

}  // namespace trainyard::data
