// ProcessGroup: the collectives N ranks use to train as one (DESIGN.md section 4).
//
// Every collective is asynchronous: it is queued at once and returns a Work handle; the group
// runs its collectives one at a time, in the order they were issued, on its own thread, so
// every rank must issue the same collectives in the same order (as with torch.distributed).
// Tensors are contiguous CPU tensors (CUDA tensors for NCCL) and must stay alive and untouched
// until the Work completes.
//
// Nothing waits forever: each collective is bounded by the group's timeout. A collective that
// times out returns DeadlineExceeded, and one whose peer vanished returns Unavailable; both
// name the collective, its sequence number and the peer when known, e.g.
//   "all_reduce #12 (262144 float32): timed out after 5s waiting for rank 2"
// After such a failure the group is broken: every later collective fails at once with the
// first error (Aborted), because the ranks no longer agree on where they are.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "common/status.h"
#include "worker/dist/flight_recorder.h"
#include "worker/dist/store.h"
#include "worker/tensor/tensor.h"

namespace trainyard::dist {

enum class ReduceOp { kSum, kAverage, kMax };
const char* ReduceOpName(ReduceOp op);

// The handle of one queued collective.
class Work {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  explicit Work(std::string name) : name_(std::move(name)) {}
  // "all_reduce #12 (262144 float32)".
  const std::string& name() const { return name_; }

  // Blocks until the collective completes and returns its status, or returns DeadlineExceeded
  // naming it after `timeout` (the collective itself keeps running to its own deadline).
  Status Wait(std::chrono::milliseconds timeout);
  bool IsCompleted() const;

  // When it began and finished running (steady clock): on the group's thread for Gloo; for
  // NCCL the start is the device's (its end less its time between timing events on the
  // stream), so end - start excludes the stream's waits before it. Valid once completed.
  // Reducer uses them to show that communication overlapped backward.
  TimePoint start_time() const;
  TimePoint end_time() const;
  // Bytes each rank contributed (the tensor's size), for bandwidth figures.
  int64_t bytes() const { return bytes_; }

  // For backends.
  void set_bytes(int64_t bytes) { bytes_ = bytes; }
  void MarkStarted();
  void MarkStarted(TimePoint at);  // when the backend knows better than the host's clock
  void Finish(Status status);
  // Finishes it now with `status` unless it finished already; the backend's own Finish that
  // comes later is then ignored (ProcessGroup::Abort).
  void Abort(Status status);

 private:
  std::string name_;
  int64_t bytes_ = 0;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  bool aborted_ = false;
  Status status_;
  TimePoint start_{}, end_{};
};

struct ProcessGroupOptions {
  // Bound on every collective and on connecting at start-up.
  std::chrono::milliseconds timeout = std::chrono::minutes(10);
  // Gloo: "auto" (default): the collectives of ranks that all share one host go through shared
  // memory (worker/dist/shm_comm.h), others over TCP with the ring; "ring" or "ring_chunked":
  // always TCP with that all-reduce.
  std::string algorithm = "auto";
  // Gloo: names the shared-memory segment, "/trainyard-<shm_tag>-<random>" (for instance the
  // job's name), so that a leftover one says whose it was.
  std::string shm_tag = "group";
  // Gloo: "tcp", "ibverbs" or "auto" (ibverbs when a device exists, else tcp).
  std::string transport = "auto";
  // The address this rank listens on (Gloo TCP); empty picks the host name's address, or
  // loopback for a group whose store is on loopback.
  std::string hostname;
  // NCCL: NCCL_ALGO (e.g. "Ring") and NCCL_IB_HCA / NCCL_IB_DISABLE-style settings, applied
  // before the communicator is created; empty keeps NCCL's defaults.
  std::string nccl_algo;
  std::string nccl_ib_hca;
  bool nccl_ib_disable = false;
  // NCCL: the rank whose GPU this group uses, device_rank % visible GPUs (-1: the group rank),
  // so that a subgroup (a pipeline's pair or stage group) runs on its member's GPU.
  int device_rank = -1;
};

class ProcessGroup {
 public:
  ProcessGroup(int rank, int size) : rank_(rank), size_(size) {}
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  virtual const char* backend() const = 0;  // "gloo", "nccl"
  virtual std::chrono::milliseconds timeout() const = 0;

