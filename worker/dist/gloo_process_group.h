// GlooProcessGroup: the ProcessGroup for CPU tensors, over Gloo's TCP transport.
//
// Ranks rendezvous through the Store, connect a full mesh, and then run collectives one at a
// time on the group's own thread, in the order issued; op number N uses Gloo tag N, so every
// rank must issue the same ops in the same order. Compiled only when libgloo-dev is found
// (TY_HAVE_GLOO); CreateProcessGroup("gloo", ...) is the way in.
//
// Algorithms (Note [Gloo algorithms] in the .cc): all-reduce is Gloo's pipelined ring (a
// whole-tensor exchange for two ranks and small tensors);
// reduce-scatter is our own ring over Gloo's point-to-point buffers; broadcast, all-gather and
// barrier are Gloo's; send and recv are one unbound buffer's send and receive. Failures follow
// process_group.h: DeadlineExceeded or Unavailable naming the op and, when it can be known, the
// peer rank; after that every op is Aborted, and the group closes its connections so that peers
// blocked on it fail at once.
//
// Shared memory: with algorithm "auto", a group whose ranks all run on one host (HostKey) runs
// every collective through a shared-memory segment instead (ShmComm, shm_comm.h); transport()
// is then "shm". With several ranks on each of several hosts (the same number on each), the
// all-reduce is hierarchical (Note [Hierarchical all-reduce] in gloo_hierarchical.cc):
// transport() is "shm+tcp", and the other collectives use the flat TCP mesh. The TCP mesh is
// always connected, so that start-up errors stay the same.
//
// Transport: "tcp", and "auto" means tcp. "ibverbs" is Unimplemented: Debian's libgloo (0.5,
// 2022) has no unbound buffers on ibverbs, and every collective here needs them.
//
// SIGPIPE: Gloo writes to sockets without MSG_NOSIGNAL, so a peer that vanishes would raise
// SIGPIPE and kill the process. The group's threads keep SIGPIPE blocked (the process's
// disposition is not touched), so the write fails with EPIPE and the op with Unavailable.
//
// Thread safety: the collective methods may be called from any thread; Work handles are
// thread-safe. Destruction waits for the running op (bounded by the timeout) and cancels the
// queued ones.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "worker/dist/process_group.h"

namespace gloo {
class Context;
namespace transport {
class Device;
class UnboundBuffer;
}  // namespace transport
}  // namespace gloo

namespace trainyard::dist {
namespace internal {
class ShmComm;
struct ShmPlan;
}  // namespace internal

class GlooProcessGroup final : public ProcessGroup {
 public:
  // Connects rank `rank` of `size` through `store`: every rank first sets "joined/<rank>", so
  // a rank that never joins is named in the DeadlineExceeded after options.timeout. Gloo's own
  // keys live under "gloo/". Use a fresh store (a PrefixStore per attempt) for every group.
  static StatusOr<std::unique_ptr<GlooProcessGroup>> Create(std::shared_ptr<Store> store, int rank,
                                                            int size,
                                                            const ProcessGroupOptions& options);
  ~GlooProcessGroup() override;

  const char* backend() const override { return "gloo"; }
  std::chrono::milliseconds timeout() const override { return options_.timeout; }
  // The transport in use: "tcp", "shm" for a group on one host, "shm+tcp" for a hierarchical one.
  const std::string& transport() const { return transport_; }

  std::shared_ptr<Work> AllReduce(Tensor t, ReduceOp op = ReduceOp::kSum) override;
  std::shared_ptr<Work> Broadcast(Tensor t, int root = 0) override;
  std::shared_ptr<Work> AllGather(Tensor out, Tensor in) override;
  std::shared_ptr<Work> ReduceScatter(Tensor out, Tensor in, ReduceOp op = ReduceOp::kSum) override;
  std::shared_ptr<Work> Barrier() override;
  std::shared_ptr<Work> Send(Tensor t, int peer) override;
  std::shared_ptr<Work> Recv(Tensor t, int peer) override;
  void Abort(const Status& why) override;

  // What an op's buffers and scratch need to outlive (Note [Parking a failed op] in the .cc).
  using KeepAlive = std::vector<std::shared_ptr<void>>;

