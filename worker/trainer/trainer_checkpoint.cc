// Trainer's checkpoints (trainer.h): Restore resumes the newest checkpoint of checkpoint.dir
// or starts from checkpoint.init_from; SaveCheckpoint writes one, with the grad scaler's state
// beside the optimizer's.
#include "worker/trainer/trainer.h"

namespace trainyard::trainer {
namespace {

// The generator stream checkpoints keep: the model's (dropout), rank 0's.
constexpr const char* kModelGenerator = "model";
// The grad scaler's entries in optimizer.safetensors start with this (Note [Mixed precision]).
constexpr const char* kScalerPrefix = "grad_scaler.";

// Moves the entries named kScalerPrefix + key out of `state`, as (key, tensor).
std::vector<optim::NamedTensor> TakeScalerState(std::vector<optim::NamedTensor>* state) {
  std::vector<optim::NamedTensor> scaler, rest;
  const std::string prefix = kScalerPrefix;
  for (auto& [key, t] : *state) {
    if (key.rfind(prefix, 0) == 0) {
      scaler.emplace_back(key.substr(prefix.size()), std::move(t));
    } else {
      rest.emplace_back(std::move(key), std::move(t));
    }
  }
  *state = std::move(rest);
  return scaler;
}

}  // namespace

Status Trainer::Restore() {
  if (checkpoints_ && spec_.checkpoint.resume) {
    StatusOr<std::optional<std::string>> latest = checkpoints_->Latest();
    if (!latest.ok())
      return Status(latest.status().code(),
                    "checkpoint.dir: " + std::string(latest.status().message()));
    if (latest->has_value()) {
      const std::string& path = **latest;
      StatusOr<CheckpointState> state = LoadCheckpoint(path, model_.get(), nullptr);
      if (state.ok()) {
        Status s = RestoreOptimizerState(path);
        if (!s.ok()) state = s;
      }
      if (!state.ok()) {
        return Status(state.status().code(), "resuming from " + path +
                                                 " (set checkpoint.resume: false or another "
                                                 "checkpoint.dir to start afresh): " +
                                                 std::string(state.status().message()));
      }
      if (state->step > total_steps_) {
        return InvalidArgumentError("resuming from " + path + ": it is at step " +
                                    std::to_string(state->step) + ", past this run's " +
                                    std::to_string(total_steps_) + " steps");
      }
      // The manifest counts samples consumed by all ranks (Note [Resharding on resume]).
      // At an epoch's end the padded shards can make position / M exceed the new shard: the
      // epoch is over, which the loader sees at its end.
      RETURN_IF_ERROR(
          train_loader_->Reset(state->epoch, std::min(state->position / world_size_, shard_size_)));
      state->default_generator.ApplyTo(&DefaultGenerator());
      auto it = state->generators.find(kModelGenerator);
      if (it != state->generators.end()) it->second.ApplyTo(&gen_);
      step_ = state->step;
      saved_step_ = state->step;
      last_checkpoint_ = path;
      resumed_from_ = path;
      return OkStatus();
    }
  }
  if (!spec_.checkpoint.init_from.empty()) {
    Status s = InitFromWeights(spec_.checkpoint.init_from, model_.get());
    if (!s.ok()) return Status(s.code(), "checkpoint.init_from: " + std::string(s.message()));
  }
  return OkStatus();
}

Status Trainer::RestoreOptimizerState(const std::string& path) {
  ASSIGN_OR_RETURN(std::vector<optim::NamedTensor> state, LoadOptimizerState(path));
  // A run of another precision may have written or left out the scaler's entries: an fp16 run
  // without them starts from the initial scale.
  const std::vector<optim::NamedTensor> scaler_state = TakeScalerState(&state);
  const std::string file = "\"" + path + "/" + kOptimizerFile + "\"";
  if (scaler_ && !scaler_state.empty()) {
    Status s = scaler_->LoadStateDict(scaler_state);
    if (!s.ok()) return s.WithContext("loading the grad scaler's state from " + file);
  }
  if (!optimizer_) {
    // ZeRO-1: each rank keeps its shard of the whole state once the reducer exists.
    resumed_optimizer_state_ = std::move(state);
    return OkStatus();
  }
  Status s = optimizer_->LoadStateDict(state);
  if (!s.ok()) return s.WithContext("loading optimizer state from " + file);
  return OkStatus();
}

Status Trainer::SaveCheckpoint(std::string* path) {
  SetPhase(Phase::kCheckpoint);
  // A ZeRO optimizer's state is gathered from every rank; then rank 0 alone writes.
  std::vector<optim::NamedTensor> optimizer_state;
  if (dp_ && dp_->zero()) {
    ASSIGN_OR_RETURN(optimizer_state, dp_->zero()->StateDict());
  } else if (rank_ == 0) {
    optimizer_state = optimizer_->StateDict();
  }
  if (scaler_) {
    for (auto& [key, t] : scaler_->StateDict()) {
      optimizer_state.emplace_back(kScalerPrefix + key, t);
    }
  }
  saved_step_ = step_;
  if (rank_ != 0) return OkStatus();
  CheckpointState state;
  state.step = step_;
  state.epoch = static_cast<int64_t>(train_loader_->epoch());
  state.position = train_loader_->position() * world_size_;
  state.world_size = world_size_;
  state.default_generator = GeneratorState::Of(DefaultGenerator());
  state.generators[kModelGenerator] = GeneratorState::Of(gen_);  // rank 0's stream
  state.spec = spec::ToJson(spec_);
  RETURN_IF_ERROR(checkpoints_->SaveWithOptimizerState(*model_, &optimizer_state, state));
  *path = checkpoints_->dir() + "/" + StepDirName(step_);
  last_checkpoint_ = *path;
  if (options_.on_checkpoint) options_.on_checkpoint(*path, step_);
  return OkStatus();
}

}  // namespace trainyard::trainer
