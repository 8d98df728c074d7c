// GlooProcessGroup (gloo_process_group.h).
//
// Note [Gloo algorithms]
// all_reduce: Gloo's ring (gloo::allreduce, RING): reduce-scatter then all-gather around the
//   ring, each split into segments with two in flight, so the reduction of one segment overlaps
//   the transfer of the next; every rank sends and receives 2(n-1)/n of the tensor, the optimum.
//   The segment cap sets the grain: "ring" uses kRingSegmentBytes = 4 MiB (Gloo's default and
//   PyTorch's is 1 MiB; on loopback, 2 ranks, 2 cores, 4 MiB gave 10-25% more bus bandwidth
//   than 1 MiB at 64-256 MB, 8 MiB the same as 4, 16 MiB less: bench/allreduce_bench.cc);
//   "ring_chunked" uses kChunkedSegmentBytes = 256 KiB (small segments: the first reductions
//   start sooner, for slow links). Gloo's old AllreduceRingChunked is not used: it allocates
//   slots per instance and has no per-op timeout.
// all_reduce of two ranks, up to kExchangeMaxBytes: each rank sends its whole tensor to the
//   other (1 MiB segments, all in flight) and adds the copy it receives as segments arrive. The
//   same bytes as the ring (for n = 2 the ring sends half, then the reduced half) in one round
//   instead of two dependent ones: half the latency and fewer sleeping hand-offs between Gloo's
//   I/O thread and ours, which a loaded 2-core machine punishes. It reduces the whole tensor
//   rather than half and needs a full-size copy, so above 4 MiB (where it measured no better)
//   the ring takes over. a + b == b + a, so both ranks hold the same bits.
// reduce_scatter: our ring over Gloo's point-to-point buffers. In step s (0..n-2) rank r sends
//   its partial sum of chunk (r-s-1) mod n to rank r+1 and receives chunk (r-s-2) mod n from
//   rank r-1, adds its own contribution and sends that on in step s+1; after n-1 steps it holds
//   chunk r reduced over all ranks. Bandwidth-optimal ((n-1)/n of the tensor each way) but a
//   step's transfer and reduction do not overlap; an all-reduce plus a copy would move twice
//   the bytes.
// broadcast (binomial tree), all_gather (ring) and barrier are Gloo's.
// Groups on one host run every collective over shared memory instead (Note [Shared-memory
// collectives] in shm_comm.cc), and groups over several hosts with several ranks on each run the
// all-reduce hierarchically (Note [Hierarchical all-reduce] in gloo_hierarchical.cc).
//
// Note [Naming the peer]
// Gloo's exceptions say what failed but not which rank: a timeout says "for recv operation" or
// "for send operation", and a broken connection names an address of the peer. Ring ops
// know whom they receive from and send to (Peers). For addresses, MapPeerAddresses
// (gloo_connect.cc) collects after connecting every address Gloo may print for each peer, so the
// address in a message maps back to a rank. A group of two always names the other rank. Before
// that, while the mesh connects, MeshContext (gloo_connect.cc) connects one pair at a time, so a
// pair that cannot connect names its peer's rank and both addresses: this rank's listener for
// the pair and the address the peer published ("rank 1 at 10.78.0.3:41234 could not connect to
// rank 2 at 10.78.0.4:40581: Connection refused").
#include "worker/dist/gloo_process_group.h"

#include <pthread.h>
#include <signal.h>

#include <cctype>
#include <cstring>

#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/common/error.h"
#include "gloo/context.h"
#include "gloo/types.h"
#include "worker/dist/gloo_internal.h"
#include "worker/dist/gloo_reduce.h"
#include "worker/dist/shm_comm.h"

