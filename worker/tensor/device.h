// Where a tensor lives: "cpu" or "cuda:N". CUDA tensors need the CUDA backend
// (libtrainyard_cuda.so, loaded at run time); asking for one where it is not available is a
// FailedPrecondition status, never a crash.
#pragma once

#include <string>

#include "common/status.h"

namespace trainyard {

enum class DeviceType : uint8_t { kCpu, kCuda };

struct Device {
  DeviceType type = DeviceType::kCpu;
  int index = 0;

  static Device Cpu() { return Device{}; }
  static Device Cuda(int index) { return Device{DeviceType::kCuda, index}; }
  // Parses "cpu", "cuda" (index 0) or "cuda:N".
  static StatusOr<Device> Parse(const std::string& text);

  bool is_cpu() const { return type == DeviceType::kCpu; }
  bool is_cuda() const { return type == DeviceType::kCuda; }
  std::string ToString() const;
  friend bool operator==(Device a, Device b) { return a.type == b.type && a.index == b.index; }
  friend bool operator!=(Device a, Device b) { return !(a == b); }
};

// OK when tensors can be created on `device` in this process.
Status CheckDeviceAvailable(Device device);

}  // namespace trainyard
