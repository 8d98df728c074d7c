// ShmComm's waits and collectives (shm_comm.h); the segment is made in shm_segment.cc.
//
// Note [Shared-memory collectives]
// The segment holds a header and, per rank, two buffers of kShmBufferBytes. A collective is a
// sequence of rounds; round k uses every rank's buffer k % 2. In a round a rank copies its part
// into its own buffer, arrives (stores the next value of its generation counter, release), waits
// until the ranks it reads have arrived at that generation (acquire), and reads their buffers:
//   all_reduce      per 1 MiB chunk, cut into one slice per rank: copy in every slice but one's
//                   own; arrive, wait all; reduce one's own slice from the peers' buffers and
//                   one's own tensor, in rank order, into one's buffer and tensor; arrive, wait
//                   all; copy the peers' slices out. Each element is reduced once, by one rank,
//                   so all ranks hold the same bits. Per rank and byte, with n ranks: (n-1)/n
//                   copied in, (n-1)/n copied out, 1/n reduced.
//   reduce_scatter  per piece: copy in all n chunks' pieces; arrive, wait all; reduce this
//                   rank's chunk straight into `out`.
//   all_gather      per piece: copy in; arrive, wait all; copy every rank's piece out.
//   broadcast       per piece: the root copies in and arrives; the others wait for the root and
//                   copy out.
//   barrier         arrive, wait all.
// Reads of round k happen after the reader's arrival at some generation g and before its next
// arrival, so a writer reuses its buffer k % 2 in round k + 2 only once every peer has arrived
// past the last generation of round k (free_at_); in the all-reduce that wait has always been
// satisfied already, in a broadcast the root may wait.
//
// Waiting: spin for up to kSpinNanos on the peer's counter (a rank on another core arrives
// within microseconds: a 4-byte all-reduce is a few of them), yielding the core after
// kYieldAfterNanos (when the peer shares this core, it runs at once instead of after our whole
// spin: a 4-byte all-reduce of two ranks pinned to one core took 134 us, now 30), then sleep on
// a futex over the header's epoch, which every arrival bumps (and wakes only when someone
// sleeps). Sleeps last at most kSliceMillis, so every slice checks the deadline, this process's
// abort, the segment's broken flag and whether the awaited peer's process still exists. A
// failing rank breaks the segment (Break), so the others fail at once instead of at their
// timeout.
#include <linux/futex.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <thread>

#include "worker/dist/shm_internal.h"

namespace trainyard::dist::internal {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kSpinNanos = 50'000;
constexpr int64_t kYieldAfterNanos = 2'000;
constexpr int kSliceMillis = 20;
// Reductions walk every buffer's slice in blocks this long, so the output stays in cache.
constexpr size_t kReduceBlockBytes = 32 << 10;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, int millis) {
  timespec ts{0, static_cast<long>(millis) * 1'000'000L};
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void FutexWakeAll(std::atomic<uint32_t>* word) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr,
            0);
}

// Whether process `pid` is gone (a zombie counts as gone). pid 0: not known yet, so alive.
bool ProcessGone(int32_t pid) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  if (paren == std::string::npos || paren + 2 >= text.size()) return false;
  const char state = text[paren + 2];
  return state == 'Z' || state == 'X';
}

// [lo, hi) of `count` elements for slice `r` of `n`, cut at 64-byte boundaries.
std::pair<size_t, size_t> Slice(size_t count, size_t elem, int r, int n) {
  const size_t unit = std::max<size_t>(1, 64 / elem);
  const size_t units = (count + unit - 1) / unit;
  const size_t lo = std::min(count, units * r / n * unit);
  const size_t hi = std::min(count, units * (r + 1) / n * unit);
  return {lo, hi};
}

}  // namespace

// ---- Waiting ----

char* ShmComm::Buffer(int r) const {
  const size_t parity = (rounds_ - 1) % 2;
  return static_cast<char*>(base_) + kShmDataOffset + (r * 2 + parity) * kShmBufferBytes;
}

