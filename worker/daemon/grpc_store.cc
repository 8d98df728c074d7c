#include "worker/daemon/grpc_store.h"

#include <algorithm>
#include <thread>

#include "proto/rpc.h"

namespace trainyard::daemon {
namespace {

namespace v1 = ::trainyard::v1;
using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

// Each call waits at most this long on the server (which caps it at 30 s); longer waits are
// several calls, so a coordinator restart in between costs one retry, not the rendezvous.
constexpr std::chrono::milliseconds kCallWait = 10s;

class GrpcStore final : public dist::Store {
 public:
  GrpcStore(std::shared_ptr<grpc::Channel> channel, StoreScope scope, std::string token)
      : stub_(v1::Worker::NewStub(channel)), scope_(std::move(scope)), token_(std::move(token)) {}

  Status Set(const std::string& key, const std::string& value) override {
    v1::StoreSetRequest req;
    Fill(req.mutable_scope());
    req.set_key(key);
    req.set_value(value);
    return Retry(SteadyClock::now() + 30s, [&](grpc::ClientContext* ctx) {
      v1::StoreSetResponse resp;
      return stub_->StoreSet(ctx, req, &resp);
    });
  }

  StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override {
    v1::StoreGetRequest req;
    Fill(req.mutable_scope());
    req.set_key(key);
    v1::StoreGetResponse resp;
    RETURN_IF_ERROR(Waiting(timeout, [&](grpc::ClientContext* ctx, std::chrono::milliseconds w) {
      req.set_timeout_ms(w.count());
      return stub_->StoreGet(ctx, req, &resp);
    }));
    return resp.value();
  }

  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    v1::StoreWaitRequest req;
    Fill(req.mutable_scope());
    for (const std::string& k : keys) req.add_keys(k);
    return Waiting(timeout, [&](grpc::ClientContext* ctx, std::chrono::milliseconds w) {
      req.set_timeout_ms(w.count());
      v1::StoreWaitResponse resp;
      return stub_->StoreWait(ctx, req, &resp);
    });
  }

  StatusOr<int64_t> Add(const std::string& key, int64_t delta) override {
    v1::StoreAddRequest req;
    Fill(req.mutable_scope());
    req.set_key(key);
    req.set_delta(delta);
    v1::StoreAddResponse resp;
    // Not retried: an Add that reached the server but lost its answer must not count twice.
    grpc::ClientContext ctx;
    Prepare(&ctx, 30s);
    RETURN_IF_ERROR(Named(rpc::FromGrpc(stub_->StoreAdd(&ctx, req, &resp))));
    return resp.value();
  }

  std::string LocalAddressHint() const override { return ""; }

 private:
  void Fill(v1::StoreScope* s) const {
    s->set_job_id(scope_.job_id);
    s->set_attempt(scope_.attempt);
    s->set_secret(scope_.secret);
  }
  void Prepare(grpc::ClientContext* ctx, std::chrono::milliseconds deadline) const {
    ctx->set_deadline(std::chrono::system_clock::now() + deadline);
    rpc::AddToken(ctx, token_);
  }
  Status Named(Status s) const {
    if (s.ok()) return s;
    return Status(s.code(), "coordinator rendezvous: " + std::string(s.message()));
  }

  // Calls `call` until it succeeds, fails for good, or `deadline` passes; retries while the
  // coordinator is unreachable (UNAVAILABLE).
  template <typename F>
  Status Retry(SteadyClock::time_point deadline, F call) {
    while (true) {
      grpc::ClientContext ctx;
      Prepare(&ctx, 10s);
      const grpc::Status s = call(&ctx);
      if (s.error_code() != grpc::StatusCode::UNAVAILABLE || SteadyClock::now() >= deadline) {
        return Named(rpc::FromGrpc(s));
      }
      std::this_thread::sleep_for(200ms);
    }
  }

  // A wait of `timeout` in calls of at most kCallWait each.
  template <typename F>
  Status Waiting(std::chrono::milliseconds timeout, F call) {
    const auto deadline = SteadyClock::now() + timeout;
    while (true) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
      const auto wait = std::clamp(left, 0ms, kCallWait);
      grpc::ClientContext ctx;
      Prepare(&ctx, wait + 10s);
      const grpc::Status s = call(&ctx, wait);
      const bool again = s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                         s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
      if (!again || SteadyClock::now() >= deadline) return Named(rpc::FromGrpc(s));
      if (s.error_code() == grpc::StatusCode::UNAVAILABLE) std::this_thread::sleep_for(200ms);
    }
  }

  std::unique_ptr<v1::Worker::Stub> stub_;
  StoreScope scope_;
  std::string token_;
};

}  // namespace

std::shared_ptr<dist::Store> NewGrpcStore(std::shared_ptr<grpc::Channel> channel, StoreScope scope,
                                          std::string token) {
  return std::make_shared<GrpcStore>(std::move(channel), std::move(scope), std::move(token));
}

}  // namespace trainyard::daemon
