// ShmComm: the collectives of the ranks of one host through a shared-memory segment, the gloo
// backend's transport inside a node (Note [Shared-memory collectives] in shm_comm.cc).
//
// Every call is synchronous, made from the group's own thread, and bounded by the timeout. A
// failure is a Status without the op's name (the group prefixes it): DeadlineExceeded "timed out
// after 10s waiting for rank 1 (shared memory)", Unavailable when a peer's process is gone or a
// peer broke the segment, Aborted after Abort(). Internal to the gloo backend (TY_HAVE_GLOO).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "worker/dist/gloo_reduce.h"
#include "worker/dist/store.h"

namespace trainyard::dist::internal {

// Where this process runs, as far as sharing memory goes: the boot id, the host name and the
// ipc, pid and network namespaces. Processes with equal keys can map one segment and see each
// other's pids. A network namespace counts as a node of its own, as a pod would.
std::string HostKey();

struct ShmHeader;

class ShmComm {
 public:
  // The local group: `ranks` are the group ranks on this host, ascending, this one at
  // ranks[local_rank]. The first creates the segment "/trainyard-<tag>-<pid>-<random>" (after
  // removing orphans: RemoveOrphanedSegments, process_group.h) and publishes
  // its name under "shm/name/<ranks[0]>" in `store`; the others attach; once all have (or one
  // failed), every one unlinks it, so a crash later leaves nothing behind. Every member returns
  // the same verdict: an error when any of them could not map the segment (no /dev/shm, not
  // enough room in it), and the group then runs over TCP.
  static StatusOr<std::unique_ptr<ShmComm>> Create(Store& store, const std::vector<int>& ranks,
                                                   int local_rank, const std::string& tag,
                                                   std::chrono::milliseconds timeout);
  ~ShmComm();
  ShmComm(const ShmComm&) = delete;
  ShmComm& operator=(const ShmComm&) = delete;

  int size() const { return static_cast<int>(ranks_.size()); }
  int local_rank() const { return me_; }

  // In place over `count` elements of `elem` bytes; rank order 0, 1, ... for every element, so
  // every rank gets the same bits. Average is left to the caller (like Gloo's path).
  Status AllReduce(void* data, size_t count, size_t elem, ReduceFn reduce);
  // The two halves of a hierarchical all-reduce (Note [Hierarchical all-reduce] in
  // gloo_hierarchical.cc). ReduceSlices: data's slice SliceOf(local_rank()) becomes the sum over
  // the local ranks (in rank order); the rest of `data` is left as it was. GatherSlices: every
  // rank's slice of `data` is copied to every rank.
  Status ReduceSlices(void* data, size_t count, size_t elem, ReduceFn reduce);
  Status GatherSlices(void* data, size_t count, size_t elem);
  // [first, last) of `count` elements that local rank `r` reduces, cut at 64-byte boundaries.
  std::pair<size_t, size_t> SliceOf(size_t count, size_t elem, int r) const;

  // `in` holds size() chunks of `count` elements; `out` (count) becomes the reduction of every
  // rank's chunk local_rank().
  Status ReduceScatter(void* out, const void* in, size_t count, size_t elem, ReduceFn reduce);
  // `out` (size() * bytes) becomes every rank's `in` (bytes), in rank order.
  Status AllGather(void* out, const void* in, size_t bytes);
  Status Broadcast(void* data, size_t bytes, int root_local);
  Status Barrier();

  // Fails every wait of every member at once with `why` (this rank's failure, without the op's
  // name), so that peers need not wait for their timeout. Idempotent; the first reason stays.
  void Break(const Status& why);
  // Fails this process's current and later waits with Aborted naming `why`. Any thread.
  void Abort(const std::string& why);

 private:
  ShmComm(std::vector<int> ranks, int me, std::chrono::milliseconds timeout, void* base,
          size_t bytes);

  // The buffer of local rank `r` for this round, and the round's start: waits until no peer can
  // still be reading this rank's buffer from two rounds ago.
  char* Buffer(int r) const;
  Status BeginRound();
  // Publishes this rank's arrival at the next generation and returns it.
  uint64_t Arrive();
  // Waits until local rank `r` (every peer) has arrived at `gen`.
  Status WaitRank(int r, uint64_t gen);
  Status WaitAll(uint64_t gen);
  // Ends a round: peers read this round's buffers before their next arrival.
  void EndRound();
  Status Failure(int r) const;

  const std::vector<int> ranks_;
  const int me_;
  const std::chrono::milliseconds timeout_;
  void* const base_;
  const size_t bytes_;
  ShmHeader* const header_;
  uint64_t gen_ = 0;              // this rank's last arrival
  uint64_t rounds_ = 0;           // rounds begun; the buffer parity is rounds_ % 2
  uint64_t free_at_[2] = {0, 0};  // a parity's buffer is free once every peer arrived here
  std::vector<char> scratch_;     // a reduction block, for local ranks >= 2
  std::atomic<bool> aborted_{false};
  mutable std::mutex abort_mu_;
  std::string abort_why_;  // guarded by abort_mu_
};

}  // namespace trainyard::dist::internal
