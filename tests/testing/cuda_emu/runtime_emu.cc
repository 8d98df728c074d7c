// The CUDA runtime API over host memory and host threads, for the library's runtime.cc, the
// emulated kernel files (emu.h) and the host NCCL (nccl_emu.cc): ty_emu::kDevices devices
// (runtime_emu.h); memory is host memory allocated to the byte (so valgrind sees a read past a
// buffer's end); streams made by cudaStreamCreate* run their work on host threads, and events
// order and time it. A wait that models the host blocking on the device (cudaStreamSynchronize,
// cudaEventSynchronize) aborts after kHostWait, naming the call, rather than hang a test.
#include "tests/testing/cuda_emu/runtime_emu.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

using Clock = std::chrono::steady_clock;

struct CUstream_st {
  int device = 0;
  std::mutex mu;
  std::condition_variable cv;  // work queued, an item done, or the stream destroyed
  std::deque<std::function<void()>> work;
  bool running = false;  // the thread is running an item
  bool destroyed = false;
};

namespace {

constexpr auto kHostWait = std::chrono::seconds(120);
constexpr size_t kMemory = size_t{16} << 30;  // what each device says it has

thread_local int t_device = 0;  // the thread's current device

struct EventState {
  bool timing = true;
  uint64_t recorded = 0;  // records issued
  uint64_t done = 0;      // of those, the last one its stream reached
  Clock::time_point at;   // when it did
};

// Events' state, under one lock (never destroyed: stream threads may outlive main).
std::mutex& EventMu() {
  static auto* mu = new std::mutex;
  return *mu;
}
std::condition_variable& EventCv() {
  static auto* cv = new std::condition_variable;
  return *cv;
}

std::mutex& StreamsMu() {
  static auto* mu = new std::mutex;
  return *mu;
}
std::set<CUstream_st*>& Streams() {
  static auto* streams = new std::set<CUstream_st*>;
  return *streams;
}

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "cuda emulation: %s\n", what);
  std::fflush(stderr);
  std::abort();
}

// The stream behind a handle this runtime made, or null for a synchronous handle.
CUstream_st* Find(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(StreamsMu());
  return Streams().count(stream) != 0 ? stream : nullptr;
}

void RunStream(CUstream_st* s) {
  std::unique_lock<std::mutex> lock(s->mu);
  while (true) {
    s->cv.wait(lock, [s] { return !s->work.empty() || s->destroyed; });
    if (s->work.empty()) break;  // destroyed, and its work done
    std::function<void()> item = std::move(s->work.front());
    s->work.pop_front();
    s->running = true;
    lock.unlock();
    item();
    lock.lock();
    s->running = false;
    s->cv.notify_all();
  }
  lock.unlock();
  delete s;
}

bool Idle(CUstream_st* s) { return s->work.empty() && !s->running; }

std::shared_ptr<EventState> StateOf(cudaEvent_t event) {
  return *reinterpret_cast<std::shared_ptr<EventState>*>(event);
}

// What cudaMalloc* and cudaHostAlloc handed out (address -> bytes), so copies can tell device
// and page-locked memory from pageable host memory (which CUDA copies synchronously).
std::mutex& BlocksMu() {
  static auto* mu = new std::mutex;
  return *mu;
}
std::map<uintptr_t, size_t>& Blocks() {
  static auto* blocks = new std::map<uintptr_t, size_t>;
  return *blocks;
}

void* Allocate(size_t bytes) {
  bytes = std::max<size_t>(bytes, 1);
  void* p = nullptr;
  if (posix_memalign(&p, 256, bytes) != 0) return nullptr;
  std::lock_guard<std::mutex> lock(BlocksMu());
  Blocks()[reinterpret_cast<uintptr_t>(p)] = bytes;
  return p;
}

void Release(void* p) {
  {
    std::lock_guard<std::mutex> lock(BlocksMu());
    Blocks().erase(reinterpret_cast<uintptr_t>(p));
  }
  std::free(p);
}

bool Pageable(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(BlocksMu());
  auto it = Blocks().upper_bound(a);
  if (it == Blocks().begin()) return true;
  --it;
  return a >= it->first + it->second;
}

}  // namespace

