#include "server/grpc_streams.h"

#include <atomic>
#include <memory>

#include "common/logging.h"
#include "proto/rpc.h"

namespace trainyard::server {
namespace {

using namespace std::chrono_literals;
namespace v1 = ::trainyard::v1;

const grpc::Status kStopping(grpc::StatusCode::UNAVAILABLE, "the coordinator is stopping");

// The write side of a stream: one write in flight at a time, in order, and Finish once the
// write in flight is done (after End). Every call under the owning reactor's mutex (Note
// [Reactor locks] in grpc_streams.h); `Reactor` has StartWrite(const Message*) and Finish.
template <class Reactor, class Message>
class Outbox {
 public:
  explicit Outbox(Reactor* reactor) : reactor_(reactor) {}

  void Push(Message m) {
    queue_.push_back(std::move(m));
    Next();
  }
  // Ends the call with `s` (the first End wins); what is still queued is dropped.
  void End(grpc::Status s) {
    if (ending_) return;
    ending_ = true;
    status_ = std::move(s);
    Next();
  }
  // A failed write ends the call with `failed`.
  void WriteDone(bool ok, const grpc::Status& failed) {
    writing_ = false;
    if (!ok) End(failed);
    Next();
  }
  bool busy() const { return writing_ || !queue_.empty(); }
  bool ending() const { return ending_; }

 private:
  void Next() {
    if (writing_ || finished_) return;
    if (ending_) {
      finished_ = true;
      reactor_->Finish(status_);
    } else if (!queue_.empty()) {
      in_flight_ = std::move(queue_.front());
      queue_.pop_front();
      writing_ = true;
      reactor_->StartWrite(&in_flight_);
    }
  }

