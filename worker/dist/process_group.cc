#include "worker/dist/process_group.h"

#include <signal.h>

#include <cerrno>
#include <filesystem>
#include <thread>

#include "worker/dist/nccl_loader.h"

#ifdef TY_HAVE_GLOO
#include "worker/dist/gloo_process_group.h"
#endif

namespace trainyard::dist {

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAverage:
      return "average";
    case ReduceOp::kMax:
      return "max";
  }
  return "unknown";
}

Status Work::Wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [this] { return done_; })) {
    return DeadlineExceededError(name_ + ": not completed after " + FormatDuration(timeout) +
                                 " of waiting");
  }
  return status_;
}

bool Work::IsCompleted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

Work::TimePoint Work::start_time() const {
  std::lock_guard<std::mutex> lock(mu_);
  return start_;
}

Work::TimePoint Work::end_time() const {
  std::lock_guard<std::mutex> lock(mu_);
  return end_;
}

void Work::MarkStarted() { MarkStarted(std::chrono::steady_clock::now()); }

void Work::MarkStarted(TimePoint at) {
  std::lock_guard<std::mutex> lock(mu_);
  start_ = at;
}

void Work::Abort(Status status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    aborted_ = true;
    end_ = std::chrono::steady_clock::now();
    if (start_ == TimePoint{}) start_ = end_;
    status_ = std::move(status);
    done_ = true;
  }
  cv_.notify_all();
}

void RetireProcessGroup(std::shared_ptr<ProcessGroup> group) {
  if (group == nullptr) return;
  std::thread([g = std::move(group)]() mutable { g.reset(); }).detach();
}

void Work::Finish(Status status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_) return;  // Abort answered the waiters already
    TY_CHECK(!done_) << name_ << " finished twice";
    end_ = std::chrono::steady_clock::now();
    if (start_ == TimePoint{}) start_ = end_;  // never ran (cancelled, aborted, invalid)
    status_ = std::move(status);
    done_ = true;
  }
  cv_.notify_all();
}

StatusOr<std::unique_ptr<ProcessGroup>> CreateProcessGroup(const std::string& backend,
                                                           std::shared_ptr<Store> store, int rank,
                                                           int size, ProcessGroupOptions options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return InvalidArgumentError("process group: rank " + std::to_string(rank) + " of size " +
                                std::to_string(size) +
                                " is out of range; size must be at least 1 and 0 <= rank < size");
  }
  if (store == nullptr) return InvalidArgumentError("process group: the store is null");
  if (options.timeout.count() <= 0) {
    return InvalidArgumentError("process group: timeout is " + FormatDuration(options.timeout) +
                                "; it must be positive");
  }
  if (backend == "gloo") {
#ifdef TY_HAVE_GLOO
    ASSIGN_OR_RETURN(auto group, GlooProcessGroup::Create(std::move(store), rank, size, options));
    return std::unique_ptr<ProcessGroup>(std::move(group));
#else
    return UnimplementedError(
        "process group backend \"gloo\" is not available: this build has no Gloo (install "
        "libgloo-dev and reconfigure)");
#endif
  }
  if (backend == "nccl") return LoadNcclProcessGroup(std::move(store), rank, size, options);
  return InvalidArgumentError("process group backend \"" + backend +
                              "\" is unknown; it must be \"gloo\" or \"nccl\"");
}

Status JoinGroup(Store& store, const std::string& backend, int rank, int size,
                 std::chrono::milliseconds timeout) {
  const std::string who = backend + ": rank " + std::to_string(rank);
  const std::string prefix = backend + "/joined/";
  RETURN_IF_ERROR(store.Set(prefix + std::to_string(rank), "1").WithContext(who + " joining"));
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(prefix + std::to_string(r));
  Status st = store.Wait(keys, timeout);
  if (st.code() != StatusCode::kDeadlineExceeded)
    return st.WithContext(who + " waiting for the group");
  std::string missing;
  int count = 0;
  for (int r = 0; r < size; ++r) {
    if (store.Get(keys[r], std::chrono::milliseconds(0)).ok()) continue;
    missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    ++count;
  }
  return DeadlineExceededError(
      backend + ": rank" + (count == 1 ? " " : "s ") + missing + " never joined the group of " +
      std::to_string(size) + " within " + FormatDuration(timeout) + " (seen from rank " +
      std::to_string(rank) + "); check that every rank started and uses the same store");
}

Status WaitFor(const ProcessGroup& group, Work& work) {
  const auto timeout = group.timeout();
  return work.Wait(timeout + timeout / 4 + std::chrono::seconds(1));
}

Status ProcessGroup::CheckPeer(const char* op, int peer) const {
  if (size() == 2 && peer == 1 - rank()) return OkStatus();
  return InvalidArgumentError(std::string(op) + ": peer " + std::to_string(peer) + " of rank " +
                              std::to_string(rank()) + " in a group of " + std::to_string(size()) +
                              "; point-to-point ops take a group of two and its other rank");
}

namespace {

// A broadcast rooted at the sender, or a Work failed at once with `error`.
std::shared_ptr<Work> PairBroadcast(ProcessGroup& group, const Tensor& t, int root,
                                    const Status& error, const char* op) {
  if (error.ok()) return group.Broadcast(t, root);
  auto failed = std::make_shared<Work>(std::string(op));
  failed->Finish(error);
  return failed;
}

}  // namespace

std::shared_ptr<Work> ProcessGroup::Send(Tensor t, int peer) {
  return PairBroadcast(*this, t, rank(), CheckPeer("send", peer), "send");
}

std::shared_ptr<Work> ProcessGroup::Recv(Tensor t, int peer) {
  return PairBroadcast(*this, t, peer, CheckPeer("recv", peer), "recv");
}

Status AllReduceHost(ProcessGroup& group, const Tensor& host, ReduceOp op, Device device) {
  TY_CHECK(host.device().is_cpu() && host.is_contiguous())
      << "AllReduceHost takes a contiguous CPU tensor";
  const Tensor t = device.is_cpu() ? host : CopyToDevice(host, device);
  std::shared_ptr<Work> work = group.AllReduce(t, op);
  RETURN_IF_ERROR(WaitFor(group, *work));
  if (!device.is_cpu()) CopyInto(host, t);
  return OkStatus();
}

int RemoveOrphanedSegments(const std::string& dir) {
  int removed = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("trainyard-", 0) != 0) continue;
    const size_t last = name.rfind('-');
    const size_t before = last == std::string::npos ? last : name.rfind('-', last - 1);
    if (before == std::string::npos || before < 9) continue;
    const std::string pid = name.substr(before + 1, last - before - 1);
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    if (::kill(static_cast<pid_t>(std::stol(pid)), 0) == 0 || errno != ESRCH) continue;
    if (std::filesystem::remove(entry.path(), ec)) ++removed;
  }
  return removed;
}

}  // namespace trainyard::dist
