// NcclProcessGroup: the ProcessGroup for CUDA tensors, over NCCL.
//
// Lives in libtrainyard_nccl.so, built when CUDA and NCCL are found (TY_WITH_CUDA), and is
// reached through LoadNcclProcessGroup (nccl_loader.h), so CPU-only binaries never load CUDA.
// This header includes no CUDA headers (the handles are forward-declared), so tests can use the
// class with the CUDA runtime alone.
//
// Start-up, bounded by options.timeout: every rank sets "nccl/joined/<rank>" and waits for all
// (a rank that never joins is named); rank 0 sets NCCL's unique id as "nccl/unique_id" and the
// others get it; then each creates a non-blocking communicator and polls it until it is ready.
// On timeout the communicator is aborted and Create returns DeadlineExceeded. Use a fresh store
// (a PrefixStore per attempt) for every group: a stale unique id would hang start-up.
//
// Device: cuda:(rank % visible devices), chosen at creation. That is right when each host runs
// consecutive ranks, one per GPU, or when each process sees one GPU (CUDA_VISIBLE_DEVICES).
// Create leaves that device current on the calling thread. No visible device is
// FailedPrecondition naming the rank, never a crash.
//
// Options: nccl_algo sets NCCL_ALGO, nccl_ib_hca NCCL_IB_HCA, nccl_ib_disable NCCL_IB_DISABLE=1,
// in the environment before the communicator is created. A non-empty option replaces what the
// environment had (the job spec is the explicit request); an empty one (or false) leaves the
// environment and NCCL's defaults alone. NCCL reads most settings once per process, when the
// first communicator is created, so every group of a process should use the same options.
//
// Collectives: Note [NCCL streams and completion] in the .cc. Failures follow process_group.h:
// an op not done within the timeout, or an asynchronous NCCL error, aborts the communicator and
// fails that op (DeadlineExceeded / Unavailable, naming it and its sequence number); every op
// still in flight and every later op is then Aborted. NCCL cannot say which rank was late.
//
// Thread safety: the collective methods may be called from any thread; Work handles are
// thread-safe. Destruction cancels the ops not yet launched, waits for those in flight (each
// bounded by the timeout) and then destroys the communicator (aborting it if that hangs).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "worker/dist/process_group.h"

struct ncclComm;     // ncclComm_t is ncclComm*
struct CUstream_st;  // cudaStream_t is CUstream_st*
struct CUevent_st;   // cudaEvent_t is CUevent_st*

namespace trainyard::dist {

// A contiguous block of device memory on the group's device: what a CUDA tensor holds, for
// callers that have device memory but no Tensor (the engine cannot allocate CUDA tensors until
// its CUDA backend exists). `owner`, when set, is kept alive until the op completes.
struct DeviceBuffer {
  void* data = nullptr;
  int64_t numel = 0;
  DType dtype = DType::kFloat32;
  std::shared_ptr<const void> owner;
};

class NcclProcessGroup final : public ProcessGroup {
 public:
  static StatusOr<std::unique_ptr<NcclProcessGroup>> Create(std::shared_ptr<Store> store, int rank,
                                                            int size,
                                                            const ProcessGroupOptions& options);
  ~NcclProcessGroup() override;

  const char* backend() const override { return "nccl"; }
  std::chrono::milliseconds timeout() const override { return options_.timeout; }
  // The CUDA device index this rank uses.
  int device() const { return device_; }

  // Tensors must be contiguous CUDA tensors on device(); anything else is InvalidArgument
  // naming the collective and the tensor's device.
  std::shared_ptr<Work> AllReduce(Tensor t, ReduceOp op = ReduceOp::kSum) override;
  std::shared_ptr<Work> Broadcast(Tensor t, int root = 0) override;
  std::shared_ptr<Work> AllGather(Tensor out, Tensor in) override;
  std::shared_ptr<Work> ReduceScatter(Tensor out, Tensor in, ReduceOp op = ReduceOp::kSum) override;
  std::shared_ptr<Work> Barrier() override;
  // The group's thread breaks it (ncclCommAbort) at its next poll; queued ops fail at once.
  void Abort(const Status& why) override;

  // The same on device memory (DeviceBuffer), with the same contracts.
  std::shared_ptr<Work> AllReduce(DeviceBuffer b, ReduceOp op = ReduceOp::kSum);
  std::shared_ptr<Work> Broadcast(DeviceBuffer b, int root = 0);
  std::shared_ptr<Work> AllGather(DeviceBuffer out, DeviceBuffer in);
  std::shared_ptr<Work> ReduceScatter(DeviceBuffer out, DeviceBuffer in,
                                      ReduceOp op = ReduceOp::kSum);

 private:
  using Clock = std::chrono::steady_clock;
  // Issues one NCCL call on the stream; returns its ncclResult_t.
  using Launch = std::function<int(ncclComm* comm, CUstream_st* stream)>;
  struct Op {
    std::shared_ptr<Work> work;
    Launch launch;
    std::vector<std::shared_ptr<const void>> owners;  // kept alive until the op completes
    CUevent_st* start = nullptr;                      // recorded on the stream before the call
    CUevent_st* event = nullptr;                      // recorded on the stream after the call
    Clock::time_point since;                          // when it became the oldest op in flight
    CUevent_st* ready = nullptr;  // on the compute stream: inputs produced (Note [NCCL streams])
    Status ready_error;           // ReadyEvent failed: the op breaks the group instead of running
    int64_t seq = 0;              // its sequence number
  };

  NcclProcessGroup(int rank, int size, ProcessGroupOptions options, int device);
  StatusOr<CUevent_st*> ReadyEvent() const;
  // Creates the stream, the barrier's scratch word and the communicator, then starts the thread.
  Status Init(const std::string& unique_id);
  Status InitComm(const std::string& unique_id);
  void CloseComm();

  // Queues op "<what> #<seq> (<detail>)"; `error` non-OK finishes it at once instead.
  std::shared_ptr<Work> Enqueue(const std::string& what, const std::string& detail,
                                CollectiveSize size, const Status& error, Launch launch,
                                std::vector<std::shared_ptr<const void>> owners);
  // The group's thread: launches queued ops in order and finishes completed ones.
  void Loop();
  void LaunchOp(Op op);
  void Poll();
  // Cancels queued ops and waits for those in flight, when the group is destroyed.
  void Drain();
  // Fails `failed` (an op in flight) with `error`, aborts the communicator and fails every other
  // op in flight with Aborted; later ops fail at once.
  void Break(Op* failed, Status error);
  // Finishes op's Work (its start the device's, when it ran) and returns its events.
  void FinishOp(Op& op, Status status);

  const ProcessGroupOptions options_;
  const int device_;
  ncclComm* comm_ = nullptr;              // null once aborted
  CUstream_st* stream_ = nullptr;         // the group's own stream; every op runs on it, in order
  int* scratch_ = nullptr;                // one device int32 for Barrier
  std::vector<CUevent_st*> free_events_;  // reused; the thread's

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Op> queued_;  // guarded by mu_
  bool stop_ = false;      // guarded by mu_
  uint32_t next_seq_ = 1;  // guarded by mu_
  Status abort_;           // Abort's reason, for the thread; guarded by mu_
  // The thread's alone (and the destructor's after it ends):
  std::deque<Op> in_flight_;
  Status broken_;                                      // the first failure
  std::vector<std::shared_ptr<const void>> stranded_;  // owners of ops a hung stream may touch
  std::thread thread_;
};

}  // namespace trainyard::dist