  Reactor* reactor_;
  std::deque<Message> queue_;
  Message in_flight_;  // alive until its OnWriteDone
  bool writing_ = false, ending_ = false, finished_ = false;
  grpc::Status status_;
};

// Worker.Heartbeat. The first heartbeat names the worker for the whole stream (later ones must
// repeat it); then each heartbeat is applied as it arrives, and the commands the coordinator
// queues are written as they come (a wake posts the take to the pump), until either side ends,
// the worker registers again (a newer stream takes over), is declared lost, or the server
// stops. Owned by self_ from Start until OnDone, and by the pump while a take is posted.
class HeartbeatStream final
    : public grpc::ServerBidiReactor<v1::WorkerHeartbeat, v1::WorkerCommand>,
      public Stream,
      public std::enable_shared_from_this<HeartbeatStream> {
 public:
  explicit HeartbeatStream(const StreamEnv& env) : env_(env), out_(this) {}

  void Start(grpc::CallbackServerContext* ctx) {
    self_ = shared_from_this();
    StatusOr<Identity> caller = env_.auth->Identify(*ctx, Role::kWorker);
    if (caller.ok()) caller_ = *caller;
    const bool added = caller.ok() && env_.streams->Add(this);
    std::lock_guard<std::mutex> lock(mu_);
    if (!caller.ok()) {
      out_.End(rpc::ToGrpc(caller.status()));
    } else if (!added) {
      out_.End(grpc::Status::OK);
    } else if (!out_.ending()) {  // not stopped since Add
      StartRead(&in_);
    }
  }

  void OnReadDone(bool ok) override {
    grpc::Status end = grpc::Status::OK;
    bool more = ok;
    if (ok && name_.empty()) {
      Status s = First();
      more = s.ok();
      end = rpc::ToGrpc(s);
    } else if (ok) {
      more = in_.name() == name_ && Apply(in_).ok();
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (!more) return out_.End(end);
    if (!out_.ending()) StartRead(&in_);
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    out_.WriteDone(ok, grpc::Status::OK);
  }

  void OnCancel() override { Stop(); }

  // As the synchronous handler did when the server stopped: the stream ends OK.
  void Stop() override {
    std::lock_guard<std::mutex> lock(mu_);
    out_.End(grpc::Status::OK);
  }

  void OnDone() override {
    if (!name_.empty()) env_.coordinator->ClearCommandsWake(name_, incarnation_);
    env_.streams->Remove(this);
    std::shared_ptr<HeartbeatStream> last = std::move(self_);  // may delete this on return
  }

 private:
  // The first heartbeat: the caller may act as the worker it names; then the commands wake.
  Status First() {
    if (Status s = caller_.MayActAsWorker(in_.name()); !s.ok()) {
      TY_LOG(WARNING) << "refused a heartbeat as " << in_.name() << ": " << s.message();
      return s;
    }
    RETURN_IF_ERROR(Apply(in_));
    ASSIGN_OR_RETURN(incarnation_, env_.coordinator->Incarnation(in_.name()));
    name_ = in_.name();
    std::weak_ptr<HeartbeatStream> weak = shared_from_this();
    Pump* pump = env_.pump;
    // Under the coordinator's lock: hand the take to the pump, once until it runs.
    return env_.coordinator->SetCommandsWake(name_, incarnation_, [weak, pump] {
      std::shared_ptr<HeartbeatStream> s = weak.lock();
      if (s && !s->take_posted_.exchange(true)) pump->Post([s] { s->TakeCommands(); });
    });
  }

  // On the pump: the queued commands, in order, to the outbox; Aborted ends the stream.
  void TakeCommands() {
    take_posted_ = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (out_.ending()) return;  // a newer stream may take them
    }
    StatusOr<std::vector<v1::WorkerCommand>> commands =
        env_.coordinator->TakeCommands(name_, incarnation_);
    std::lock_guard<std::mutex> lock(mu_);
    if (!commands.ok()) return out_.End(rpc::ToGrpc(commands.status()));
    for (v1::WorkerCommand& c : *commands) out_.Push(std::move(c));
  }

  Status Apply(const v1::WorkerHeartbeat& hb) {
    Status s = env_.coordinator->Heartbeat(hb);
    const std::function<void(double)>* on_latency = env_.on_heartbeat_latency;
    if (on_latency != nullptr && *on_latency && hb.sent_unix_us() > 0) {
      const auto now = std::chrono::duration_cast<std::chrono::microseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
      (*on_latency)(static_cast<double>(now - hb.sent_unix_us()) / 1e6);
    }
    return s;
  }

  const StreamEnv env_;
  std::shared_ptr<HeartbeatStream> self_;
  Identity caller_;
  v1::WorkerHeartbeat in_;  // the read in flight (reads are one at a time)
  std::string name_;        // set by the first heartbeat, then constant
  int64_t incarnation_ = 0;
  std::atomic<bool> take_posted_{false};
  std::mutex mu_;  // guards out_
  Outbox<HeartbeatStream, v1::WorkerCommand> out_;
};

// Coordinator.WatchJob: the watcher's events, one write at a time, pulled when a write is done
// or the watcher wakes (a new event, or the job ended); ends OK when the job ended and every
// event was written, UNAVAILABLE when the client cancels or the server stops (as before).
class WatchStream final : public grpc::ServerWriteReactor<v1::JobEvent>, public Stream {
 public:
  WatchStream(const StreamEnv& env, grpc::CallbackServerContext* ctx,
              const v1::WatchJobRequest* req)
      : env_(env), out_(this) {
    Status s = Open(ctx, req);
    if (s.ok()) {
      watcher_->SetWake([this] { Pull(); });  // and pulls the events already there
    } else {
      std::lock_guard<std::mutex> lock(mu_);
      out_.End(rpc::ToGrpc(s));
    }
  }

  void OnWriteDone(bool ok) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      out_.WriteDone(ok, kStopping);
    }
    Pull();
  }
  void OnCancel() override { Stop(); }
  void Stop() override {
    std::lock_guard<std::mutex> lock(mu_);
    out_.End(kStopping);
  }
  void OnDone() override {
    if (watcher_) watcher_->ClearWake();
    env_.streams->Remove(this);
    delete this;
  }

 private:
  Status Open(grpc::CallbackServerContext* ctx, const v1::WatchJobRequest* req) {
    RETURN_IF_ERROR(env_.auth->Identify(*ctx, Role::kClient).status());
    ASSIGN_OR_RETURN(watcher_, env_.coordinator->Watch(req->id(), req->from_seq()));
    if (!env_.streams->Add(this)) return UnavailableError(kStopping.error_message());
    return OkStatus();
  }

  // The next event to the outbox unless one is in flight; the end once every event is out.
  void Pull() {
    std::lock_guard<std::mutex> lock(mu_);
    if (out_.busy() || out_.ending()) return;
    v1::JobEvent event;
    if (watcher_->Next(&event, 0ms)) {
      out_.Push(std::move(event));
    } else if (watcher_->ended()) {
      out_.End(grpc::Status::OK);
    }
  }