  // In place: every rank's `t` becomes the element-wise reduction over ranks. float32,
  // float64, bfloat16, float16, int64. Gloo sums 16-bit floats in float32 and rounds once;
  // NCCL sums them in their own precision at each step of its ring.
  virtual std::shared_ptr<Work> AllReduce(Tensor t, ReduceOp op = ReduceOp::kSum) = 0;
  // Every rank's `t` becomes root's.
  virtual std::shared_ptr<Work> Broadcast(Tensor t, int root = 0) = 0;
  // `out` (size() * in.numel() elements, same dtype) becomes every rank's `in`, in rank order.
  virtual std::shared_ptr<Work> AllGather(Tensor out, Tensor in) = 0;
  // `in` holds size() equal chunks; rank r's `out` becomes the reduction of every rank's chunk r.
  virtual std::shared_ptr<Work> ReduceScatter(Tensor out, Tensor in,
                                              ReduceOp op = ReduceOp::kSum) = 0;
  virtual std::shared_ptr<Work> Barrier() = 0;
  // Point to point, in a group of two: Send gives this rank's `t` to `peer` (the other rank),
  // whose Recv of the same shape and dtype fills its `t`. Like a collective, the two ranks
  // issue the pair at the same point of their order; bounded by the group's timeout.
  // InvalidArgument for a larger group or another peer. The default is a broadcast rooted at
  // the sender (NCCL's, whose broadcast in a pair is a send), named as that broadcast; Gloo
  // sends over the pair's connection, or through the shared segment on one host, and names
  // the ops "send #12 (1024 float32, to rank 1)" and "recv #12 (1024 float32, from rank 0)".
  virtual std::shared_ptr<Work> Send(Tensor t, int peer);
  virtual std::shared_ptr<Work> Recv(Tensor t, int peer);

  // Breaks the group on purpose (an elastic job regroups: a member is lost): the collective
  // running now and every queued or later one fail at once with Aborted naming `why`, so no
  // wait on this group lasts. The backend's own call may still block on its thread until its
  // timeout; the group can be destroyed from another thread meanwhile
  // (RetireProcessGroup). Any thread; idempotent.
  virtual void Abort(const Status& why) = 0;

  // Progress, for health reports (any thread): the sequence number of the last collective
  // issued and of the last one finished (0: none yet). issued > done while one runs or waits.
  int64_t collectives_issued() const { return issued_.load(std::memory_order_relaxed); }
  int64_t collectives_done() const { return done_.load(std::memory_order_relaxed); }
  // The last collectives of this rank, for hang reports (flight_recorder.h). The rank sets its
  // phase source before the first collective.
  FlightRecorder& flight_recorder() { return recorder_; }
  const FlightRecorder& flight_recorder() const { return recorder_; }

 protected:
  // OK when this group of two may send to or receive from `peer`; else InvalidArgument naming
  // `op` ("send", "recv").
  Status CheckPeer(const char* op, int peer) const;

  // For backends: call when op `seq` is queued, begins running, and finishes (ok or not); they
  // keep the progress counters and the flight recorder.
  void NoteIssued(int64_t seq, const std::string& op, CollectiveSize size) {
    recorder_.Issued(seq, op, std::move(size));
    issued_.store(seq, std::memory_order_relaxed);
  }
  void NoteStarted(int64_t seq) { recorder_.Started(seq); }
  void NoteDone(int64_t seq, bool ok) {
    recorder_.Finished(seq, ok);
    done_.store(seq, std::memory_order_relaxed);
  }

 private:
  int rank_;
  int size_;
  std::atomic<int64_t> issued_{0};
  std::atomic<int64_t> done_{0};
  FlightRecorder recorder_;
};

// Creates the group for `backend` ("gloo", "nccl") over `store`, connecting to every other rank
// (bounded by options.timeout: a rank that never joins gives DeadlineExceeded naming it).
// Unimplemented naming the backend when this build lacks it.
StatusOr<std::unique_ptr<ProcessGroup>> CreateProcessGroup(const std::string& backend,
                                                           std::shared_ptr<Store> store, int rank,
                                                           int size,
                                                           ProcessGroupOptions options = {});

// Start-up rendezvous for backends: every rank sets "<backend>/joined/<rank>" in `store` and
// waits up to `timeout` for all `size`; DeadlineExceeded names the ranks that never came.
Status JoinGroup(Store& store, const std::string& backend, int rank, int size,
                 std::chrono::milliseconds timeout);

// Drops the last reference to a group that failed or was aborted on a thread of its own, so
// the caller never waits for a backend call still blocked until its timeout.
void RetireProcessGroup(std::shared_ptr<ProcessGroup> group);

// Removes the shared-memory segments (worker/dist/shm_comm.h) in `dir` whose creator process is
// gone: "trainyard-<tag>-<pid>-<random>". A segment is unlinked as soon as its group has mapped
// it, so one still there with a dead creator was left by ranks that died while their group was
// being made. The worker daemon calls it whenever a rank exits. Returns how many it removed.
int RemoveOrphanedSegments(const std::string& dir = "/dev/shm");

// Waits for `work` with the group's timeout plus a margin (the collective itself is bounded by
// that timeout, so this only fires if the backend misbehaves).
Status WaitFor(const ProcessGroup& group, Work& work);

// All-reduces `host`, a small CPU tensor, in place and waits: through a copy on `device` when
// that is a CUDA device (NCCL reduces device memory only), else directly. For the few scalars
// ranks agree on (step numbers, losses, the used-parameter bitmap).
Status AllReduceHost(ProcessGroup& group, const Tensor& host, ReduceOp op, Device device);

}  // namespace trainyard::dist
