// Asynchronous checkpoints (checkpoint.async): at a step boundary the training thread copies a
// checkpoint's tensors into host buffers and goes on training, while one background thread
// writes and commits them through CheckpointManager::SaveTensors.
//
// Note [Asynchronous checkpoint]:
//   - Snapshot. AsyncCheckpointWriter::Save copies the model's tensors (UniqueStateDict) and
//     the optimizer's state dict into a HostSnapshot, on the training thread: a device-to-host
//     copy for CUDA tensors (it returns when the data is on the host), a memcpy on the CPU. The
//     buffers are allocated by the first save and reused by the next ones while every name,
//     shape and dtype stays the same: host memory of one more copy of weights and optimizer
//     state (on a CPU run, counted in its tensor memory). The CheckpointState is stamped
//     (saved_at, attempt) at the same moment. That copy is the training thread's whole stall.
//   - Write. The writer thread runs SaveTensors on the snapshot: the same files, byte for byte,
//     as a synchronous save of the same state, written into a hidden temporary directory and
//     renamed to step-* only once complete, under the fence (Note [Atomic checkpoint] in
//     checkpoint.h, Note [Checkpoint fence] in checkpoint_fence.h), then keep_last pruning. A
//     process killed at any moment leaves the newest committed checkpoint loadable.
//   - One at a time. There is one snapshot, so a save first waits until the previous one is
//     committed: a slow disk delays the next snapshot and never overwrites one being written.
//   - Errors. A failed write is returned by the next Poll, Save (which then starts nothing) or
//     Wait; the trainer polls after every step and fails the run with it, at the latest at the
//     next save. Never dropped: the destructor logs one nobody took.
//   - End. Trainer::Finish waits for the last write (Wait) before it returns, after an
//     interruption (a stop, SIGTERM) too, so the final checkpoint exists when Run returns.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/status.h"
#include "worker/tensor/tensor.h"
#include "worker/trainer/checkpoint.h"

namespace trainyard::trainer {

// Host copies of named tensors, reused from one Take to the next. Thread-compatible.
class HostSnapshot {
 public:
  // Copies `tensors` (any device; contiguous or not) into contiguous CPU buffers of the same
  // names, shapes and dtypes, in order. A buffer is allocated only where the entry's name,
  // shape or dtype differs from the previous Take's.
  void Take(const std::vector<std::pair<std::string, Tensor>>& tensors);

  const std::vector<std::pair<std::string, Tensor>>& tensors() const { return tensors_; }
  int64_t bytes() const;
  // Buffers allocated by Take so far, counting each Take's new ones (for tests of reuse).
  int64_t allocations() const { return allocations_; }

 private:
  std::vector<std::pair<std::string, Tensor>> tensors_;
  int64_t allocations_ = 0;
};

// A checkpoint the writer committed.
struct CommittedCheckpoint {
  std::string path;  // <dir>/step-NNNNNNNN
  int64_t step = 0;
};

// Writes one checkpoint at a time on its own thread (Note [Asynchronous checkpoint]). Save and
// Wait are called from one thread (the training thread).
class AsyncCheckpointWriter {
 public:
  // For tests; empty in production.
  struct Hooks {
    // On the writer thread, before a checkpoint's first file is written.
    std::function<void(int64_t step)> before_write;
    // On the writer thread, after a checkpoint's files are written and synced, before the
    // rename that commits it.
    std::function<void(int64_t step)> before_commit;
    // On the calling thread, when Save or Wait finds a write in flight and starts waiting.
    std::function<void()> waiting;
  };

  // Writes through `manager`, which must outlive the writer; while a write is in flight
  // nothing else may use it but Stamped and dir (Wait first).
  explicit AsyncCheckpointWriter(CheckpointManager* manager, Hooks hooks = {});
  // Waits for the write in flight (logging its error when no Wait took it), ends the thread.
  ~AsyncCheckpointWriter();
  AsyncCheckpointWriter(const AsyncCheckpointWriter&) = delete;
  AsyncCheckpointWriter& operator=(const AsyncCheckpointWriter&) = delete;

  // Waits for the write in flight, then copies `model` (UniqueStateDict) and `optimizer_state`
  // (null: no optimizer file) into the host snapshot and hands them, with `stamped`
  // (CheckpointManager::Stamped), to the writer thread. Returns once the copy is done, with
  // the previous write's result: the checkpoint it committed (nullopt when there was none),
  // or its error (SaveTensors', naming the directory), in which case nothing new is started.
  StatusOr<std::optional<CommittedCheckpoint>> Save(
      const nn::NamedTensors& model, const std::vector<optim::NamedTensor>* optimizer_state,
      const CheckpointState& stamped);

  // Waits for the write in flight, if any, and returns its result as Save does.
  StatusOr<std::optional<CommittedCheckpoint>> Wait();
  // Wait without the wait: the finished write's result, or nullopt while one is in flight.
  StatusOr<std::optional<CommittedCheckpoint>> Poll();

  // The host snapshot's bytes (weights and optimizer state); 0 before the first Save. From
  // the thread that calls Save.
  int64_t snapshot_bytes() const;

 private:
  void Loop();  // the writer thread
  // result_, leaving nullopt in its place. Under mu_, with no write in flight.
  StatusOr<std::optional<CommittedCheckpoint>> TakeResult();

  CheckpointManager* manager_;
  Hooks hooks_;
  // Touched by the calling thread only while no write is in flight, by the writer only while
  // one is (in_flight_, under mu_, hands them over).
  HostSnapshot model_;
  HostSnapshot optimizer_;
  bool has_optimizer_ = false;
  CheckpointState state_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool in_flight_ = false;  // handed to the writer and not finished
  bool started_ = false;    // the writer has taken the write in flight
  bool stop_ = false;
  // The result of the last finished write, until Save or Wait takes it.
  StatusOr<std::optional<CommittedCheckpoint>> result_ = std::optional<CommittedCheckpoint>();
  std::thread thread_;  // last: starts once everything above is built
};

}  // namespace trainyard::trainer