namespace ty_emu {

void OnStream(cudaStream_t stream, std::function<void()> work) {
  CUstream_st* s = Find(stream);
  if (s == nullptr) return work();
  std::lock_guard<std::mutex> lock(s->mu);
  s->work.push_back(std::move(work));
  s->cv.notify_all();
}

}  // namespace ty_emu

// ---- Errors and devices ----

cudaError_t cudaGetLastError() { return cudaSuccess; }
const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorNotReady:
      return "device not ready";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    default:
      return "emulated error";
  }
}
cudaError_t cudaGetDeviceCount(int* count) {
  *count = ty_emu::kDevices;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = t_device;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= ty_emu::kDevices) return cudaErrorInvalidDevice;
  t_device = device;
  return cudaSuccess;
}
// Waits for the current device's streams.
cudaError_t cudaDeviceSynchronize() {
  std::set<CUstream_st*> streams;
  {
    std::lock_guard<std::mutex> lock(StreamsMu());
    for (CUstream_st* s : Streams()) {
      if (s->device == t_device) streams.insert(s);
    }
  }
  for (CUstream_st* s : streams) cudaStreamSynchronize(s);
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device < 0 || device >= ty_emu::kDevices) return cudaErrorInvalidDevice;
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof(prop->name), "CUDA emulated on the host (sm_90)");
  prop->major = 9;
  prop->minor = 0;
  prop->totalGlobalMem = kMemory;
  prop->multiProcessorCount = 132;
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  *free_bytes = *total = kMemory;
  return cudaSuccess;
}

// ---- Memory ----

// Memory pools: allocations come from the host heap, so there is nothing to keep or trim.
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  if (device < 0 || device >= ty_emu::kDevices) return cudaErrorInvalidDevice;
  *pool = nullptr;
  return cudaSuccess;
}
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t, cudaMemPoolAttr, void*) { return cudaSuccess; }
cudaError_t cudaMemPoolTrimTo(cudaMemPool_t, size_t) { return cudaSuccess; }

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  *ptr = Allocate(bytes);
  return *ptr != nullptr ? cudaSuccess : cudaErrorMemoryAllocation;
}
// The memory exists at once; work queued on the stream before it may not use it, as on a device.
cudaError_t cudaMallocAsync(void** ptr, size_t bytes, cudaStream_t) {
  return cudaMalloc(ptr, bytes);
}
// As CUDA's, it waits for the current device's work (which may still use the memory).
cudaError_t cudaFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  cudaDeviceSynchronize();
  Release(ptr);
  return cudaSuccess;
}
cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned int) {
  *ptr = Allocate(bytes);
  return *ptr != nullptr ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFreeHost(void* ptr) {
  cudaDeviceSynchronize();
  Release(ptr);
  return cudaSuccess;
}
cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) {
  ty_emu::OnStream(stream, [ptr] { Release(ptr); });
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind) {
  std::memmove(dst, src, count);
  return cudaSuccess;
}
// As CUDA's: from pageable host memory, the source is staged before the call returns; to
// pageable host memory, the call returns once the copy is done; otherwise it is queued.
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind,
                            cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (Pageable(src)) {
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src),
                                                      static_cast<const char*>(src) + count);
    ty_emu::OnStream(stream, [=] { std::memcpy(dst, staged->data(), count); });
    return cudaSuccess;
  }
  ty_emu::OnStream(stream, [=] { std::memmove(dst, src, count); });
  if (Pageable(dst)) return cudaStreamSynchronize(stream);
  return cudaSuccess;
}
cudaError_t cudaMemset(void* ptr, int value, size_t count) {
  std::memset(ptr, value, count);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t count, cudaStream_t stream) {
  ty_emu::OnStream(stream, [=] { std::memset(ptr, value, count); });
  return cudaSuccess;
}

// ---- Streams ----

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int) {
  auto* s = new CUstream_st;
  s->device = t_device;
  std::thread(RunStream, s).detach();  // it deletes s once destroyed and drained
  std::lock_guard<std::mutex> lock(StreamsMu());
  Streams().insert(s);
  *stream = s;
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, 0); }