namespace trainyard::dist {
namespace {

using internal::CleanGlooText;
using internal::Contains;
using internal::DivideBy;
using internal::Keep;
using internal::kExchangeSlotPrefix;
using internal::kPointToPointSlotPrefix;
using internal::Mod;
using internal::ReduceFn;
using internal::ShmFailure;
using internal::ThrowIfFailed;

// Segment caps for the ring all-reduce (Note [Gloo algorithms]).
constexpr size_t kRingSegmentBytes = 4 << 20;
constexpr size_t kChunkedSegmentBytes = 256 << 10;
// Two ranks exchange whole tensors up to this size (Note [Gloo algorithms]), in segments.
constexpr size_t kExchangeMaxBytes = 4 << 20;
constexpr size_t kExchangeSegmentBytes = 1 << 20;

// Note [Parking a failed op]
// When a peer fails, Gloo's I/O thread may still be signalling, or even filling, the buffers of
// the op that just threw on our thread. So every buffer, option object and scratch array an op
// uses is held in its KeepAlive; on success it is freed when the op returns, on failure it is
// parked (with the op's closure, which holds its tensors) until the group is destroyed, after
// the connections are closed and the device's I/O thread has stopped. The scratch buffer that
// gloo::allreduce allocates itself is freed by Gloo as it unwinds; ThreadSanitizer reports that
// race inside libgloo when a peer dies mid ring all-reduce, and only Gloo can fix it.

// ---- Validation and names ----

// `st` without its "<op name>: " prefix, for peers that will put their own op's name first.
Status WithoutName(const Status& st, const std::string& name) {
  const std::string prefix = name + ": ";
  if (st.message().compare(0, prefix.size(), prefix) != 0) return st;
  return Status(st.code(), st.message().substr(prefix.size()));
}

Status CheckTensor(const char* what, const Tensor& t) {
  if (!t.defined()) return InvalidArgumentError(std::string(what) + ": the tensor is undefined");
  if (!t.device().is_cpu()) {
    return InvalidArgumentError(std::string(what) +
                                ": the gloo backend takes CPU tensors; move it to the CPU or use "
                                "the nccl backend");
  }
  if (!t.is_contiguous()) {
    return InvalidArgumentError(std::string(what) +
                                ": the tensor is not contiguous; pass a "
                                "contiguous copy (ContiguousData)");
  }
  return OkStatus();
}

std::string Describe(const Tensor& t) {
  return t.defined() ? std::to_string(t.numel()) + " " + DTypeName(t.dtype()) : "undefined";
}

// What `t` moves per rank, for the flight recorder (nothing for an undefined tensor).
CollectiveSize SizeOf(const Tensor& t, int64_t bytes) {
  if (!t.defined()) return {};
  return {t.numel(), DTypeName(t.dtype()), bytes};
}

}  // namespace

namespace internal {

std::string CleanGlooText(const std::string& text) {
  std::string out;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t open = text.find('[', pos);
    const size_t close = open == std::string::npos ? open : text.find("] ", open);
    const size_t colon = close == std::string::npos ? close : text.rfind(':', close);
    const bool is_where = colon != std::string::npos && colon > open && colon + 1 < close &&
                          text.find_first_not_of("0123456789", colon + 1) == close &&
                          text.find(' ', open) > colon;
    if (!is_where) {
      out += text.substr(pos, open == std::string::npos ? open : open + 1 - pos);
      pos = open == std::string::npos ? text.size() : open + 1;
      continue;
    }
    out += text.substr(pos, open - pos);
    pos = close + 2;
  }
  return out;
}

}  // namespace internal

// ---- Creation (Create is in gloo_connect.cc) ----

GlooProcessGroup::GlooProcessGroup(int rank, int size, ProcessGroupOptions options,
                                   std::shared_ptr<gloo::transport::Device> device,
                                   std::shared_ptr<gloo::Context> context, internal::ShmPlan plan,
                                   std::shared_ptr<gloo::Context> cross,
                                   std::map<std::string, int> peer_by_address)
    : ProcessGroup(rank, size),
      options_(std::move(options)),
      device_(std::move(device)),
      context_(std::move(context)),
      shm_(std::move(plan.shm)),
      cross_(std::move(cross)),
      transport_(!shm_    ? "tcp"
                 : cross_ ? "shm+tcp"
                          : "shm"),
      peer_by_address_(std::move(peer_by_address)) {
  if (cross_) {
    const int n = static_cast<int>(plan.cross_ranks.size()), at = plan.cross_rank;
    cross_peers_ = Peers{plan.cross_ranks[Mod(at + 1, n)], plan.cross_ranks[Mod(at - 1, n)]};
  }
  thread_ = std::thread([this] { Loop(); });
}

GlooProcessGroup::~GlooProcessGroup() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (shm_) shm_->Abort("the process group was destroyed");
  thread_.join();
  cross_.reset();
  context_.reset();
  device_.reset();
  parked_.clear();  // Note [Parking a failed op]
}

void GlooProcessGroup::Abort(const Status& why) {
  std::vector<std::shared_ptr<Work>> works;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (broken_.ok()) broken_ = AbortedError("the group was aborted: " + why.message());
    if (running_) works.push_back(running_);
    for (const Task& t : queue_) works.push_back(t.work);
  }
  if (shm_) shm_->Abort(why.message());
  // Queued ops are not run (the group is broken); their Finish is then ignored.
  for (const auto& w : works) w->Abort(AbortedError(w->name() + ": aborted: " + why.message()));
}

