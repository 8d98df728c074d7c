#include "worker/daemon/rank_regroup.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "common/json.h"

namespace trainyard::daemon {

RankGroup::RankGroup(GroupPlace place, int fd, std::chrono::milliseconds wait)
    : fd_(fd), wait_(wait), place_(std::move(place)) {
  if (fd_ >= 0) reader_ = std::thread([this] { ReadCommands(); });
}

RankGroup::~RankGroup() {
  stop_ = true;
  if (reader_.joinable()) reader_.join();
}

std::shared_ptr<dist::ProcessGroup> RankGroup::group() const {
  std::lock_guard<std::mutex> lock(mu_);
  return group_;
}

void RankGroup::SetGroup(std::shared_ptr<dist::ProcessGroup> group) {
  std::lock_guard<std::mutex> lock(mu_);
  group_ = std::move(group);
}

GroupPlace RankGroup::place() const {
  std::lock_guard<std::mutex> lock(mu_);
  return place_;
}

int RankGroup::group_attempt() const {
  std::lock_guard<std::mutex> lock(mu_);
  return regrouping_ ? left_ : place_.attempt;
}

bool RankGroup::Superseded(int attempt) const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_.has_value() && pending_->attempt > attempt;
}

bool RankGroup::regrouping(std::string* why) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (why != nullptr) *why = why_;
  return regrouping_;
}

// Polls (100 ms at a time, to see stop_) and splits lines; ends at EOF (the daemon is gone).
void RankGroup::ReadCommands() {
  std::string partial;
  char buf[4096];
  while (!stop_) {
    pollfd p{fd_, POLLIN, 0};
    const int ready = ::poll(&p, 1, 100);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      if (ready < 0) return;
      continue;
    }
    const ssize_t n = ::read(fd_, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    partial.append(buf, static_cast<size_t>(n));
    for (size_t nl; (nl = partial.find('\n')) != std::string::npos;) {
      OnCommand(partial.substr(0, nl));
      partial.erase(0, nl + 1);
    }
  }
}

void RankGroup::OnCommand(const std::string& line) {
  StatusOr<Json> json = Json::Parse(line);
  if (!json.ok() || !json->is_object()) return;
  auto integer = [&](const char* key) -> int64_t {
    const Json* v = json->Find(key);
    return v && v->is_integer() ? v->int_value() : -1;
  };
  const Json* type = json->Find("type");
  const Json* secret = json->Find("secret");
  const Json* boundary = json->Find("at_step_boundary");
  if (!type || !type->is_string() || type->string_value() != "regroup" || !secret ||
      !secret->is_string()) {
    return;
  }
  GroupPlace next{static_cast<int>(integer("attempt")), secret->string_value(),
                  static_cast<int>(integer("rank")), static_cast<int>(integer("world_size"))};
  const bool at_boundary = boundary && boundary->is_bool() && boundary->bool_value();
  std::shared_ptr<dist::ProcessGroup> abort;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (next.attempt <= place_.attempt || next.rank < 0 || next.world_size < 1) return;
    pending_ = next;
    if (!at_boundary) abort = group_;
    cv_.notify_all();
  }
  std::fprintf(stderr, "rank %d: regroup into attempt %d as rank %d of %d%s\n", place().rank,
               next.attempt, next.rank, next.world_size,
               at_boundary ? " at the next step boundary" : ", now");
  if (at_boundary) {
    requested_ = true;
  } else if (abort) {
    abort->Abort(AbortedError("the coordinator regrouped the job into attempt " +
                              std::to_string(next.attempt) + " (a member was lost)"));
    dist::RetireProcessGroup(std::move(abort));
  }
}

StatusOr<GroupPlace> RankGroup::Leave(const Status& why, int after) {
  std::unique_lock<std::mutex> lock(mu_);
  regrouping_ = true;
  why_ = why.ok() ? "" : std::string(why.message());
  const int from = place_.attempt;
  left_ = std::max(place_.attempt, after);
  const bool got = cv_.wait_for(lock, wait_, [&] {
    return pending_.has_value() && pending_->attempt > std::max(place_.attempt, after);
  });
  if (!got) {
    return DeadlineExceededError(
        "rank " + std::to_string(place_.rank) + " of attempt " + std::to_string(from) + " waited " +
        std::to_string(wait_.count() / 1000) +
        " s for the coordinator's regroup (a Regroup command from its worker) after leaving its "
        "group" +
        (why_.empty() ? "" : " (" + why_ + ")") + "; none came");
  }
  requested_ = false;
  GroupPlace next = *pending_;
  return next;
}

void RankGroup::Joined(GroupPlace place, std::shared_ptr<dist::ProcessGroup> group) {
  std::shared_ptr<dist::ProcessGroup> old;
  {
    std::lock_guard<std::mutex> lock(mu_);
    old = std::move(group_);
    group_ = std::move(group);
    place_ = std::move(place);
    if (pending_ && pending_->attempt <= place_.attempt) pending_.reset();
    regrouping_ = false;
    why_.clear();
  }
  dist::RetireProcessGroup(std::move(old));
}

}  // namespace trainyard::daemon
