#include "worker/tensor/device.h"

#include <cstdlib>

#include "worker/tensor/cuda_backend.h"

namespace trainyard {

StatusOr<Device> Device::Parse(const std::string& text) {
  if (text == "cpu") return Device::Cpu();
  if (text == "cuda") return Device::Cuda(0);
  if (text.rfind("cuda:", 0) == 0) {
    std::string idx = text.substr(5);
    bool digits =
        !idx.empty() && idx.size() <= 4 && idx.find_first_not_of("0123456789") == std::string::npos;
    if (digits) return Device::Cuda(std::atoi(idx.c_str()));
  }
  return InvalidArgumentError("device \"" + text +
                              "\" is not valid; use \"cpu\", \"cuda\" or \"cuda:N\"");
}

std::string Device::ToString() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

Status CheckDeviceAvailable(Device device) {
  if (device.is_cpu()) return OkStatus();
  StatusOr<kernels::cuda::Backend*> backend = LoadCudaBackend();
  if (!backend.ok()) {
    return Status(backend.status().code(), "device " + device.ToString() +
                                               " is not available: " + backend.status().message());
  }
  const int count = (*backend)->DeviceCount();
  if (device.index >= count) {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    return FailedPreconditionError(
        "device " + device.ToString() + " is not available: " +
        (count == 0 ? std::string("no CUDA device is visible")
                    : std::to_string(count) + " CUDA device(s) are visible") +
        (visible != nullptr ? std::string(" (CUDA_VISIBLE_DEVICES=") + visible + ")" : "") +
        "; use device \"cpu\" or run on a GPU worker");
  }
  return OkStatus();
}

}  // namespace trainyard