// ---- The queue ----

std::shared_ptr<Work> GlooProcessGroup::Enqueue(const std::string& what, const std::string& detail,
                                                CollectiveSize size, Peers peers, Status error,
                                                std::function<void(uint32_t, KeepAlive&)> run) {
  const std::string suffix = detail.empty() ? "" : " (" + detail + ")";
  if (!error.ok()) {
    auto work = std::make_shared<Work>(what + suffix);
    work->Finish(error);
    return work;
  }
  std::lock_guard<std::mutex> lock(mu_);
  const uint32_t seq = next_seq_++;
  auto work = std::make_shared<Work>(what + " #" + std::to_string(seq) + suffix);
  work->set_bytes(size.bytes);
  queue_.push_back(Task{work, seq, peers, std::move(run)});
  NoteIssued(seq, what, std::move(size));
  cv_.notify_all();
  return work;
}

void GlooProcessGroup::Loop() {
  // Gloo sends from this thread: a vanished peer must give EPIPE, not SIGPIPE (BlockSigpipe,
  // gloo_connect.cc).
  sigset_t sigpipe;
  sigemptyset(&sigpipe);
  sigaddset(&sigpipe, SIGPIPE);
  ::pthread_sigmask(SIG_BLOCK, &sigpipe, nullptr);
  while (true) {
    Task task;
    Status broken;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (stop_) break;
      task = std::move(queue_.front());
      queue_.pop_front();
      broken = broken_;
      running_ = task.work;
    }
    if (!broken.ok()) {
      flight_recorder().Finished(task.seq, /*ok=*/false);
      task.work->Finish(AbortedError(
          task.work->name() +
          ": not run: the group is broken by an earlier failure: " + broken.message()));
      continue;
    }
    task.work->MarkStarted();
    NoteStarted(task.seq);
    Status st = Run(task);
    if (!st.ok()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (broken_.ok()) broken_ = st;
      }
      // Peers blocked on us fail now instead of at their timeout.
      if (shm_) shm_->Break(WithoutName(st, task.work->name()));
      try {
        context_->closeConnections();
        if (cross_) cross_->closeConnections();
      } catch (const std::exception&) {
      }
    }
    NoteDone(task.seq, st.ok());
    task.work->Finish(std::move(st));
    std::lock_guard<std::mutex> lock(mu_);
    running_.reset();
  }
  std::deque<Task> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    left.swap(queue_);
  }
  for (Task& t : left) {
    flight_recorder().Finished(t.seq, /*ok=*/false);
    t.work->Finish(CancelledError(t.work->name() +
                                  ": cancelled: the process group was destroyed before it ran"));
  }
}

Status GlooProcessGroup::Run(Task& task) {
  KeepAlive keep;
  Status st;
  try {
    task.run(task.seq, keep);
    return OkStatus();
  } catch (const ShmFailure& e) {
    return Status(e.status.code(), task.work->name() + ": " + e.status.message());
  } catch (const gloo::EnforceNotMet& e) {
    const std::string text = CleanGlooText(e.what());
    st = Contains(text, "imed out") || Contains(text, "imeout")
             ? Translate(task.work->name(), task.peers, text)
             : InternalError(task.work->name() + ": gloo check failed: " + text +
                             "; do all ranks issue the same collectives with the same sizes?");
  } catch (const std::exception& e) {
    st = Translate(task.work->name(), task.peers, CleanGlooText(e.what()));
  }
  // Note [Parking a failed op]
  parked_.insert(parked_.end(), keep.begin(), keep.end());
  parked_.push_back(
      std::make_shared<std::function<void(uint32_t, KeepAlive&)>>(std::move(task.run)));
  return st;
}

int GlooProcessGroup::RankInMessage(const std::string& text) const {
  for (const auto& [addr, peer] : peer_by_address_) {
    for (size_t at = text.find(addr); at != std::string::npos; at = text.find(addr, at + 1)) {
      const size_t end = at + addr.size();
      if (end >= text.size() || !std::isdigit(static_cast<unsigned char>(text[end]))) return peer;
    }
  }
  return -1;
}

