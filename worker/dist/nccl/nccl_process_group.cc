// NcclProcessGroup (nccl_process_group.h) and the library's C entry point (nccl_loader.h).
//
// Note [NCCL streams and completion]
// One thread per group owns the communicator: it takes queued ops in sequence order, issues
// each NCCL call on the group's own stream, records a cudaEvent after it and moves it to the
// in-flight list. Between launches it polls the oldest op's event (cudaEventQuery, every
// kOpPoll while ops are in flight) and ncclCommGetAsyncError; a done event finishes the Work,
// so a successful Work::Wait means the GPU has finished the op. Why a thread and not the
// caller: the communicator is non-blocking (so start-up and hangs can be bounded), which lets
// any NCCL call return ncclInProgress that must be polled before the next call, and NCCL
// communicators are not thread-safe; one owner keeps both simple and callers never block.
// An op's timeout counts from when it becomes the oldest in flight, so ops queued behind a
// slow one are not charged for its time.
// The stream is non-blocking: it does not wait for the legacy default stream. Instead each op
// records an event on the engine's compute stream of the group's device when it is queued
// (the caller's thread, right after the kernels that produced its inputs were issued), and
// the group's stream waits for that event before the NCCL call: the all-reduce of a bucket
// starts on the GPU as soon as its gradients exist, while backward goes on on the compute
// stream. Without the CUDA backend loaded (tests that hand in raw device memory) there is no
// compute stream, and inputs must be ready when the op is issued.
//
// Note [Engine code in the library]
// The library links the engine's static libraries (Work, Status, Tensor) with their symbols
// hidden (-Wl,--exclude-libs,ALL), so its copies never interpose on the host's. Tensors reach
// it only through shared_ptrs, whose deleters run the host's code, so the copies' own
// singletons (the CPU allocator) are never used.
#include "worker/dist/nccl/nccl_process_group.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "worker/dist/nccl_loader.h"
#include "worker/tensor/cuda_backend.h"

namespace trainyard::dist {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr auto kOpPoll = std::chrono::microseconds(50);
constexpr auto kSetupPoll = milliseconds(1);
constexpr char kUniqueIdKey[] = "nccl/unique_id";

std::string RankName(int rank) { return "rank " + std::to_string(rank); }

bool NcclType(DType dtype, ncclDataType_t* out) {
  switch (dtype) {
    case DType::kFloat32:
      return *out = ncclFloat32, true;
    case DType::kFloat64:
      return *out = ncclFloat64, true;
    case DType::kBFloat16:
      return *out = ncclBfloat16, true;
    case DType::kFloat16:
      return *out = ncclFloat16, true;
    case DType::kInt64:
      return *out = ncclInt64, true;
    default:
      return false;
  }
}

// Average is NCCL's ncclAvg (integers: sum, then divided and truncated).
ncclRedOp_t NcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAverage:
      return ncclAvg;
    case ReduceOp::kMax:
      return ncclMax;
  }
  return ncclSum;
}

std::string Describe(const DeviceBuffer& b) {
  return std::to_string(b.numel) + " " + DTypeName(b.dtype);
}

int64_t Bytes(const DeviceBuffer& b) {
  return b.numel * static_cast<int64_t>(ElementSize(b.dtype));
}

// What `b` moves per rank, for the flight recorder.
CollectiveSize SizeOf(const DeviceBuffer& b) { return {b.numel, DTypeName(b.dtype), Bytes(b)}; }

// "unhandled system error (run with NCCL_DEBUG=INFO for details): <NCCL's last message>".
std::string NcclText(ncclResult_t r, ncclComm_t comm) {
  std::string text = ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') text += std::string(": ") + last;
  return text;
}

Status NcclStatus(const std::string& what, ncclResult_t r, ncclComm_t comm) {
  const std::string msg = what + ": nccl: " + NcclText(r, comm);
  switch (r) {
    case ncclSystemError:
    case ncclRemoteError:
    case ncclUnhandledCudaError:
      return UnavailableError(msg);
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return InvalidArgumentError(msg +
                                  "; do all ranks issue the same collectives with the same "
                                  "sizes?");
    default:
      return InternalError(msg);
  }
}