Status ShmComm::BeginRound() {
  const size_t parity = rounds_ % 2;
  ++rounds_;
  return WaitAll(free_at_[parity]);
}

void ShmComm::EndRound() { free_at_[(rounds_ - 1) % 2] = gen_ + 1; }

uint64_t ShmComm::Arrive() {
  header_->slots[me_].gen.store(++gen_, std::memory_order_seq_cst);
  header_->epoch.fetch_add(1, std::memory_order_seq_cst);
  if (header_->sleepers.load(std::memory_order_seq_cst) > 0) FutexWakeAll(&header_->epoch);
  return gen_;
}

Status ShmComm::Failure(int r) const {
  if (header_->broken.load(std::memory_order_acquire) != 0) {
    while (header_->broken.load(std::memory_order_acquire) != 2) CpuRelax();
    const auto code = static_cast<StatusCode>(header_->code);
    const std::string why(header_->why);
    return Status(code == StatusCode::kAborted ? StatusCode::kUnavailable : code,
                  why + " (noticed by rank " + std::to_string(header_->broken_by) + ")");
  }
  if (aborted_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(abort_mu_);
    return AbortedError("aborted: " + abort_why_);
  }
  const int32_t pid = header_->slots[r].pid;
  if (ProcessGone(pid)) {
    return UnavailableError("rank " + std::to_string(ranks_[r]) + " (pid " + std::to_string(pid) +
                            ") exited (shared memory)");
  }
  return OkStatus();
}

Status ShmComm::WaitRank(int r, uint64_t gen) {
  const std::atomic<uint64_t>& theirs = header_->slots[r].gen;
  if (theirs.load(std::memory_order_acquire) >= gen) return OkStatus();
  const Clock::time_point start = Clock::now();
  for (int i = 0;; ++i) {
    if (theirs.load(std::memory_order_acquire) >= gen) return OkStatus();
    CpuRelax();
    if (i % 64 != 63) continue;
    const auto spun = Clock::now() - start;
    if (spun > std::chrono::nanoseconds(kSpinNanos)) break;
    if (spun > std::chrono::nanoseconds(kYieldAfterNanos)) std::this_thread::yield();
  }
  const Clock::time_point deadline = start + timeout_;
  while (true) {
    header_->sleepers.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t epoch = header_->epoch.load(std::memory_order_seq_cst);
    const bool arrived = theirs.load(std::memory_order_seq_cst) >= gen;
    if (!arrived) FutexWait(&header_->epoch, epoch, kSliceMillis);
    header_->sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (arrived || theirs.load(std::memory_order_acquire) >= gen) return OkStatus();
    RETURN_IF_ERROR(Failure(r));
    if (Clock::now() >= deadline) {
      return DeadlineExceededError("timed out after " + FormatDuration(timeout_) +
                                   " waiting for rank " + std::to_string(ranks_[r]) +
                                   " (shared memory)");
    }
  }
}

Status ShmComm::WaitAll(uint64_t gen) {
  for (int r = 0; r < size(); ++r) {
    if (r != me_) RETURN_IF_ERROR(WaitRank(r, gen));
  }
  return OkStatus();
}

void ShmComm::Break(const Status& why) {
  uint32_t expected = 0;
  if (header_->broken.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    header_->broken_by = ranks_[me_];
    header_->code = static_cast<int32_t>(why.code());
    std::strncpy(header_->why, why.message().c_str(), sizeof(header_->why) - 1);
    header_->broken.store(2, std::memory_order_release);
  }
  header_->epoch.fetch_add(1, std::memory_order_seq_cst);
  FutexWakeAll(&header_->epoch);
}

void ShmComm::Abort(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(abort_mu_);
    if (aborted_.load(std::memory_order_relaxed)) return;
    abort_why_ = why;
  }
  aborted_.store(true, std::memory_order_release);
  FutexWakeAll(&header_->epoch);
}