Status GlooProcessGroup::Translate(const std::string& name, const Peers& peers,
                                   const std::string& text) {
  const bool timed_out = Contains(text, "imed out") || Contains(text, "imeout");
  int peer = RankInMessage(text);
  if (peer == rank()) peer = -1;
  if (peer < 0 && timed_out && Contains(text, "recv")) peer = peers.recv_from;
  if (peer < 0 && timed_out && Contains(text, "send")) peer = peers.send_to;
  if (peer < 0 && size() == 2) peer = 1 - rank();
  const std::string who = peer >= 0 ? "rank " + std::to_string(peer) : "";
  if (timed_out) {
    return DeadlineExceededError(name + ": timed out after " + FormatDuration(options_.timeout) +
                                 (who.empty() ? "" : " waiting for " + who) + " (gloo: " + text +
                                 ")");
  }
  return UnavailableError(name + ": " + (who.empty() ? "a peer" : who) +
                          " closed the connection or failed (gloo: " + text + ")");
}

// ---- Collectives ----

std::shared_ptr<Work> GlooProcessGroup::AllReduce(Tensor t, ReduceOp op) {
  Status error = CheckTensor("all_reduce", t);
  ReduceFn fn = error.ok() ? internal::GetReduceFn(t.dtype(), op) : nullptr;
  if (error.ok() && fn == nullptr) {
    error = InvalidArgumentError(std::string("all_reduce: dtype ") + DTypeName(t.dtype()) +
                                 " is not supported; use float32, float64, bfloat16, float16 "
                                 "or int64");
  }
  std::string detail = Describe(t);
  if (op != ReduceOp::kSum) detail += std::string(", ") + ReduceOpName(op);
  const Peers peers =
      cross_ ? cross_peers_ : Peers{Mod(rank() + 1, size()), Mod(rank() - 1, size())};
  const size_t segment =
      options_.algorithm == "ring_chunked" ? kChunkedSegmentBytes : kRingSegmentBytes;
  const int64_t bytes = error.ok() ? t.numel() * static_cast<int64_t>(ElementSize(t.dtype())) : 0;
  const CollectiveSize sized = SizeOf(t, bytes);
  return Enqueue("all_reduce", detail, sized, peers, error, [=](uint32_t tag, KeepAlive& keep) {
    if (t.numel() == 0 || size() == 1) return;
    const size_t elem = ElementSize(t.dtype());
    if (OneHost()) {
      ThrowIfFailed(shm_->AllReduce(t.raw_data(), static_cast<size_t>(t.numel()), elem, fn));
    } else if (shm_) {
      HierarchicalAllReduce(t.raw_data(), static_cast<size_t>(t.numel()), elem, fn, tag, keep);
    } else if (size() == 2 && static_cast<size_t>(bytes) <= kExchangeMaxBytes) {
      PairExchangeAllReduce(t.raw_data(), static_cast<size_t>(t.numel()), elem, fn, tag, keep);
    } else {
      auto opts = Keep<gloo::AllreduceOptions>(keep, context_);
      opts->setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      opts->setTag(tag);
      opts->setTimeout(options_.timeout);
      opts->setMaxSegmentSize(segment);
      opts->setReduceFunction(fn);
      // Gloo only needs the element size; the reduce function knows the type.
      if (elem == 8) {
        opts->setOutput(static_cast<int64_t*>(t.raw_data()), t.numel());
      } else if (elem == 4) {
        opts->setOutput(static_cast<int32_t*>(t.raw_data()), t.numel());
      } else {
        opts->setOutput(static_cast<int16_t*>(t.raw_data()), t.numel());
      }
      gloo::allreduce(*opts);
    }
    if (op == ReduceOp::kAverage) DivideBy(t, size());
    t.BumpVersion();
  });
}

std::shared_ptr<Work> GlooProcessGroup::Broadcast(Tensor t, int root) {
  Status error = CheckTensor("broadcast", t);
  if (error.ok() && (root < 0 || root >= size())) {
    error = InvalidArgumentError("broadcast: root " + std::to_string(root) +
                                 " is not a rank of this group of " + std::to_string(size()));
  }
  const std::string detail = Describe(t) + ", root " + std::to_string(root);
  const int64_t bytes = error.ok() ? t.numel() * static_cast<int64_t>(ElementSize(t.dtype())) : 0;
  const CollectiveSize sized = SizeOf(t, bytes);
  return Enqueue("broadcast", detail, sized, Peers{}, error, [=](uint32_t tag, KeepAlive& keep) {
    if (bytes == 0 || size() == 1) return;
    if (OneHost()) {
      ThrowIfFailed(shm_->Broadcast(t.raw_data(), static_cast<size_t>(bytes), root));
      t.BumpVersion();
      return;
    }
    auto opts = Keep<gloo::BroadcastOptions>(keep, context_);
    opts->setOutput(static_cast<uint8_t*>(t.raw_data()), static_cast<size_t>(bytes));
    opts->setRoot(root);
    opts->setTag(tag);
    opts->setTimeout(options_.timeout);
    gloo::broadcast(*opts);
    t.BumpVersion();
  });
}