// Polls a non-blocking communicator until its last call is done: ncclSuccess, an error, or
// ncclInProgress when `deadline` passed first.
ncclResult_t AwaitComm(ncclComm_t comm, Clock::time_point deadline, Clock::duration poll) {
  while (true) {
    ncclResult_t state = ncclInProgress;
    const ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess) return r;
    if (state != ncclInProgress || Clock::now() >= deadline) return state;
    std::this_thread::sleep_for(poll);
  }
}

Status CheckTensor(const char* what, const Tensor& t, int device) {
  const std::string w(what);
  if (!t.defined()) return InvalidArgumentError(w + ": the tensor is undefined");
  if (!t.device().is_cuda()) {
    return InvalidArgumentError(w + ": the nccl backend takes CUDA tensors and this one is on " +
                                t.device().ToString() + "; use the gloo backend for CPU tensors");
  }
  if (t.device().index != device) {
    return InvalidArgumentError(w + ": the tensor is on " + t.device().ToString() +
                                " but this group's device is cuda:" + std::to_string(device));
  }
  if (!t.is_contiguous()) {
    return InvalidArgumentError(w + ": the tensor is not contiguous; pass a contiguous copy");
  }
  return OkStatus();
}

Status CheckBuffer(const char* what, const DeviceBuffer& b) {
  if (b.numel < 0 || (b.numel > 0 && b.data == nullptr)) {
    return InvalidArgumentError(std::string(what) + ": the buffer (" + Describe(b) +
                                ") has no data or a negative size");
  }
  return OkStatus();
}

Status CheckReducible(const char* what, DType dtype) {
  ncclDataType_t unused;
  if (NcclType(dtype, &unused)) return OkStatus();
  return InvalidArgumentError(std::string(what) + ": dtype " + DTypeName(dtype) +
                              " is not supported; use float32, float64, bfloat16, float16 or "
                              "int64");
}

DeviceBuffer BufferOf(const Tensor& t) {
  return DeviceBuffer{t.raw_data(), t.numel(), t.dtype(), t.impl_ptr()};
}

// Options -> NCCL's environment (nccl_process_group.h says why they override).
void ApplyNcclEnv(const ProcessGroupOptions& options) {
  if (!options.nccl_algo.empty()) ::setenv("NCCL_ALGO", options.nccl_algo.c_str(), 1);
  if (!options.nccl_ib_hca.empty()) ::setenv("NCCL_IB_HCA", options.nccl_ib_hca.c_str(), 1);
  if (options.nccl_ib_disable) ::setenv("NCCL_IB_DISABLE", "1", 1);
}

StatusOr<int> PickDevice(int rank) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    const std::string why = e != cudaSuccess ? cudaGetErrorString(e) : "it reports 0 devices";
    if (e != cudaSuccess) cudaGetLastError();  // clear it: it is not sticky
    return FailedPreconditionError("nccl: no CUDA device is visible to " + RankName(rank) +
                                   " (cudaGetDeviceCount: " + why +
                                   "); the nccl backend needs one GPU per rank; use \"gloo\" on "
                                   "machines without GPUs");
  }
  return rank % count;
}

// Rank 0 makes NCCL's unique id and publishes it; the others read it.
StatusOr<std::string> ExchangeId(Store& store, int rank, milliseconds timeout) {
  if (rank == 0) {
    ncclUniqueId id;
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) return NcclStatus("nccl: rank 0 making the unique id", r, nullptr);
    std::string bytes(reinterpret_cast<const char*>(&id), sizeof(id));
    RETURN_IF_ERROR(store.Set(kUniqueIdKey, bytes).WithContext("nccl: rank 0 publishing its id"));
    return bytes;
  }
  StatusOr<std::string> bytes = store.Get(kUniqueIdKey, timeout);
  if (!bytes.ok())
    return bytes.status().WithContext("nccl: " + RankName(rank) + " reading rank 0's id");
  if (bytes->size() != sizeof(ncclUniqueId)) {
    return FailedPreconditionError("nccl: " + std::string(kUniqueIdKey) + " holds " +
                                   std::to_string(bytes->size()) + " bytes, not " +
                                   std::to_string(sizeof(ncclUniqueId)) +
                                   "; is rank 0 running another version of NCCL?");
  }
  return bytes;
}

// A timing event from `pool`, or a new one.
cudaError_t TakeEvent(std::vector<CUevent_st*>* pool, CUevent_st** out) {
  if (pool->empty()) {
    cudaEvent_t ev = nullptr;
    const cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDefault);
    if (e != cudaSuccess) return e;
    pool->push_back(ev);
  }
  *out = pool->back();
  pool->pop_back();
  return cudaSuccess;
}

