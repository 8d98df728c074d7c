#include "common/rendezvous.h"

#include <cerrno>
#include <cstdlib>

namespace trainyard {
namespace {

std::string Quote(const std::string& key) { return "\"" + key + "\""; }

}  // namespace

void Rendezvous::Open(const Scope& scope) {
  std::lock_guard<std::mutex> lock(mu_);
  spaces_[{scope.job_id, scope.attempt}].secret = scope.secret;
}

void Rendezvous::Close(const std::string& job_id, int attempt) {
  std::lock_guard<std::mutex> lock(mu_);
  spaces_.erase({job_id, attempt});
  cv_.notify_all();
}

StatusOr<Rendezvous::Space*> Rendezvous::Find(const Scope& scope) {
  auto it = spaces_.find({scope.job_id, scope.attempt});
  const std::string name = "job " + scope.job_id + " attempt " + std::to_string(scope.attempt);
  if (it == spaces_.end()) return NotFoundError("rendezvous of " + name + " is not open (over?)");
  if (it->second.secret != scope.secret) {
    return Status(StatusCode::kPermissionDenied, "wrong rendezvous secret for " + name);
  }
  return &it->second;
}

Status Rendezvous::CheckSize(const std::string& key, size_t value_bytes) const {
  if (key.empty() || key.size() > kMaxKeyBytes) {
    return InvalidArgumentError("rendezvous key of " + std::to_string(key.size()) +
                                " bytes: must be 1 to " + std::to_string(kMaxKeyBytes));
  }
  if (value_bytes > kMaxValueBytes) {
    return InvalidArgumentError("rendezvous value of " + std::to_string(value_bytes) +
                                " bytes for key " + Quote(key) + ": at most " +
                                std::to_string(kMaxValueBytes));
  }
  return OkStatus();
}

Status Rendezvous::Set(const Scope& scope, const std::string& key, const std::string& value) {
  RETURN_IF_ERROR(CheckSize(key, value.size()));
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(Space * space, Find(scope));
  if (space->values.size() >= kMaxKeys && space->values.count(key) == 0) {
    return ResourceExhaustedError("rendezvous of job " + scope.job_id + " holds " +
                                  std::to_string(kMaxKeys) + " keys, the most it may");
  }
  space->values[key] = value;
  cv_.notify_all();
  return OkStatus();
}

StatusOr<std::string> Rendezvous::Get(const Scope& scope, const std::string& key,
                                      std::chrono::milliseconds timeout) {
  RETURN_IF_ERROR(CheckSize(key, 0));
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    ASSIGN_OR_RETURN(Space * space, Find(scope));
    auto it = space->values.find(key);
    if (it != space->values.end()) return it->second;
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout) {
      ASSIGN_OR_RETURN(space, Find(scope));
      it = space->values.find(key);
      if (it != space->values.end()) return it->second;
      return DeadlineExceededError("rendezvous key " + Quote(key) + " not set within " +
                                   std::to_string(timeout.count()) + " ms");
    }
  }
}

Status Rendezvous::Wait(const Scope& scope, const std::vector<std::string>& keys,
                        std::chrono::milliseconds timeout, std::vector<std::string>* missing_keys) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    ASSIGN_OR_RETURN(Space * space, Find(scope));
    std::string missing;
    if (missing_keys) missing_keys->clear();
    for (const std::string& k : keys) {
      if (space->values.count(k) != 0) continue;
      missing += (missing.empty() ? "" : ", ") + Quote(k);
      if (missing_keys) missing_keys->push_back(k);
    }
    if (missing.empty()) return OkStatus();
    if (std::chrono::steady_clock::now() >= deadline) {
      return DeadlineExceededError("rendezvous keys not set within " +
                                   std::to_string(timeout.count()) + " ms: " + missing);
    }
    cv_.wait_until(lock, deadline);  // then look again, whether woken or timed out
  }
}

StatusOr<int64_t> Rendezvous::Add(const Scope& scope, const std::string& key, int64_t delta) {
  RETURN_IF_ERROR(CheckSize(key, 0));
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(Space * space, Find(scope));
  if (space->values.size() >= kMaxKeys && space->values.count(key) == 0) {
    return ResourceExhaustedError("rendezvous of job " + scope.job_id + " holds " +
                                  std::to_string(kMaxKeys) + " keys, the most it may");
  }
  std::string& v = space->values[key];
  int64_t n = 0;
  if (!v.empty()) {
    char* end = nullptr;
    errno = 0;
    n = std::strtoll(v.c_str(), &end, 10);
    if (*end != '\0' || errno == ERANGE) {
      return FailedPreconditionError("rendezvous key " + Quote(key) +
                                     " holds a value that is not an integer");
    }
  }
  int64_t sum = 0;
  if (__builtin_add_overflow(n, delta, &sum)) {
    return InvalidArgumentError("rendezvous key " + Quote(key) + " holds " + std::to_string(n) +
                                "; adding " + std::to_string(delta) +
                                " would overflow a 64-bit integer; use a new key");
  }
  v = std::to_string(sum);
  cv_.notify_all();
  return sum;
}

}  // namespace trainyard