// ---- Collectives ----

Status ShmComm::AllReduce(void* data, size_t count, size_t elem, ReduceFn reduce) {
  char* p = static_cast<char*>(data);
  const size_t per_round = kShmBufferBytes / elem;
  const size_t block = std::max<size_t>(1, kReduceBlockBytes / elem);
  for (size_t off = 0; off < count; off += per_round) {
    const size_t n = std::min(per_round, count - off);
    char* chunk = p + off * elem;
    RETURN_IF_ERROR(BeginRound());
    // Peers need every slice of ours but our own, which we read from `data`.
    for (int r = 0; r < size(); ++r) {
      const auto [rlo, rhi] = Slice(n, elem, r, size());
      if (r != me_) std::memcpy(Buffer(me_) + rlo * elem, chunk + rlo * elem, (rhi - rlo) * elem);
    }
    RETURN_IF_ERROR(WaitAll(Arrive()));
    // Our slice, summed in rank order into our buffer (which holds none of the inputs there).
    const auto [lo, hi] = Slice(n, elem, me_, size());
    auto source = [&](int r, size_t b) { return (r == me_ ? chunk : Buffer(r)) + b * elem; };
    char* mine = Buffer(me_);
    for (size_t b = lo; b < hi; b += block) {
      const size_t len = std::min(block, hi - b);
      reduce(mine + b * elem, source(0, b), source(1, b), len);
      for (int r = 2; r < size(); ++r) reduce(mine + b * elem, mine + b * elem, source(r, b), len);
      std::memcpy(chunk + b * elem, mine + b * elem, len * elem);
    }
    RETURN_IF_ERROR(WaitAll(Arrive()));
    for (int r = 0; r < size(); ++r) {
      const auto [rlo, rhi] = Slice(n, elem, r, size());
      if (r != me_) std::memcpy(chunk + rlo * elem, Buffer(r) + rlo * elem, (rhi - rlo) * elem);
    }
    EndRound();
  }
  return OkStatus();
}

std::pair<size_t, size_t> ShmComm::SliceOf(size_t count, size_t elem, int r) const {
  return Slice(count, elem, r, size());
}

Status ShmComm::ReduceSlices(void* data, size_t count, size_t elem, ReduceFn reduce) {
  // Round k takes piece k (at most `each` elements) of every rank's slice; peer r's piece goes to
  // place r of this rank's buffer, and this rank sums its own piece at its own place.
  char* p = static_cast<char*>(data);
  const size_t each = std::max<size_t>(1, kShmBufferBytes / elem / size());
  size_t longest = 0;
  for (int r = 0; r < size(); ++r) {
    const auto [lo, hi] = SliceOf(count, elem, r);
    longest = std::max(longest, hi - lo);
  }
  auto piece = [&](int r, size_t k) {
    const auto [lo, hi] = SliceOf(count, elem, r);
    const size_t first = std::min(hi, lo + k * each);
    return std::pair<size_t, size_t>(first, std::min(hi, first + each));
  };
  for (size_t k = 0; k * each < longest; ++k) {
    RETURN_IF_ERROR(BeginRound());
    for (int r = 0; r < size(); ++r) {
      const auto [first, last] = piece(r, k);
      if (r != me_)
        std::memcpy(Buffer(me_) + r * each * elem, p + first * elem, (last - first) * elem);
    }
    RETURN_IF_ERROR(WaitAll(Arrive()));
    const auto [first, last] = piece(me_, k);
    auto source = [&](int r) {
      return r == me_ ? p + first * elem : Buffer(r) + me_ * each * elem;
    };
    char* sum = Buffer(me_) + me_ * each * elem;
    if (last > first) {
      reduce(sum, source(0), source(1), last - first);
      for (int r = 2; r < size(); ++r) reduce(sum, sum, source(r), last - first);
      std::memcpy(p + first * elem, sum, (last - first) * elem);
    }
    EndRound();
  }
  return OkStatus();
}