// Makes `device` current on this thread and restores the caller's device on exit.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&old_) != cudaSuccess) old_ = -1;
    cudaSetDevice(device);
  }
  ~DeviceGuard() {
    if (old_ >= 0) cudaSetDevice(old_);
  }

 private:
  int old_ = -1;
};

}  // namespace

// ---- Creation and destruction ----

StatusOr<std::unique_ptr<NcclProcessGroup>> NcclProcessGroup::Create(
    std::shared_ptr<Store> store, int rank, int size, const ProcessGroupOptions& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return InvalidArgumentError("nccl: rank " + std::to_string(rank) + " of size " +
                                std::to_string(size) + " is out of range");
  }
  if (store == nullptr) return InvalidArgumentError("nccl: the store is null");
  if (options.timeout.count() <= 0) {
    return InvalidArgumentError("nccl: timeout is " + FormatDuration(options.timeout) +
                                "; it must be positive");
  }
  ApplyNcclEnv(options);
  ASSIGN_OR_RETURN(const int device,
                   PickDevice(options.device_rank >= 0 ? options.device_rank : rank));
  RETURN_IF_ERROR(JoinGroup(*store, "nccl", rank, size, options.timeout));
  ASSIGN_OR_RETURN(const std::string id, ExchangeId(*store, rank, options.timeout));
  std::unique_ptr<NcclProcessGroup> group(new NcclProcessGroup(rank, size, options, device));
  RETURN_IF_ERROR(group->Init(id));
  return group;
}

NcclProcessGroup::NcclProcessGroup(int rank, int size, ProcessGroupOptions options, int device)
    : ProcessGroup(rank, size), options_(std::move(options)), device_(device) {}

Status NcclProcessGroup::Init(const std::string& unique_id) {
  // Left current, not restored: the caller is the rank's thread and device_ its GPU (the
  // trainer picks the same), and restoring the default device 0 would create a context there
  // (CUDA 12 makes cudaSetDevice create it), 300-500 MiB on GPU 0 for every rank of a node.
  cudaSetDevice(device_);
  const std::string where = "nccl: " + RankName(rank()) + " on cuda:" + std::to_string(device_);
  cudaError_t e = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = cudaMalloc(reinterpret_cast<void**>(&scratch_), sizeof(int32_t));
  if (e == cudaSuccess) e = cudaMemset(scratch_, 0, sizeof(int32_t));
  if (e != cudaSuccess) {
    return FailedPreconditionError(where + ": " + cudaGetErrorString(e));
  }
  RETURN_IF_ERROR(InitComm(unique_id));
  thread_ = std::thread([this] { Loop(); });
  return OkStatus();
}

Status NcclProcessGroup::InitComm(const std::string& unique_id) {
  ncclUniqueId id;
  std::memcpy(&id, unique_id.data(), sizeof(id));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  const auto deadline = Clock::now() + options_.timeout;
  ncclResult_t r = ncclCommInitRankConfig(&comm, size(), id, rank(), &config);
  if (comm != nullptr && (r == ncclSuccess || r == ncclInProgress)) {
    r = AwaitComm(comm, deadline, kSetupPoll);
  }
  if (r == ncclSuccess) {
    comm_ = comm;
    return OkStatus();
  }
  const std::string what = "nccl: " + RankName(rank()) + " creating the communicator of " +
                           std::to_string(size()) + " ranks on cuda:" + std::to_string(device_);
  Status st =
      r == ncclInProgress
          ? DeadlineExceededError(what + ": not done after " + FormatDuration(options_.timeout) +
                                  "; every rank joined the store, so a rank stopped before "
                                  "creating its communicator or NCCL could not connect the "
                                  "ranks (check NCCL_SOCKET_IFNAME and firewalls; "
                                  "NCCL_DEBUG=INFO says more)")
          : NcclStatus(what, r, comm);
  if (comm != nullptr) ncclCommAbort(comm);
  return st;
}