std::shared_ptr<Work> GlooProcessGroup::AllGather(Tensor out, Tensor in) {
  Status error = CheckTensor("all_gather (out)", out);
  if (error.ok()) error = CheckTensor("all_gather (in)", in);
  if (error.ok() && (out.dtype() != in.dtype() || out.numel() != in.numel() * size())) {
    error = InvalidArgumentError("all_gather: out is " + Describe(out) + " and in is " +
                                 Describe(in) + "; out must have the dtype of in and " +
                                 std::to_string(size()) + " times its elements");
  }
  const std::string detail = Describe(in) + " per rank";
  const int64_t bytes = error.ok() ? in.numel() * static_cast<int64_t>(ElementSize(in.dtype())) : 0;
  const Peers peers{Mod(rank() - 1, size()), Mod(rank() + 1, size())};
  const CollectiveSize sized = SizeOf(in, bytes);
  return Enqueue("all_gather", detail, sized, peers, error, [=](uint32_t tag, KeepAlive& keep) {
    char* dst = static_cast<char*>(out.raw_data());
    char* mine = dst + rank() * bytes;
    if (OneHost() && bytes > 0) {
      ThrowIfFailed(shm_->AllGather(dst, in.raw_data(), static_cast<size_t>(bytes)));
    } else if (mine != in.raw_data() && bytes > 0) {
      std::memmove(mine, in.raw_data(), bytes);
    }
    if (!OneHost() && bytes > 0 && size() > 1) {
      // In place: our chunk is already in `out`.
      auto opts = Keep<gloo::AllgatherOptions>(keep, context_);
      opts->setOutput(reinterpret_cast<uint8_t*>(dst), static_cast<size_t>(bytes) * size());
      opts->setTag(tag);
      opts->setTimeout(options_.timeout);
      gloo::allgather(*opts);
    }
    out.BumpVersion();
  });
}

std::shared_ptr<Work> GlooProcessGroup::ReduceScatter(Tensor out, Tensor in, ReduceOp op) {
  Status error = CheckTensor("reduce_scatter (out)", out);
  if (error.ok()) error = CheckTensor("reduce_scatter (in)", in);
  ReduceFn fn = error.ok() ? internal::GetReduceFn(in.dtype(), op) : nullptr;
  if (error.ok() && fn == nullptr) {
    error = InvalidArgumentError(std::string("reduce_scatter: dtype ") + DTypeName(in.dtype()) +
                                 " is not supported; use float32, float64, bfloat16, float16 "
                                 "or int64");
  }
  if (error.ok() && (out.dtype() != in.dtype() || in.numel() != out.numel() * size())) {
    error = InvalidArgumentError("reduce_scatter: in is " + Describe(in) + " and out is " +
                                 Describe(out) + "; in must have the dtype of out and " +
                                 std::to_string(size()) + " times its elements");
  }
  std::string detail = Describe(in);
  if (op != ReduceOp::kSum) detail += std::string(", ") + ReduceOpName(op);
  const int64_t bytes = error.ok() ? in.numel() * static_cast<int64_t>(ElementSize(in.dtype())) : 0;
  const Peers peers{Mod(rank() - 1, size()), Mod(rank() + 1, size())};
  const CollectiveSize sized = SizeOf(in, bytes);
  return Enqueue("reduce_scatter", detail, sized, peers, error, [=](uint32_t tag, KeepAlive& keep) {
    if (out.numel() > 0 && OneHost()) {
      ThrowIfFailed(shm_->ReduceScatter(out.raw_data(), in.raw_data(),
                                        static_cast<size_t>(out.numel()), ElementSize(in.dtype()),
                                        fn));
      if (op == ReduceOp::kAverage) DivideBy(out, size());
    } else if (out.numel() > 0) {
      RingReduceScatter(out.raw_data(), in.raw_data(), static_cast<size_t>(out.numel()),
                        ElementSize(in.dtype()), fn, tag, keep);
      if (op == ReduceOp::kAverage) DivideBy(out, size());
    }
    out.BumpVersion();
  });
}

