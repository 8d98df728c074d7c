#include "worker/tensor/cuda_backend.h"

#include <filesystem>
#include <memory>
#include <mutex>
#include <new>
#include <system_error>
#include <vector>

#include "common/shared_library.h"
#include "worker/tensor/device_kernels.h"

namespace trainyard {
namespace {

// DeviceRuntime for one device of the backend.
class BackendRuntime final : public DeviceRuntime {
 public:
  BackendRuntime(cuda::Backend* b, int device) : b_(b), device_(device) {}
  Status Malloc(size_t nbytes, void** out) override { return b_->Malloc(device_, nbytes, out); }
  void Free(void* ptr) override { b_->Free(device_, ptr); }
  Event CreateEvent() override { return b_->CreateEvent(device_); }
  void DestroyEvent(Event e) override { b_->DestroyEvent(e); }
  void RecordEvent(Event e, Stream s) override { b_->RecordEvent(e, s); }
  bool EventQuery(Event e) override { return b_->EventQuery(e); }
  void EventSynchronize(Event e) override { b_->EventSynchronize(e); }

 private:
  cuda::Backend* const b_;
  const int device_;
};

struct State {
  std::mutex mu;
  bool tried = false;
  StatusOr<cuda::Backend*> loaded = UnknownError("not loaded");
  cuda::Backend* testing = nullptr;
  // Per device, created on first use; never destroyed (tensors may outlive static destruction).
  std::vector<std::unique_ptr<BackendRuntime>> runtimes;
  std::vector<DeviceCachingAllocator*> allocators;
  std::vector<cuda::IndexFault*> faults;  // page-locked, from the backend's HostMalloc
};

State& GetState() {
  static State* s = new State();
  return *s;
}

// The backend's memory releaser: the device's cached tensor blocks go back to the device.
void EmptyCachedBlocks(int device) {
  State& s = GetState();
  DeviceCachingAllocator* a = nullptr;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (device >= 0 && device < static_cast<int>(s.allocators.size())) a = s.allocators[device];
  }
  if (a != nullptr) a->EmptyCache();
}

StatusOr<cuda::Backend*> LoadLibrary() {
  const LibrarySpec spec{cuda::kCudaLibraryName,
                         cuda::kCudaLibraryEnv,
                         cuda::kCudaEntryPoint,
                         "the CUDA backend",
                         "built when the CUDA toolkit is found (TY_WITH_CUDA)",
                         "use device \"cpu\""};
  ASSIGN_OR_RETURN(void* symbol, FindLibrarySymbol(spec));
  std::string error;
  cuda::Backend* b = reinterpret_cast<cuda::CudaEntryFn>(symbol)(cuda::kCudaAbiVersion,
                                                                 sizeof(cuda::Backend), &error);
  if (b == nullptr) return FailedPreconditionError("the CUDA backend: " + error);
  return b;
}

}  // namespace

bool NvidiaDriverPresent() {
  std::error_code ec;
  return std::filesystem::exists("/proc/driver/nvidia/gpus", ec) ||
         std::filesystem::exists("/dev/nvidia0", ec);
}

StatusOr<cuda::Backend*> LoadCudaBackend() {
  State& s = GetState();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.testing != nullptr) return s.testing;
  if (!s.tried) {
    s.loaded = LoadLibrary();
    s.tried = true;
  }
  return s.loaded;
}

cuda::Backend& CudaBackend() {
  StatusOr<cuda::Backend*> b = LoadCudaBackend();
  TY_CHECK(b.ok()) << b.status().message();
  return **b;
}

DeviceCachingAllocator& CudaAllocator(int device) {
  cuda::Backend& b = CudaBackend();
  State& s = GetState();
  std::lock_guard<std::mutex> lock(s.mu);
  TY_CHECK(device >= 0 && device < 1024) << "cuda:" << device << " is not a device";
  if (static_cast<int>(s.allocators.size()) <= device) {
    s.allocators.resize(device + 1, nullptr);
    s.runtimes.resize(device + 1);
  }
  if (s.allocators[device] == nullptr) {
    // Here, not at load: libtrainyard_nccl.so loads the backend through its own hidden copy of
    // this file, whose releaser would find no allocators (Note [Engine code in the library]).
    b.SetMemoryReleaser(&EmptyCachedBlocks);
    s.runtimes[device] = std::make_unique<BackendRuntime>(&b, device);
    s.allocators[device] =
        new DeviceCachingAllocator(s.runtimes[device].get(), "cuda:" + std::to_string(device));
  }
  return *s.allocators[device];
}

