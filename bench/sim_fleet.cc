#include "bench/sim_fleet.h"

#include <mutex>
#include <string>

namespace trainyard::bench {
namespace {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

int64_t UnixMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

class HeartbeatCall;

// One simulated worker. Its state changes under mu_; gRPC runs the reactions of its calls on
// its own threads, never inside a Start* call, so calls are started under mu_.
class SimWorker {
 public:
  SimWorker(SimFleet* fleet, v1::Worker::Stub* stub, int i);

  // On the driver thread: registers when due, or beats when due.
  void Tick(SteadyClock::time_point now);
  void Cancel();

  // From the calls' reactions.
  void OnRegistered(const grpc::Status& s);
  void OnBeatWritten(bool ok);
  void OnStreamBroken();
  void OnStreamEnded();

 private:
  enum class State { kDown, kRegistering, kStreaming };
  void RegisterLocked();

  SimFleet* const fleet_;
  v1::Worker::Stub* const stub_;
  const std::string name_;
  const std::chrono::milliseconds phase_;  // spreads the beats over the second
  v1::RegisterWorkerRequest request_;
  v1::RegisterWorkerResponse response_;
  std::mutex mu_;
  State state_ = State::kDown;
  bool stopping_ = false;
  SteadyClock::time_point retry_at_{}, next_beat_{};
  std::chrono::milliseconds backoff_{200};
  std::unique_ptr<grpc::ClientContext> register_ctx_;
  HeartbeatCall* call_ = nullptr;  // while streaming; it deletes itself in OnDone
  int registered_epoch_ = -1, counted_epoch_ = -1;
};

// A worker's heartbeat stream: one beat in flight at a time, a read always pending.
class HeartbeatCall final : public grpc::ClientBidiReactor<v1::WorkerHeartbeat, v1::WorkerCommand> {
 public:
  HeartbeatCall(SimWorker* w, SimFleet* fleet, v1::Worker::Stub* stub, const std::string& name)
      : w_(w), fleet_(fleet) {
    ++fleet_->calls_;
    beat_.set_name(name);
    stub->async()->Heartbeat(&ctx_, this);
    StartRead(&command_);
    StartCall();
  }
  // Under the worker's mutex; false while a beat is in flight or once the stream broke.
  bool Beat() {
    if (writing_ || broken_) return false;
    writing_ = true;
    beat_.set_sent_unix_us(UnixMicros());
    StartWrite(&beat_);
    return true;
  }
  void OnWriteDone(bool ok) override { w_->OnBeatWritten(ok); }
  void OnReadDone(bool ok) override {
    if (!ok) return w_->OnStreamBroken();
    ++fleet_->commands_;
    StartRead(&command_);
  }
  void OnDone(const grpc::Status&) override {
    w_->OnStreamEnded();
    SimFleet* fleet = fleet_;
    delete this;
    --fleet->calls_;
  }

  grpc::ClientContext ctx_;
  bool writing_ = false, broken_ = false;  // under the worker's mutex

 private:
  SimWorker* const w_;
  SimFleet* const fleet_;
  v1::WorkerHeartbeat beat_;
  v1::WorkerCommand command_;
};

SimWorker::SimWorker(SimFleet* fleet, v1::Worker::Stub* stub, int i)
    : fleet_(fleet), stub_(stub), name_("sim-" + std::to_string(i)), phase_((i * 7919) % 1000) {
  request_.set_name(name_);
  request_.set_host("10.0." + std::to_string(i / 250 % 250) + "." + std::to_string(i % 250));
  request_.set_cpu_slots(1);
}

void SimWorker::Tick(SteadyClock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return;
  if (state_ == State::kDown && now >= retry_at_) {
    RegisterLocked();
  } else if (state_ == State::kStreaming && now >= next_beat_ && call_->Beat()) {
    next_beat_ = std::max(next_beat_ + 1s, now);
  }
}

void SimWorker::RegisterLocked() {
  state_ = State::kRegistering;
  register_ctx_ = std::make_unique<grpc::ClientContext>();
  register_ctx_->set_deadline(std::chrono::system_clock::now() + 5s);  // as the daemon
  ++fleet_->calls_;
  stub_->async()->RegisterWorker(register_ctx_.get(), &request_, &response_,
                                 [this](grpc::Status s) { OnRegistered(s); });
}

void SimWorker::OnRegistered(const grpc::Status& s) {
  SimFleet* fleet = fleet_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto now = SteadyClock::now();
    if (!s.ok() || stopping_) {
      state_ = State::kDown;
      backoff_ = std::min<std::chrono::milliseconds>(backoff_ * 2, 5s);
      retry_at_ = now + backoff_;
    } else {
      backoff_ = 200ms;
      registered_epoch_ = fleet_->epoch_;
      state_ = State::kStreaming;
      call_ = new HeartbeatCall(this, fleet_, stub_, name_);
      call_->Beat();  // at once, as the daemon does; then once a second
      next_beat_ = now + 1s + phase_;
    }
  }
  --fleet->calls_;
}

void SimWorker::OnBeatWritten(bool ok) {
  std::lock_guard<std::mutex> lock(mu_);
  if (call_ != nullptr) call_->writing_ = false;
  const int epoch = fleet_->epoch_;
  if (ok && registered_epoch_ == epoch && counted_epoch_ != epoch) {
    counted_epoch_ = epoch;
    ++fleet_->back_;
  }
}

void SimWorker::OnStreamBroken() {
  std::lock_guard<std::mutex> lock(mu_);
  if (call_ != nullptr) call_->broken_ = true;
}

void SimWorker::OnStreamEnded() {
  std::lock_guard<std::mutex> lock(mu_);
  call_ = nullptr;
  state_ = State::kDown;
  retry_at_ = SteadyClock::now() + backoff_;
}

void SimWorker::Cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  stopping_ = true;
  if (call_ != nullptr) call_->ctx_.TryCancel();
  if (state_ == State::kRegistering) register_ctx_->TryCancel();
}

SimFleet::SimFleet(const std::vector<std::shared_ptr<grpc::Channel>>& channels, int workers) {
  for (const auto& c : channels) stubs_.push_back(v1::Worker::NewStub(c));
  for (int i = 0; i < workers; ++i) {
    workers_.push_back(std::make_unique<SimWorker>(this, stubs_[i % stubs_.size()].get(), i));
  }
}

SimFleet::~SimFleet() { Stop(); }

void SimFleet::Start() {
  driver_ = std::thread([this] { Drive(); });
}

void SimFleet::Stop() {
  if (stop_.exchange(true)) return;
  if (driver_.joinable()) driver_.join();
  for (auto& w : workers_) w->Cancel();
  const auto deadline = SteadyClock::now() + 30s;
  while (calls_.load() > 0 && SteadyClock::now() < deadline) std::this_thread::sleep_for(10ms);
}

void SimFleet::NewEpoch() {
  back_ = 0;
  ++epoch_;
}

// Ticks every worker every 50 ms (the daemon's own step).
void SimFleet::Drive() {
  while (!stop_.load()) {
    const auto now = SteadyClock::now();
    for (auto& w : workers_) w->Tick(now);
    std::this_thread::sleep_until(now + 50ms);
  }
}

}  // namespace trainyard::bench