std::shared_ptr<Work> GlooProcessGroup::Barrier() {
  return Enqueue("barrier", "", {}, Peers{}, OkStatus(), [this](uint32_t tag, KeepAlive& keep) {
    if (size() == 1) return;
    if (OneHost()) {
      ThrowIfFailed(shm_->Barrier());
      return;
    }
    auto opts = Keep<gloo::BarrierOptions>(keep, context_);
    opts->setTag(tag);
    opts->setTimeout(options_.timeout);
    gloo::barrier(*opts);
  });
}

std::shared_ptr<Work> GlooProcessGroup::Send(Tensor t, int peer) {
  return PointToPoint("send", std::move(t), peer, /*sending=*/true);
}

std::shared_ptr<Work> GlooProcessGroup::Recv(Tensor t, int peer) {
  return PointToPoint("recv", std::move(t), peer, /*sending=*/false);
}

std::shared_ptr<Work> GlooProcessGroup::PointToPoint(const char* what, Tensor t, int peer,
                                                     bool sending) {
  Status error = CheckTensor(what, t);
  if (error.ok()) error = CheckPeer(what, peer);
  const std::string detail =
      Describe(t) + (sending ? ", to rank " : ", from rank ") + std::to_string(peer);
  const int64_t bytes = error.ok() ? t.numel() * static_cast<int64_t>(ElementSize(t.dtype())) : 0;
  const Peers peers = sending ? Peers{-1, peer} : Peers{peer, -1};
  return Enqueue(what, detail, SizeOf(t, bytes), peers, error, [=](uint32_t tag, KeepAlive& keep) {
    if (bytes == 0) return;
    if (OneHost()) {  // a pair's broadcast is a send
      ThrowIfFailed(
          shm_->Broadcast(t.raw_data(), static_cast<size_t>(bytes), sending ? rank() : peer));
    } else {
      auto* buffer = KeepBuffer(keep, t.raw_data(), static_cast<size_t>(bytes));
      const uint64_t slot = gloo::Slot::build(kPointToPointSlotPrefix, tag);
      if (sending) {
        buffer->send(peer, slot);
        if (!buffer->waitSend(options_.timeout)) throw gloo::IoException("send operation aborted");
      } else {
        buffer->recv(peer, slot);
        if (!buffer->waitRecv(options_.timeout)) throw gloo::IoException("recv operation aborted");
      }
    }
    if (!sending) t.BumpVersion();
  });
}

gloo::transport::UnboundBuffer* GlooProcessGroup::KeepBuffer(KeepAlive& keep, void* ptr,
                                                             size_t bytes) {
  std::shared_ptr<gloo::transport::UnboundBuffer> buffer =
      context_->createUnboundBuffer(ptr, bytes);
  keep.push_back(buffer);
  return buffer.get();
}

void GlooProcessGroup::PairExchangeAllReduce(void* data, size_t elems, size_t elem_size,
                                             ReduceFn reduce, uint32_t tag, KeepAlive& keep) {
  // Note [Gloo algorithms]. data: (elems), in place; at most kExchangeMaxBytes.
  const int peer = 1 - rank();
  const size_t bytes = elems * elem_size;
  const size_t segment = std::max(elem_size, kExchangeSegmentBytes / elem_size * elem_size);
  const size_t segments = (bytes + segment - 1) / segment;
  auto length = [&](size_t k) { return std::min(segment, bytes - k * segment); };
  char* copy = Keep<std::vector<char>>(keep, bytes)->data();
  auto* mine = KeepBuffer(keep, data, bytes);
  auto* theirs = KeepBuffer(keep, copy, bytes);
  const uint64_t slot = gloo::Slot::build(kExchangeSlotPrefix, tag);
  for (size_t k = 0; k < segments; ++k) {
    theirs->recv(peer, slot, k * segment, length(k));
    mine->send(peer, slot, k * segment, length(k));
  }
  // Sends and receives on one pair and slot complete in order, so the k-th wait is segment k;
  // segment k of `data` is overwritten only once it has been sent.
  for (size_t k = 0; k < segments; ++k) {
    if (!theirs->waitRecv(options_.timeout)) throw gloo::IoException("recv operation aborted");
    if (!mine->waitSend(options_.timeout)) throw gloo::IoException("send operation aborted");
    char* out = static_cast<char*>(data) + k * segment;
    reduce(out, out, copy + k * segment, length(k) / elem_size);
  }
}

}  // namespace trainyard::dist