NcclProcessGroup::~NcclProcessGroup() {
  if (thread_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  DeviceGuard guard(device_);
  if (comm_ != nullptr) CloseComm();
  for (CUevent_st* ev : free_events_) cudaEventDestroy(ev);
  if (stream_ != nullptr && cudaStreamQuery(stream_) == cudaErrorNotReady) {
    // A hung stream may still touch these: leak them rather than free memory in use.
    static_cast<void>(new std::vector<std::shared_ptr<const void>>(std::move(stranded_)));
    return;
  }
  if (scratch_ != nullptr) cudaFree(scratch_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

// Finalize flushes the communicator (bounded by the timeout), else abort.
void NcclProcessGroup::CloseComm() {
  ncclResult_t r = ncclCommFinalize(comm_);
  if (r == ncclSuccess || r == ncclInProgress) {
    r = AwaitComm(comm_, Clock::now() + options_.timeout, kSetupPoll);
  }
  if (r == ncclSuccess) {
    ncclCommDestroy(comm_);
  } else {
    ncclCommAbort(comm_);
  }
  comm_ = nullptr;
}

// ---- The queue and the group's thread ----

std::shared_ptr<Work> NcclProcessGroup::Enqueue(const std::string& what, const std::string& detail,
                                                CollectiveSize size, const Status& error,
                                                Launch launch,
                                                std::vector<std::shared_ptr<const void>> owners) {
  const std::string suffix = detail.empty() ? "" : " (" + detail + ")";
  if (!error.ok()) {
    auto work = std::make_shared<Work>(what + suffix);
    work->Finish(error);
    return work;
  }
  // A failure here still takes its sequence number, and breaks the group when its turn comes
  // (LaunchOp), so that the peers' collectives never pair with this rank's next one.
  StatusOr<CUevent_st*> ready = ReadyEvent();
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t seq = next_seq_++;
  auto work = std::make_shared<Work>(what + " #" + std::to_string(seq) + suffix);
  work->set_bytes(size.bytes);
  NoteIssued(seq, what, std::move(size));
  queued_.push_back(Op{work,
                       std::move(launch),
                       std::move(owners),
                       nullptr,
                       nullptr,
                       {},
                       ready.ok() ? *ready : nullptr,
                       ready.status(),
                       seq});
  cv_.notify_all();
  return work;
}

void NcclProcessGroup::Loop() {
  cudaSetDevice(device_);
  while (true) {
    std::deque<Op> batch;
    Status abort;
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto ready = [this] { return stop_ || !queued_.empty() || !abort_.ok(); };
      if (in_flight_.empty()) {
        cv_.wait(lock, ready);
      } else {
        cv_.wait_for(lock, kOpPoll, ready);
      }
      if (stop_) break;
      batch.swap(queued_);
      abort = abort_;
    }
    if (!abort.ok() && broken_.ok()) Break(nullptr, abort);
    for (Op& op : batch) LaunchOp(std::move(op));
    Poll();
  }
  Drain();
}

// An event recorded now on the compute stream of the group's device, or null without the CUDA
// backend (Note [NCCL streams and completion]). With the backend, the all-reduce could read
// gradients backward is still writing without it, so a failure fails the collective.
StatusOr<CUevent_st*> NcclProcessGroup::ReadyEvent() const {
  StatusOr<kernels::cuda::Backend*> loaded = LoadCudaBackend();
  if (!loaded.ok()) return nullptr;
  kernels::cuda::Backend* backend = *loaded;
  DeviceGuard guard(device_);
  cudaEvent_t ev = nullptr;
  cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (e == cudaSuccess) {
    e = cudaEventRecord(ev, static_cast<cudaStream_t>(backend->ComputeStream(device_)));
    if (e != cudaSuccess) cudaEventDestroy(ev);
  }
  if (e != cudaSuccess) {
    return InternalError("cannot order the collective after the compute stream of cuda:" +
                         std::to_string(device_) + ": " + cudaGetErrorString(e));
  }
  return ev;
}

void NcclProcessGroup::LaunchOp(Op op) {
  cudaError_t waited = cudaSuccess;
  if (op.ready != nullptr) {
    waited = cudaStreamWaitEvent(stream_, op.ready, 0);
    cudaEventDestroy(op.ready);  // the wait is queued; the event may go
    op.ready = nullptr;
  }
  if (!broken_.ok()) {
    flight_recorder().Finished(op.seq, /*ok=*/false);
    op.work->Finish(
        AbortedError(op.work->name() +
                     ": not run: the group is broken by an earlier failure: " + broken_.message()));
    return;
  }
  if (!op.ready_error.ok() || waited != cudaSuccess) {  // not run: its inputs may not be ready
    const Status error =
        InternalError(op.work->name() + ": " +
                      (op.ready_error.ok() ? "cannot wait for the compute stream: " +
                                                 std::string(cudaGetErrorString(waited))
                                           : op.ready_error.message()));
    in_flight_.push_back(std::move(op));
    return Break(&in_flight_.back(), error);
  }
  op.work->MarkStarted();  // the host's issue; FinishOp puts the device's start instead
  NoteStarted(op.seq);
  if (in_flight_.empty()) op.since = Clock::now();
  // Timing events around the call: its device time excludes the waits before it on stream_.
  cudaError_t e = TakeEvent(&free_events_, &op.start);
  if (e == cudaSuccess) e = cudaEventRecord(op.start, stream_);
  auto r = e == cudaSuccess ? static_cast<ncclResult_t>(op.launch(comm_, stream_)) : ncclSuccess;
  if (r == ncclInProgress) r = AwaitComm(comm_, Clock::now() + options_.timeout, kOpPoll);
  if (r == ncclSuccess && e == cudaSuccess) {
    e = TakeEvent(&free_events_, &op.event);
    if (e == cudaSuccess) e = cudaEventRecord(op.event, stream_);
  }
  in_flight_.push_back(std::move(op));
  Op* last = &in_flight_.back();
  if (r == ncclInProgress) {
    Break(last, DeadlineExceededError(last->work->name() + ": not issued after " +
                                      FormatDuration(options_.timeout) +
                                      " (NCCL was still connecting to its peers)"));
  } else if (r != ncclSuccess) {
    Break(last, NcclStatus(last->work->name(), r, comm_));
  } else if (e != cudaSuccess) {
    Break(last, InternalError(last->work->name() + ": cuda: " + cudaGetErrorString(e)));
  }
}

void NcclProcessGroup::Poll() {
  while (!in_flight_.empty()) {
    Op& op = in_flight_.front();
    const cudaError_t e = cudaEventQuery(op.event);
    if (e == cudaErrorNotReady) break;
    if (e != cudaSuccess) {
      return Break(&op, InternalError(op.work->name() + ": cuda: " + cudaGetErrorString(e)));
    }
    FinishOp(op, OkStatus());
    in_flight_.pop_front();
    if (!in_flight_.empty()) in_flight_.front().since = Clock::now();
  }
  if (in_flight_.empty()) return;
  Op& oldest = in_flight_.front();
  ncclResult_t async = ncclSuccess;
  ncclCommGetAsyncError(comm_, &async);
  if (async != ncclSuccess && async != ncclInProgress) {
    return Break(&oldest, NcclStatus(oldest.work->name(), async, comm_));
  }
  if (Clock::now() - oldest.since > options_.timeout) {
    const std::string who = size() == 2 ? " waiting for " + RankName(1 - rank()) : "";
    Break(&oldest, DeadlineExceededError(oldest.work->name() + ": timed out after " +
                                         FormatDuration(options_.timeout) + who +
                                         "; the communicator was aborted (NCCL cannot say "
                                         "which rank was late)"));
  }
}

void NcclProcessGroup::Drain() {
  std::deque<Op> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    left.swap(queued_);
  }
  for (Op& op : left) {
    if (op.ready != nullptr) cudaEventDestroy(op.ready);
    flight_recorder().Finished(op.seq, /*ok=*/false);
    op.work->Finish(CancelledError(op.work->name() +
                                   ": cancelled: the process group was destroyed before it ran"));
  }
  // Each op in flight either completes or times out in Poll, which then fails the rest.
  while (!in_flight_.empty()) {
    Poll();
    if (!in_flight_.empty()) std::this_thread::sleep_for(kOpPoll);
  }
}

void NcclProcessGroup::Abort(const Status& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (abort_.ok()) abort_ = AbortedError("the group was aborted: " + why.message());
  cv_.notify_all();
}

void NcclProcessGroup::Break(Op* failed, Status error) {
  broken_ = error;
  if (comm_ != nullptr) ncclCommAbort(comm_);  // also stops NCCL's kernels on our stream
  comm_ = nullptr;
  // Finish the ops now, so their waiters get this error rather than their own timeout, but
  // keep alive what the stream may still touch until it drains (or forever, if it does not).
  std::vector<std::shared_ptr<const void>> owners;
  for (Op& op : in_flight_) {
    owners.insert(owners.end(), op.owners.begin(), op.owners.end());
    FinishOp(op, &op == failed
                     ? error
                     : AbortedError(op.work->name() +
                                    ": not completed: the group broke: " + error.message()));
  }
  in_flight_.clear();
  const auto deadline = Clock::now() + options_.timeout;
  while (cudaStreamQuery(stream_) == cudaErrorNotReady && Clock::now() < deadline) {
    std::this_thread::sleep_for(kSetupPoll);
  }
  if (cudaStreamQuery(stream_) == cudaErrorNotReady) {
    stranded_.insert(stranded_.end(), owners.begin(), owners.end());
  }
}

void NcclProcessGroup::FinishOp(Op& op, Status status) {
  float ms = 0;
  if (status.ok() && op.start != nullptr && op.event != nullptr &&
      cudaEventElapsedTime(&ms, op.start, op.event) == cudaSuccess) {
    // Its time on the device, not the host's since issuing it, which counts the stream's wait
    // for backward and for earlier ops (the Reducer's all-reduce time and bus bandwidth).
    op.work->MarkStarted(Work::TimePoint::clock::now() -
                         std::chrono::duration_cast<Work::TimePoint::duration>(
                             std::chrono::duration<double, std::milli>(ms)));
  }
  for (CUevent_st** ev : {&op.start, &op.event}) {
    if (*ev != nullptr) free_events_.push_back(*ev);
    *ev = nullptr;
  }
  op.owners.clear();
  NoteDone(op.seq, status.ok());  // ops finish in issue order
  op.work->Finish(std::move(status));
}

// ---- Collectives ----

std::shared_ptr<Work> NcclProcessGroup::AllReduce(DeviceBuffer b, ReduceOp op) {
  Status error = CheckBuffer("all_reduce", b);
  if (error.ok()) error = CheckReducible("all_reduce", b.dtype);
  std::string detail = Describe(b);
  if (op != ReduceOp::kSum) detail += std::string(", ") + ReduceOpName(op);
  ncclDataType_t type = ncclFloat32;
  NcclType(b.dtype, &type);
  Launch launch = [b = b.data, n = b.numel, type, op](ncclComm_t comm, cudaStream_t s) {
    return static_cast<int>(ncclAllReduce(b, b, n, type, NcclOp(op), comm, s));
  };
  return Enqueue("all_reduce", detail, SizeOf(b), error, std::move(launch), {b.owner});
}

std::shared_ptr<Work> NcclProcessGroup::Broadcast(DeviceBuffer b, int root) {
  Status error = CheckBuffer("broadcast", b);
  if (error.ok() && (root < 0 || root >= size())) {
    error = InvalidArgumentError("broadcast: root " + std::to_string(root) +
                                 " is not a rank of this group of " + std::to_string(size()));
  }
  Launch launch = [b = b.data, n = Bytes(b), root](ncclComm_t comm, cudaStream_t s) {
    return static_cast<int>(ncclBroadcast(b, b, n, ncclUint8, root, comm, s));
  };
  return Enqueue("broadcast", Describe(b) + ", root " + std::to_string(root), SizeOf(b), error,
                 std::move(launch), {b.owner});
}

std::shared_ptr<Work> NcclProcessGroup::AllGather(DeviceBuffer out, DeviceBuffer in) {
  Status error = CheckBuffer("all_gather (out)", out);
  if (error.ok()) error = CheckBuffer("all_gather (in)", in);
  if (error.ok() && (out.dtype != in.dtype || out.numel != in.numel * size())) {
    error = InvalidArgumentError("all_gather: out is " + Describe(out) + " and in is " +
                                 Describe(in) + "; out must have the dtype of in and " +
                                 std::to_string(size()) + " times its elements");
  }
  Launch launch = [o = out.data, i = in.data, n = Bytes(in)](ncclComm_t comm, cudaStream_t s) {
    return static_cast<int>(ncclAllGather(i, o, n, ncclUint8, comm, s));
  };
  return Enqueue("all_gather", Describe(in) + " per rank", SizeOf(in), error, std::move(launch),
                 {out.owner, in.owner});
}

std::shared_ptr<Work> NcclProcessGroup::ReduceScatter(DeviceBuffer out, DeviceBuffer in,
                                                      ReduceOp op) {
  Status error = CheckBuffer("reduce_scatter (out)", out);
  if (error.ok()) error = CheckBuffer("reduce_scatter (in)", in);
  if (error.ok()) error = CheckReducible("reduce_scatter", in.dtype);
  if (error.ok() && (out.dtype != in.dtype || in.numel != out.numel * size())) {
    error = InvalidArgumentError("reduce_scatter: in is " + Describe(in) + " and out is " +
                                 Describe(out) + "; in must have the dtype of out and " +
                                 std::to_string(size()) + " times its elements");
  }
  std::string detail = Describe(in);
  if (op != ReduceOp::kSum) detail += std::string(", ") + ReduceOpName(op);
  ncclDataType_t type = ncclFloat32;
  NcclType(in.dtype, &type);
  Launch launch = [o = out.data, i = in.data, n = out.numel, type, op](ncclComm_t comm,
                                                                       cudaStream_t s) {
    return static_cast<int>(ncclReduceScatter(i, o, n, type, NcclOp(op), comm, s));
  };
  return Enqueue("reduce_scatter", detail, SizeOf(in), error, std::move(launch),
                 {out.owner, in.owner});
}

std::shared_ptr<Work> NcclProcessGroup::Barrier() {
  // An all-reduce of one int32 on the group's scratch word: done when every rank reached it.
  Launch launch = [b = scratch_](ncclComm_t comm, cudaStream_t s) {
    return static_cast<int>(ncclAllReduce(b, b, 1, ncclInt32, ncclSum, comm, s));
  };
  return Enqueue("barrier", "", CollectiveSize{}, OkStatus(), std::move(launch), {});
}

// The Tensor forms check the tensor, then run the DeviceBuffer form; outputs' versions are
// bumped when the op is queued (it writes them from then on).

std::shared_ptr<Work> NcclProcessGroup::AllReduce(Tensor t, ReduceOp op) {
  Status error = CheckTensor("all_reduce", t, device_);
  if (!error.ok()) return Enqueue("all_reduce", "", {}, error, nullptr, {});
  t.BumpVersion();
  return AllReduce(BufferOf(t), op);
}

std::shared_ptr<Work> NcclProcessGroup::Broadcast(Tensor t, int root) {
  Status error = CheckTensor("broadcast", t, device_);
  if (!error.ok()) return Enqueue("broadcast", "", {}, error, nullptr, {});
  t.BumpVersion();
  return Broadcast(BufferOf(t), root);
}

std::shared_ptr<Work> NcclProcessGroup::AllGather(Tensor out, Tensor in) {
  Status error = CheckTensor("all_gather (out)", out, device_);
  if (error.ok()) error = CheckTensor("all_gather (in)", in, device_);
  if (!error.ok()) return Enqueue("all_gather", "", {}, error, nullptr, {});
  out.BumpVersion();
  return AllGather(BufferOf(out), BufferOf(in));
}

std::shared_ptr<Work> NcclProcessGroup::ReduceScatter(Tensor out, Tensor in, ReduceOp op) {
  Status error = CheckTensor("reduce_scatter (out)", out, device_);
  if (error.ok()) error = CheckTensor("reduce_scatter (in)", in, device_);
  if (!error.ok()) return Enqueue("reduce_scatter", "", {}, error, nullptr, {});
  out.BumpVersion();
  return ReduceScatter(BufferOf(out), BufferOf(in), op);
}

}  // namespace trainyard::dist