cuda::Stream ComputeStream(Device device) {
  TY_CHECK(device.is_cuda()) << "ComputeStream of " << device.ToString();
  cuda::Backend& b = CudaBackend();
  // The library picks its cuBLASLt and cuDNN handles, workspaces and scratch by the thread's
  // current device, so an op on `device` makes it current (asked every time rather than
  // remembered here: other code may switch the thread's device).
  const Status s = b.SetDevice(device.index);
  TY_CHECK(s.ok()) << s.message();
  return b.ComputeStream(device.index);
}

void SynchronizeDevice(Device device) {
  if (!device.is_cuda()) return;
  CudaBackend().StreamSynchronize(ComputeStream(device));
  cuda::IndexFault* record = nullptr;
  {
    State& s = GetState();
    std::lock_guard<std::mutex> lock(s.mu);
    if (device.index < static_cast<int>(s.faults.size())) record = s.faults[device.index];
  }
  // The device wrote the record; the wait above ordered those writes before these reads.
  if (record == nullptr || record->check.op == nullptr) return;
  const cuda::IndexFault fault = *record;
  *record = cuda::IndexFault{};
  TY_CHECK(false) << device::IndexCheckMessage(fault.check, fault.value) << " (on "
                  << device.ToString()
                  << ": found by a check the host did not wait for, reported at the next wait)";
}

cuda::IndexFault* IndexFaultRecord(Device device) {
  TY_CHECK(device.is_cuda()) << "IndexFaultRecord of " << device.ToString();
  cuda::Backend& b = CudaBackend();
  State& s = GetState();
  std::lock_guard<std::mutex> lock(s.mu);
  if (static_cast<int>(s.faults.size()) <= device.index) s.faults.resize(device.index + 1);
  cuda::IndexFault*& record = s.faults[device.index];
  if (record == nullptr) {
    void* p = nullptr;
    const Status st = b.HostMalloc(sizeof(cuda::IndexFault), &p);
    TY_CHECK(st.ok()) << "index checks on " << device.ToString() << ": " << st.message();
    record = new (p) cuda::IndexFault();
  }
  return record;
}

cuda::ScalarType ToScalarType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return cuda::ScalarType::kF32;
    case DType::kFloat64:
      return cuda::ScalarType::kF64;
    case DType::kBFloat16:
      return cuda::ScalarType::kBF16;
    case DType::kFloat16:
      return cuda::ScalarType::kF16;
    case DType::kInt64:
      return cuda::ScalarType::kI64;
    case DType::kInt32:
      return cuda::ScalarType::kI32;
    case DType::kUInt8:
      return cuda::ScalarType::kU8;
    case DType::kBool:
      return cuda::ScalarType::kBool;
  }
  TY_CHECK(false) << "unknown dtype " << static_cast<int>(dtype);
  return cuda::ScalarType::kF32;
}

StreamTimer::~StreamTimer() {
  for (cuda::Event e : events_) CudaBackend().DestroyEvent(e);
}

int StreamTimer::Mark() {
  if (device_.is_cuda()) {
    if (marks_ == static_cast<int>(events_.size())) {
      events_.push_back(CudaBackend().CreateTimingEvent(device_.index));
    }
    CudaBackend().RecordEvent(events_[marks_], ComputeStream(device_));
  } else {
    if (marks_ == static_cast<int>(times_.size())) times_.emplace_back();
    times_[marks_] = std::chrono::steady_clock::now();
  }
  return marks_++;
}

double StreamTimer::Seconds(int from, int to) const {
  TY_CHECK(from >= 0 && from <= to && to < marks_)
      << "StreamTimer: marks " << from << " to " << to << " of " << marks_;
  if (device_.is_cuda()) return CudaBackend().EventSeconds(events_[from], events_[to]);
  return std::chrono::duration<double>(times_[to] - times_[from]).count();
}

void SetCudaBackendForTesting(cuda::Backend* backend) {
  State& s = GetState();
  std::lock_guard<std::mutex> lock(s.mu);
  s.testing = backend;
  // Allocators hold the old backend's memory: forget them (tests free their tensors first).
  for (DeviceCachingAllocator* a : s.allocators) delete a;
  s.allocators.clear();
  s.runtimes.clear();
  // So are the fault records (kept, not freed: the old backend may be gone).
  s.faults.clear();
}

}  // namespace trainyard