Status ShmComm::GatherSlices(void* data, size_t count, size_t elem) {
  char* p = static_cast<char*>(data);
  const size_t each = kShmBufferBytes / elem;
  size_t longest = 0;
  for (int r = 0; r < size(); ++r) {
    const auto [lo, hi] = SliceOf(count, elem, r);
    longest = std::max(longest, hi - lo);
  }
  for (size_t k = 0; k * each < longest; ++k) {
    RETURN_IF_ERROR(BeginRound());
    const auto [lo, hi] = SliceOf(count, elem, me_);
    const size_t first = std::min(hi, lo + k * each), last = std::min(hi, first + each);
    std::memcpy(Buffer(me_), p + first * elem, (last - first) * elem);
    RETURN_IF_ERROR(WaitAll(Arrive()));
    for (int r = 0; r < size(); ++r) {
      if (r == me_) continue;
      const auto [rlo, rhi] = SliceOf(count, elem, r);
      const size_t rfirst = std::min(rhi, rlo + k * each), rlast = std::min(rhi, rfirst + each);
      std::memcpy(p + rfirst * elem, Buffer(r), (rlast - rfirst) * elem);
    }
    EndRound();
  }
  return OkStatus();
}

Status ShmComm::ReduceScatter(void* out, const void* in, size_t count, size_t elem,
                              ReduceFn reduce) {
  char* o = static_cast<char*>(out);
  const char* src = static_cast<const char*>(in);
  const size_t per_round = std::max<size_t>(1, kShmBufferBytes / elem / size());
  for (size_t off = 0; off < count; off += per_round) {
    const size_t n = std::min(per_round, count - off);
    RETURN_IF_ERROR(BeginRound());
    for (int c = 0; c < size(); ++c) {
      std::memcpy(Buffer(me_) + c * n * elem, src + (c * count + off) * elem, n * elem);
    }
    RETURN_IF_ERROR(WaitAll(Arrive()));
    const size_t at = me_ * n * elem;
    reduce(o + off * elem, Buffer(0) + at, Buffer(1) + at, n);
    for (int r = 2; r < size(); ++r) reduce(o + off * elem, o + off * elem, Buffer(r) + at, n);
    EndRound();
  }
  return OkStatus();
}

Status ShmComm::AllGather(void* out, const void* in, size_t bytes) {
  char* o = static_cast<char*>(out);
  const char* src = static_cast<const char*>(in);
  for (size_t off = 0; off < bytes; off += kShmBufferBytes) {
    const size_t n = std::min(kShmBufferBytes, bytes - off);
    RETURN_IF_ERROR(BeginRound());
    std::memcpy(Buffer(me_), src + off, n);
    RETURN_IF_ERROR(WaitAll(Arrive()));
    for (int r = 0; r < size(); ++r) std::memcpy(o + r * bytes + off, Buffer(r), n);
    EndRound();
  }
  return OkStatus();
}

Status ShmComm::Broadcast(void* data, size_t bytes, int root_local) {
  char* p = static_cast<char*>(data);
  for (size_t off = 0; off < bytes; off += kShmBufferBytes) {
    const size_t n = std::min(kShmBufferBytes, bytes - off);
    if (me_ == root_local) {
      RETURN_IF_ERROR(BeginRound());
      std::memcpy(Buffer(me_), p + off, n);
      Arrive();
    } else {
      ++rounds_;  // only the root's buffer is written; its wait keeps the parities in step
      RETURN_IF_ERROR(WaitRank(root_local, Arrive()));
      std::memcpy(p + off, Buffer(root_local), n);
    }
    EndRound();
  }
  return OkStatus();
}

Status ShmComm::Barrier() { return WaitAll(Arrive()); }

}  // namespace trainyard::dist::internal