 private:
  // Which rank a ring op receives from and sends to; -1 when the op is not a ring.
  struct Peers {
    int recv_from = -1;
    int send_to = -1;
  };
  // One queued op. `run` does the communication on the group's thread and throws Gloo's
  // exceptions on failure; Run() turns them into a Status naming the op.
  struct Task {
    std::shared_ptr<Work> work;
    uint32_t seq = 0;
    Peers peers;
    std::function<void(uint32_t tag, KeepAlive& keep)> run;
  };

  GlooProcessGroup(int rank, int size, ProcessGroupOptions options,
                   std::shared_ptr<gloo::transport::Device> device,
                   std::shared_ptr<gloo::Context> context, internal::ShmPlan plan,
                   std::shared_ptr<gloo::Context> cross,
                   std::map<std::string, int> peer_by_address);

  // Queues `run` as op "<what> #<seq> (<detail>)"; `error` non-OK finishes it at once instead.
  std::shared_ptr<Work> Enqueue(const std::string& what, const std::string& detail,
                                CollectiveSize size, Peers peers, Status error,
                                std::function<void(uint32_t tag, KeepAlive& keep)> run);
  void Loop();
  // Runs one task and names its failure.
  Status Run(Task& task);
  // DeadlineExceeded (a timeout) or Unavailable (anything else) for op `name` from Gloo's text.
  Status Translate(const std::string& name, const Peers& peers, const std::string& gloo_text);
  // The peer whose address appears in Gloo's message (Note [Naming the peer]), or -1.
  int RankInMessage(const std::string& text) const;

  // Send (`sending`) or Recv of `t` with `peer`.
  std::shared_ptr<Work> PointToPoint(const char* what, Tensor t, int peer, bool sending);
  // An unbound buffer over ptr[0, bytes) that lives as long as `keep`.
  gloo::transport::UnboundBuffer* KeepBuffer(KeepAlive& keep, void* ptr, size_t bytes);
  // All-reduce of a group of two by exchanging whole tensors (Note [Gloo algorithms]).
  void PairExchangeAllReduce(void* data, size_t elems, size_t elem_size,
                             void (*reduce)(void*, const void*, const void*, size_t), uint32_t tag,
                             KeepAlive& keep);
  // Note [Hierarchical all-reduce]: shared memory inside the host, Gloo's ring across hosts.
  void HierarchicalAllReduce(void* data, size_t elems, size_t elem_size,
                             void (*reduce)(void*, const void*, const void*, size_t), uint32_t tag,
                             KeepAlive& keep);
  // Every rank is on this host: all collectives through shared memory.
  bool OneHost() const { return shm_ != nullptr && cross_ == nullptr; }

  // The ring reduce-scatter (Note [Gloo algorithms]; in gloo_reduce_scatter.cc).
  void RingReduceScatter(void* out, const void* in, size_t chunk_elems, size_t elem_size,
                         void (*reduce)(void*, const void*, const void*, size_t), uint32_t tag,
                         KeepAlive& keep);

  const ProcessGroupOptions options_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
  // This host's segment (ShmPlan): with no cross_, every rank is on this host and all collectives
  // go through it; with cross_, the all-reduce is hierarchical over both.
  std::unique_ptr<internal::ShmComm> shm_;
  std::shared_ptr<gloo::Context> cross_;
  Peers cross_peers_;  // group ranks of this rank's neighbours on the cross-host ring
  std::string transport_;
  // "[ip]:port" of every peer socket Gloo may name in a message -> the peer's rank.
  const std::map<std::string, int> peer_by_address_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;         // guarded by mu_
  bool stop_ = false;              // guarded by mu_
  uint32_t next_seq_ = 1;          // guarded by mu_
  Status broken_;                  // the first failure; guarded by mu_
  std::shared_ptr<Work> running_;  // the op on the group's thread; guarded by mu_
  // Failed ops' buffers and closures (Note [Parking a failed op]); group thread only, then
  // the destructor.
  std::vector<std::shared_ptr<void>> parked_;
  std::thread thread_;
};

}  // namespace trainyard::dist