// As on a device, work already queued still runs; the stream goes once it has.
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  CUstream_st* s = Find(stream);
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  {
    std::lock_guard<std::mutex> lock(StreamsMu());
    Streams().erase(s);
  }
  std::lock_guard<std::mutex> lock(s->mu);
  s->destroyed = true;
  s->cv.notify_all();
  return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t stream) {
  CUstream_st* s = Find(stream);
  if (s == nullptr) return cudaSuccess;
  std::lock_guard<std::mutex> lock(s->mu);
  return Idle(s) ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  CUstream_st* s = Find(stream);
  if (s == nullptr) return cudaSuccess;
  std::unique_lock<std::mutex> lock(s->mu);
  if (!s->cv.wait_for(lock, kHostWait, [s] { return Idle(s); })) {
    Fail("cudaStreamSynchronize: the stream's work did not finish in 120 s");
  }
  return cudaSuccess;
}
// Work queued on `stream` from now on waits for the event's last record to complete.
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  if (event == nullptr) return cudaErrorInvalidResourceHandle;
  std::shared_ptr<EventState> st = StateOf(event);
  uint64_t gen;
  {
    std::lock_guard<std::mutex> lock(EventMu());
    gen = st->recorded;
  }
  const bool host = Find(stream) == nullptr;
  ty_emu::OnStream(stream, [st, gen, host] {
    std::unique_lock<std::mutex> lock(EventMu());
    auto reached = [&] { return st->done >= gen; };
    if (!host) return EventCv().wait(lock, reached);  // a device waits as long as it takes
    if (!EventCv().wait_for(lock, kHostWait, reached)) {
      Fail("cudaStreamWaitEvent on a synchronous stream: the event did not complete in 120 s");
    }
  });
  return cudaSuccess;
}

// ---- Events ----

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  auto* st = new std::shared_ptr<EventState>(std::make_shared<EventState>());
  (*st)->timing = (flags & cudaEventDisableTiming) == 0;
  *event = reinterpret_cast<cudaEvent_t>(st);
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, 0); }
// Work already queued that waits for it, or records it, still sees it (it holds the state).
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (event == nullptr) return cudaErrorInvalidResourceHandle;
  delete reinterpret_cast<std::shared_ptr<EventState>*>(event);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (event == nullptr) return cudaErrorInvalidResourceHandle;
  std::shared_ptr<EventState> st = StateOf(event);
  uint64_t gen;
  {
    std::lock_guard<std::mutex> lock(EventMu());
    gen = ++st->recorded;
  }
  ty_emu::OnStream(stream, [st, gen] {
    std::lock_guard<std::mutex> lock(EventMu());
    st->done = std::max(st->done, gen);
    st->at = Clock::now();
    EventCv().notify_all();
  });
  return cudaSuccess;
}
// An event never recorded is complete, as on a device.
cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (event == nullptr) return cudaErrorInvalidResourceHandle;
  std::shared_ptr<EventState> st = StateOf(event);
  std::lock_guard<std::mutex> lock(EventMu());
  return st->done >= st->recorded ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (event == nullptr) return cudaErrorInvalidResourceHandle;
  std::shared_ptr<EventState> st = StateOf(event);
  std::unique_lock<std::mutex> lock(EventMu());
  if (!EventCv().wait_for(lock, kHostWait, [&] { return st->done >= st->recorded; })) {
    Fail("cudaEventSynchronize: the event did not complete in 120 s");
  }
  return cudaSuccess;
}
// Both events recorded with timing and complete, as a device requires.
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (start == nullptr || end == nullptr) return cudaErrorInvalidResourceHandle;
  std::shared_ptr<EventState> a = StateOf(start), b = StateOf(end);
  std::lock_guard<std::mutex> lock(EventMu());
  if (!a->timing || !b->timing || a->recorded == 0 || b->recorded == 0) {
    return cudaErrorInvalidResourceHandle;
  }
  if (a->done < a->recorded || b->done < b->recorded) return cudaErrorNotReady;
  *ms = std::chrono::duration<float, std::milli>(b->at - a->at).count();
  return cudaSuccess;
}