  const StreamEnv env_;
  std::shared_ptr<Watcher> watcher_;
  std::mutex mu_;  // guards out_; taken under the watcher's wake lock
  Outbox<WatchStream, v1::JobEvent> out_;
};

// Worker.ReportMetrics: each report applied as it arrives, until the worker ends the stream,
// a report names a worker the caller may not act as, or the server stops (then OK, as before).
class MetricsStream final : public grpc::ServerReadReactor<v1::MetricsReport>, public Stream {
 public:
  MetricsStream(const StreamEnv& env, grpc::CallbackServerContext* ctx,
                v1::ReportMetricsResponse* resp)
      : env_(env), resp_(resp) {
    StatusOr<Identity> caller = env_.auth->Identify(*ctx, Role::kWorker);
    if (caller.ok()) caller_ = *caller;
    if (!caller.ok()) {
      End(rpc::ToGrpc(caller.status()));
    } else if (!env_.streams->Add(this)) {
      End(grpc::Status::OK);
    } else {
      std::lock_guard<std::mutex> lock(mu_);
      if (!ended_) StartRead(&report_);  // not stopped since Add
    }
  }

  void OnReadDone(bool ok) override {
    if (!ok) return End(grpc::Status::OK);
    // Reports speak for ranks of the worker they name, which the credential must be bound to.
    if (Status s = caller_.MayActAsWorker(report_.worker()); !s.ok()) {
      return End(rpc::ToGrpc(s));
    }
    const Status s = env_.coordinator->ReportMetrics(report_);
    std::lock_guard<std::mutex> lock(mu_);
    if (s.code() == StatusCode::kFailedPrecondition) {  // a stale attempt's: logged there
      AddRefusal(resp_, s);
    } else if (!s.ok()) {
      TY_LOG(WARNING) << "metrics of job " << report_.job_id() << " from " << report_.worker()
                      << ": " << s.message();
    }
    if (!ended_) StartRead(&report_);
  }
  void OnCancel() override { End(grpc::Status::CANCELLED); }
  void Stop() override { End(grpc::Status::OK); }
  void OnDone() override {
    env_.streams->Remove(this);
    delete this;
  }

 private:
  void End(grpc::Status s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (ended_) return;
    ended_ = true;
    Finish(std::move(s));
  }

  const StreamEnv env_;
  v1::ReportMetricsResponse* resp_;  // guarded by mu_ until Finish
  Identity caller_;
  v1::MetricsReport report_;  // the read in flight
  std::mutex mu_;
  bool ended_ = false;
};

}  // namespace

bool Streams::Add(Stream* s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopped_) return false;
  live_.insert(s);
  return true;
}

void Streams::Remove(Stream* s) {
  std::lock_guard<std::mutex> lock(mu_);
  live_.erase(s);
}

// Stop only starts each Finish; a stream leaves live_ in its OnDone, on a gRPC thread.
void Streams::StopAll() {
  std::lock_guard<std::mutex> lock(mu_);
  stopped_ = true;
  for (Stream* s : live_) s->Stop();
}

Pump::Pump() : thread_([this] { Run(); }) {}

Pump::~Pump() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Pump::Post(std::function<void()> f) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(f));
  }
  cv_.notify_one();
}

void Pump::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return done_ || !queue_.empty(); });
    if (queue_.empty()) return;
    std::function<void()> f = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    f();
    f = nullptr;  // what it held (a stream) goes here, outside the lock
    lock.lock();
  }
}

grpc::ServerBidiReactor<v1::WorkerHeartbeat, v1::WorkerCommand>* NewHeartbeatStream(
    const StreamEnv& env, grpc::CallbackServerContext* ctx) {
  auto stream = std::make_shared<HeartbeatStream>(env);
  stream->Start(ctx);
  return stream.get();
}

grpc::ServerWriteReactor<v1::JobEvent>* NewWatchStream(const StreamEnv& env,
                                                       grpc::CallbackServerContext* ctx,
                                                       const v1::WatchJobRequest* req) {
  return new WatchStream(env, ctx, req);
}

grpc::ServerReadReactor<v1::MetricsReport>* NewMetricsStream(const StreamEnv& env,
                                                             grpc::CallbackServerContext* ctx,
                                                             v1::ReportMetricsResponse* resp) {
  return new MetricsStream(env, ctx, resp);
}

}  // namespace trainyard::server