// ---- The library's entry point (nccl_loader.h, Note [The nccl entry point]) ----

extern "C" __attribute__((visibility("default"))) void TyCreateNcclProcessGroup(
    const trainyard::dist::NcclCreateArgs* args, trainyard::dist::NcclCreateResult* result) {
  using namespace trainyard;
  using namespace trainyard::dist;
  auto fail = [result](const Status& st) {
    result->group = nullptr;
    result->code = static_cast<int>(st.code());
    std::snprintf(result->message, sizeof(result->message), "%s", st.message().c_str());
  };
  if (args->abi_version != kNcclAbiVersion || args->options_size != sizeof(ProcessGroupOptions) ||
      args->work_size != sizeof(Work)) {
    return fail(FailedPreconditionError(
        std::string(kNcclLibraryName) +
        " is from another build of trainyard (entry point version " +
        std::to_string(args->abi_version) + " vs " + std::to_string(kNcclAbiVersion) +
        "); rebuild it with this binary"));
  }
  StatusOr<std::unique_ptr<NcclProcessGroup>> group =
      NcclProcessGroup::Create(*args->store, args->rank, args->size, *args->options);
  if (!group.ok()) return fail(group.status());
  result->code = 0;
  result->message[0] = '\0';
  result->group = group->release();
}
