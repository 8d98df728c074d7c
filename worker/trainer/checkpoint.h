// Checkpoints: a run's weights, optimizer state and resume position, saved so that PyTorch can
// read the weights and a resumed run continues bit for bit. A checkpoint is a directory
//
//   <dir>/step-<step, at least 8 digits>/    e.g. runs/fmnist/step-00001200/
//       model.safetensors       Module::StateDict() with PyTorch's names; a tensor tied under
//                               several names (GPT's lm_head.weight) is stored once, under its
//                               first name (Note [Tied embedding] in worker/nn/gpt.h)
//       optimizer.safetensors   Optimizer::StateDict(); absent when saved without an optimizer
//       manifest.json           step, data position, generators, job spec (manifest.h)
//
// In PyTorch: model.load_state_dict(safetensors.torch.load_file(".../model.safetensors"),
// strict=False) (strict=False only for tied weights; tests/golden/check_checkpoint_in_torch.py).
//
// Note [Atomic checkpoint]: Save writes every file into <dir>/.tmp-step-<step>-<pid>/, fsyncs
// each file and that directory, renames it to step-<step> and fsyncs <dir>. A directory named
// step-* is therefore complete whenever it exists, even after a crash at any point; leftovers
// of a crashed save are hidden (names starting with '.') and removed by the next Save. Old
// checkpoints are renamed to .trash-step-<step>-<pid> before being deleted, for the same reason.
// Under the service, the rename and the pruning happen only while the directory's fence allows
// the writing attempt (Note [Checkpoint fence] in checkpoint_fence.h). An asynchronous save
// (checkpoint.async) copies the tensors to host memory at the step boundary and runs this same
// write and commit (SaveTensors) on a background thread (Note [Asynchronous checkpoint] in
// async_checkpoint.h): the same bytes, and the same atomicity, since a process killed while
// that thread writes leaves only a hidden .tmp-step-* beside the newest committed step-*.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "common/clock.h"
#include "common/status.h"
#include "worker/nn/module.h"
#include "worker/optim/optimizer.h"
#include "worker/trainer/checkpoint_fence.h"
#include "worker/trainer/manifest.h"

namespace trainyard::trainer {

// "step-00001200" for step 1200.
std::string StepDirName(int64_t step);

// The entries of model.StateDict(), each tensor once, under its first name (Note [Tied
// embedding]): what model.safetensors holds. The tensors are the model's own, not copies.
nn::NamedTensors UniqueStateDict(const nn::Module& model);

// Saves checkpoints of one run into a directory and finds the newest. One CheckpointManager
// (one process) writes a directory at a time. Not thread-safe: one thread at a time calls
// RaiseFence, Save*, and Latest (an asynchronous save's writer thread while it writes); dir()
// and Stamped() read only what the constructor set and may be called from any thread.
class CheckpointManager {
 public:
  // keep_last > 0 keeps the newest keep_last step directories after each Save; 0 keeps all.
  // `clock` stamps saved_at (the real clock when null) and must outlive the manager.
  // `attempt` is the epoch of the job attempt writing (Note [Checkpoint fence]), recorded in
  // every manifest; 0 (a run outside the service) neither reads nor writes a fence.
  CheckpointManager(std::string dir, int keep_last, const Clock* clock = nullptr,
                    int64_t attempt = 0);

  // Raises the directory's fence to this attempt (rank 0, before resuming). FailedPrecondition
  // naming both attempts when the fence is already above it: this attempt is stale.
  Status RaiseFence() const { return fence_.Raise(); }

  // Writes <dir>/step-<state.step>/ (Note [Atomic checkpoint]), creating <dir> if needed and
  // replacing an existing directory of the same step. `optimizer` may be null (no optimizer
  // file). Then deletes the oldest step directories beyond keep_last, never the one just
  // written; a failure to delete is logged, not returned, since the checkpoint is safe.
  // `state` must be valid (TY_CHECK, see CheckpointState); its saved_at is ignored.
  // Errors (I/O, a tensor safetensors refuses) name the path; nothing named step-* is left.
  // FailedPrecondition "checkpoint step-00000120 of attempt 1 refused: <dir> is fenced at
  // attempt 2" when a newer attempt raised the fence: the temporary directory is removed and
  // every step directory (the newest good one too) is left as it was.
  Status Save(const nn::Module& model, const optim::Optimizer* optimizer,
              const CheckpointState& state);
  // The same with the optimizer's state dict already taken (a ZeRO optimizer gathers it from
  // every rank); null writes no optimizer file.
  Status SaveWithOptimizerState(const nn::Module& model,
                                const std::vector<optim::NamedTensor>* optimizer_state,
                                const CheckpointState& state);

  // `state` as a save records it: saved_at from the clock now, attempt the fence's epoch.
  CheckpointState Stamped(CheckpointState state) const;
  // Save's write and commit, with the tensors already taken (an asynchronous save's host
  // snapshot): `model` is what model.safetensors holds (UniqueStateDict, or a copy of it),
  // `stamped` is recorded as given (Stamped). Same files, pruning, errors and fence refusal as
  // SaveWithOptimizerState, which calls it. `before_commit`, when set, runs after every file
  // is written and synced and before the rename (tests stop a save there).
  Status SaveTensors(const nn::NamedTensors& model,
                     const std::vector<optim::NamedTensor>* optimizer_state,
                     const CheckpointState& stamped,
                     const std::function<void()>& before_commit = nullptr);

  // The newest step directory (by step number) whose manifest reads back and whose files
  // exist with the sizes and CRC-32s the manifest records, or nullopt when <dir> holds no step
  // directory or does not exist. Directories that fail the check (a truncated or corrupted
  // weight file) are skipped with a warning naming them, and the older good one is taken.
  // Errors: <dir> cannot be listed; DataLoss naming each step directory when none passes.
  StatusOr<std::optional<std::string>> Latest() const;

  const std::string& dir() const { return dir_; }

 private:
  // Removes step directories beyond keep_last (except `keep`) and leftovers of crashed saves.
  void Prune(int64_t keep) const;

  std::string dir_;
  int keep_last_;
  const Clock* clock_;
  CheckpointFence fence_;
};

// Restores a checkpoint into an existing model and optimizer (null: the optimizer state is not
// read) and returns its state; the caller applies the generators and the data position.
// Weights load strictly and in place (Module::LoadStateDict), so the optimizer's references
// stay valid. Errors name the file: a missing or unreadable manifest or weight file, bad JSON,
// an unsupported version, keys or shapes that do not match the model (listed), an optimizer
// requested from a checkpoint saved without one. Everything is read and the manifest checked
// before anything changes; only an optimizer state rejected after the weights loaded leaves the
// model restored and the optimizer as it was.
StatusOr<CheckpointState> LoadCheckpoint(const std::string& step_dir, nn::Module* model,
                                         optim::Optimizer* optimizer);

// The optimizer state dict saved in a checkpoint (for a ZeRO optimizer, which loads its own
// shard of it). FailedPrecondition when it was saved without one.
StatusOr<std::vector<optim::NamedTensor>> LoadOptimizerState(const std::string& step_dir);

// Loads weights only (a job's init_from), strictly and in place. `path` is a step directory
// (its manifest names the weight file) or a .safetensors file such as PyTorch writes.
// Errors name the path; mismatched keys and shapes are listed.
Status InitFromWeights(const std::string& path, nn::Module* model);

}  // namespace trainyard::trainer
