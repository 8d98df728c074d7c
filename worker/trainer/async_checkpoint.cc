#include "worker/trainer/async_checkpoint.h"

#include <utility>

#include "common/logging.h"
#include "worker/tensor/dtype.h"

namespace trainyard::trainer {
namespace {

bool SameLayout(const std::pair<std::string, Tensor>& buffer,
                const std::pair<std::string, Tensor>& source) {
  return buffer.first == source.first && buffer.second.shape() == source.second.shape() &&
         buffer.second.dtype() == source.second.dtype();
}

}  // namespace

void HostSnapshot::Take(const std::vector<std::pair<std::string, Tensor>>& tensors) {
  tensors_.resize(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    std::pair<std::string, Tensor>& buffer = tensors_[i];
    const std::pair<std::string, Tensor>& source = tensors[i];
    if (!buffer.second.defined() || !SameLayout(buffer, source)) {
      buffer = {source.first, Empty(source.second.shape(),
                                    Options(source.second.dtype()).set_device(Device::Cpu()))};
      ++allocations_;
    }
    // A copy to the CPU returns when it is done; a device copy wants a contiguous source.
    CopyInto(buffer.second,
             source.second.is_contiguous() ? source.second : ContiguousData(source.second));
  }
}

int64_t HostSnapshot::bytes() const {
  int64_t total = 0;
  for (const auto& [name, t] : tensors_) {
    total += t.numel() * static_cast<int64_t>(ElementSize(t.dtype()));
  }
  return total;
}

AsyncCheckpointWriter::AsyncCheckpointWriter(CheckpointManager* manager, Hooks hooks)
    : manager_(manager), hooks_(std::move(hooks)), thread_([this] { Loop(); }) {}

AsyncCheckpointWriter::~AsyncCheckpointWriter() {
  StatusOr<std::optional<CommittedCheckpoint>> last = Wait();
  if (!last.ok()) {
    TY_LOG(ERROR) << "the last asynchronous checkpoint failed: " << last.status().message();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

StatusOr<std::optional<CommittedCheckpoint>> AsyncCheckpointWriter::Save(
    const nn::NamedTensors& model, const std::vector<optim::NamedTensor>* optimizer_state,
    const CheckpointState& stamped) {
  ASSIGN_OR_RETURN(std::optional<CommittedCheckpoint> previous, Wait());
  // No write in flight: the snapshot is the calling thread's until it is handed over below.
  model_.Take(model);
  has_optimizer_ = optimizer_state != nullptr;
  if (has_optimizer_) optimizer_.Take(*optimizer_state);
  state_ = stamped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_ = true;
    started_ = false;
  }
  cv_.notify_all();
  return previous;
}

StatusOr<std::optional<CommittedCheckpoint>> AsyncCheckpointWriter::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  if (in_flight_ && hooks_.waiting) {
    lock.unlock();
    hooks_.waiting();
    lock.lock();
  }
  cv_.wait(lock, [this] { return !in_flight_; });
  return TakeResult();
}

StatusOr<std::optional<CommittedCheckpoint>> AsyncCheckpointWriter::Poll() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!in_flight_) return TakeResult();
  return StatusOr<std::optional<CommittedCheckpoint>>(std::nullopt);
}

StatusOr<std::optional<CommittedCheckpoint>> AsyncCheckpointWriter::TakeResult() {
  StatusOr<std::optional<CommittedCheckpoint>> result(std::nullopt);
  std::swap(result, result_);
  return result;
}

int64_t AsyncCheckpointWriter::snapshot_bytes() const {
  return model_.bytes() + optimizer_.bytes();  // only Save changes them, on this thread
}

void AsyncCheckpointWriter::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return (in_flight_ && !started_) || stop_; });
    if (!(in_flight_ && !started_)) return;  // stopping, with nothing in flight
    started_ = true;
    lock.unlock();
    // The snapshot is this thread's until in_flight_ drops.
    const int64_t step = state_.step;
    if (hooks_.before_write) hooks_.before_write(step);
    std::function<void()> before_commit;
    if (hooks_.before_commit) before_commit = [this, step] { hooks_.before_commit(step); };
    Status s = manager_->SaveTensors(
        model_.tensors(), has_optimizer_ ? &optimizer_.tensors() : nullptr, state_, before_commit);
    lock.lock();
    if (s.ok()) {
      result_ = std::optional<CommittedCheckpoint>(
          CommittedCheckpoint{manager_->dir() + "/" + StepDirName(step), step});
    } else {
      result_ = std::move(s);
    }
    in_flight_ = false;
    cv_.notify_all();
  }
}

}  // namespace trainyard::trainer
