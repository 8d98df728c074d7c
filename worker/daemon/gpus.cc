#include "worker/daemon/gpus.h"

#include <sstream>

#include "worker/tensor/cuda_backend.h"

namespace trainyard::daemon {

StatusOr<std::vector<v1::Gpu>> DiscoverGpus(const std::string& mode) {
  int wanted = -1;  // every visible GPU
  if (mode == "none") return std::vector<v1::Gpu>{};
  if (mode != "auto") {
    const bool digits = !mode.empty() && mode.size() <= 3 &&
                        mode.find_first_not_of("0123456789") == std::string::npos;
    if (!digits) {
      return InvalidArgumentError("--gpus is \"" + mode +
                                  "\"; use \"auto\", \"none\" or a count of GPUs");
    }
    wanted = std::stoi(mode);
    if (wanted == 0) return std::vector<v1::Gpu>{};
  }
  if (!NvidiaDriverPresent()) {
    if (wanted < 0) return std::vector<v1::Gpu>{};
    return FailedPreconditionError("--gpus " + mode + ": this node has no NVIDIA driver");
  }
  StatusOr<cuda::Backend*> backend = LoadCudaBackend();
  if (!backend.ok()) {
    if (wanted < 0) return std::vector<v1::Gpu>{};
    return Status(backend.status().code(), "--gpus " + mode + ": " + backend.status().message());
  }
  const int count = (*backend)->DeviceCount();
  if (wanted > count) {
    return FailedPreconditionError("--gpus " + mode + ": only " + std::to_string(count) +
                                   " GPU(s) are visible");
  }
  std::vector<v1::Gpu> gpus;
  for (int i = 0; i < (wanted < 0 ? count : wanted); ++i) {
    cuda::DeviceProperties p;
    RETURN_IF_ERROR((*backend)->Properties(i, &p));
    v1::Gpu g;
    g.set_index(i);
    g.set_name(p.name);
    g.set_memory_bytes(p.total_memory);
    gpus.push_back(g);
  }
  return gpus;
}

std::string VisibleDeviceFor(int slot, const char* inherited) {
  if (inherited == nullptr || *inherited == '\0') return std::to_string(slot);
  std::stringstream in(inherited);
  std::string item;
  for (int i = 0; std::getline(in, item, ','); ++i) {
    if (i == slot) return item;
  }
  return std::to_string(slot);  // fewer entries than slots: the coordinator's view wins
}

}  // namespace trainyard::daemon
