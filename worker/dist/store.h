// Store: the small key-value store ranks rendezvous through (addresses, NCCL's unique id,
// barriers at start-up). Keys are strings, values bytes. Every wait is bounded.
//
//   TcpStoreServer + TcpStore  one process serves, every rank connects over TCP (what
//                              `trainyard train --nproc N` uses; the launcher serves)
//   PrefixStore                scopes another store to "job/<id>/attempt/<n>/" so two attempts
//                              of one job never read each other's keys
//
// Both servers of a store, TcpStoreServer and the coordinator's (reached over gRPC by ranks
// under a worker daemon, worker/daemon/grpc_store.h), serve the one store core,
// common/rendezvous.h: the same limits, errors and waits.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace trainyard::dist {

class Store {
 public:
  virtual ~Store() = default;

  // Sets `key` to `value`, replacing any earlier value.
  virtual Status Set(const std::string& key, const std::string& value) = 0;
  // The value of `key`, waiting up to `timeout` for it to be set; DeadlineExceeded naming the
  // key after that, Unavailable when the store cannot be reached.
  virtual StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Waits until every key is set; DeadlineExceeded naming the keys still missing.
  virtual Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  // Atomically adds `delta` to the integer stored at `key` (0 when unset) and returns the sum.
  virtual StatusOr<int64_t> Add(const std::string& key, int64_t delta) = 0;

  // The address of this host's interface that reaches the store's server ("127.0.0.1" for a
  // TcpStore on loopback), so that a process group can listen where its peers can reach it;
  // empty when unknown.
  virtual std::string LocalAddressHint() const { return ""; }
};

// Every key of `base` seen through this store is `prefix + key`.
class PrefixStore final : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> base)
      : prefix_(std::move(prefix)), base_(std::move(base)) {}
  Status Set(const std::string& key, const std::string& value) override;
  StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override;
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  StatusOr<int64_t> Add(const std::string& key, int64_t delta) override;
  std::string LocalAddressHint() const override { return base_->LocalAddressHint(); }

 private:
  std::string prefix_;
  std::shared_ptr<Store> base_;
};

// Serves a store over TCP from a background thread until destroyed.
class TcpStoreServer {
 public:
  // Listens on host:port (port 0 picks a free one). Error naming the address on failure.
  static StatusOr<std::unique_ptr<TcpStoreServer>> Start(const std::string& host = "127.0.0.1",
                                                         int port = 0);
  virtual ~TcpStoreServer() = default;
  virtual int port() const = 0;
  // "host:port", what TcpStore::Connect takes.
  virtual std::string address() const = 0;
};

// A client of TcpStoreServer. Thread-safe.
class TcpStore {
 public:
  // `address` is "host:port". Retries the connection until `timeout`, then Unavailable naming
  // the address.
  static StatusOr<std::shared_ptr<Store>> Connect(const std::string& address,
                                                  std::chrono::milliseconds timeout);
};

// A duration as people read it in messages: "100ms", "1.5s", "10m".
std::string FormatDuration(std::chrono::milliseconds d);

}  // namespace trainyard::dist
