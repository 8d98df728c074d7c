// The GPUs a worker offers as slots, and which one a rank uses.
//
// Discovery loads the CUDA backend (libtrainyard_cuda.so) only where an NVIDIA driver is
// present (/proc/driver/nvidia/gpus or /dev/nvidia0), so CPU nodes never pay for loading CUDA.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "trainyard/v1/service.pb.h"

namespace trainyard::daemon {

// `mode`: "auto" (every visible GPU; none without a driver or the backend), "none", or a count
// N (the first N; FailedPrecondition when fewer are visible). InvalidArgument for other text.
StatusOr<std::vector<v1::Gpu>> DiscoverGpus(const std::string& mode);

// The CUDA_VISIBLE_DEVICES value that shows a rank only GPU slot `slot` of this worker: the
// slot-th entry of the worker's own CUDA_VISIBLE_DEVICES when it has one (`inherited`), else
// the slot number itself.
std::string VisibleDeviceFor(int slot, const char* inherited);

}  // namespace trainyard::daemon
