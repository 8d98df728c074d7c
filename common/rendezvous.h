// Rendezvous: the key-value store the ranks of one run meet through (Gloo's addresses, NCCL's
// unique id, start-up barriers), dist::Store's four operations. The one store core: the
// coordinator serves it over gRPC (the Worker service's Store* calls, one scope per job
// attempt, guarded by the attempt's secret) and `trainyard train --nproc` over TCP
// (worker/dist/tcp_store_server.cc, one scope). Thread-safe; waits are bounded by the
// caller's timeout.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"

namespace trainyard {

class Rendezvous {
 public:
  struct Scope {
    std::string job_id;
    int attempt = 0;
    std::string secret;
  };

  void Open(const Scope& scope);
  // Drops the scope's keys and wakes its waiters (who get NotFound).
  void Close(const std::string& job_id, int attempt);

  // NotFound when the attempt is not open (over, or never started); PermissionDenied for a
  // wrong secret; InvalidArgument for a key or value over the limits below.
  Status Set(const Scope& scope, const std::string& key, const std::string& value);
  StatusOr<std::string> Get(const Scope& scope, const std::string& key,
                            std::chrono::milliseconds timeout);
  // Waits until every key is set; DeadlineExceeded naming the keys still missing, which are
  // also left in `missing` when it is given.
  Status Wait(const Scope& scope, const std::vector<std::string>& keys,
              std::chrono::milliseconds timeout, std::vector<std::string>* missing = nullptr);
  // Adds `delta` to the integer in `key` (absent: 0) and returns the sum; FailedPrecondition
  // when the key holds no int64, InvalidArgument (the value unchanged) when the sum would not
  // fit in one.
  StatusOr<int64_t> Add(const Scope& scope, const std::string& key, int64_t delta);

  static constexpr size_t kMaxKeyBytes = 1024;
  static constexpr size_t kMaxValueBytes = 1 << 20;
  static constexpr size_t kMaxKeys = 100000;  // per attempt

 private:
  struct Space {
    std::string secret;
    std::map<std::string, std::string> values;
  };
  using Key = std::pair<std::string, int>;
  // The open space of `scope` after checking its secret; mu_ held.
  StatusOr<Space*> Find(const Scope& scope);
  Status CheckSize(const std::string& key, size_t value_bytes) const;

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<Key, Space> spaces_;
};

}  // namespace trainyard
