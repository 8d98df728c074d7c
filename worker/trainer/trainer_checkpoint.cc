// Trainer's checkpoints (trainer.h): Restore resumes the newest checkpoint of checkpoint.dir
// when this run wrote it (Note [Run identity]), or checkpoint.resume_from, or starts from
// checkpoint.init_from; SaveCheckpoint writes one (or hands it to the background writer,
// Note [Asynchronous checkpoint]), with the optimizer's state in the form of the run's
// UpdateStep (update_step.h; the grad scaler's beside it for fp16).
#include <ctime>

#include "worker/trainer/trainer.h"

namespace trainyard::trainer {
namespace {

// The generator stream checkpoints keep: the model's (dropout), rank 0's.
constexpr const char* kModelGenerator = "model";
// "job fashion-mlp-1 (uid 3f2a..., step 938, saved 2026-12-05 21:30:00 UTC)".
std::string Writer(const CheckpointState& saved) {
  std::string who = saved.run.spec_digest.empty() ? "a run without a recorded identity (written "
                                                    "before checkpoints carried one)"
                                                  : "job " + saved.run.job;
  std::string details = "step " + std::to_string(saved.step);
  if (!saved.run.uid.empty()) details = "uid " + saved.run.uid + ", " + details;
  if (saved.saved_at > 0) {
    const std::time_t t = static_cast<std::time_t>(saved.saved_at);
    char when[32];
    std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&t));
    details += ", saved " + std::string(when);
  }
  return who + " (" + details + ")";
}

}  // namespace

Status Trainer::CheckSameRun(const std::string& path, const CheckpointState& saved,
                             const Json& spec_json) const {
  std::vector<std::string> why;
  if (!run_.uid.empty() && !saved.run.uid.empty() && saved.run.uid != run_.uid) {
    why.push_back("its uid is not this run's (" + run_.uid + ")");
  }
  const std::string saved_digest =
      saved.run.spec_digest.empty() ? SpecDigest(saved.spec) : saved.run.spec_digest;
  if (saved_digest != run_.spec_digest) {
    std::vector<std::string> diff = IdentityDifferences(saved.spec, spec_json);
    std::string list;
    for (const std::string& d : diff) list += (list.empty() ? "" : "; ") + d;
    why.push_back("its spec differs in what makes a run (" +
                  (list.empty() ? "spec digest " + saved_digest : list) + ")");
  }
  if (why.empty()) return OkStatus();
  std::string reasons;
  for (const std::string& w : why) reasons += (reasons.empty() ? "" : ", and ") + w;
  return FailedPreconditionError(
      "checkpoint.dir " + checkpoints_->dir() + " holds a checkpoint of another run: " + path +
      " was written by " + Writer(saved) + "; " + reasons +
      ". A run never continues another's checkpoint by itself. To continue it deliberately, set "
      "checkpoint.resume_from: " +
      path + " (trainyard train --resume-from " + path +
      "); to start from its weights at step 0, checkpoint.init_from: " + path +
      "; or give another checkpoint.dir (trainyard train --fresh moves the old checkpoints "
      "aside)");
}

Status Trainer::Restore() {
  const Json spec_json = spec::ToJson(spec_);
  run_.spec_digest = SpecDigest(spec_json);
  run_.job = options_.job.empty() ? spec_.name : options_.job;
  run_.uid = options_.run_uid;
  if (checkpoints_ && spec_.checkpoint.resume) {
    StatusOr<std::optional<std::string>> latest = checkpoints_->Latest();
    if (!latest.ok())
      return Status(latest.status().code(),
                    "checkpoint.dir: " + std::string(latest.status().message()));
    if (latest->has_value()) {
      const std::string& path = **latest;
      StatusOr<Manifest> manifest = ReadManifest(path + "/" + kManifestFile);
      if (!manifest.ok()) return Unresumable(path, manifest.status());
      Status same = CheckSameRun(path, manifest->state, spec_json);
      if (same.ok()) {
        if (run_.uid.empty()) run_.uid = manifest->state.run.uid;
        if (run_.uid.empty()) run_.uid = NewRunUid();
        return ResumeFrom(path);
      }
      if (spec_.checkpoint.resume_from.empty()) return same;
    }
  }
  if (run_.uid.empty()) run_.uid = NewRunUid();
  if (!spec_.checkpoint.resume_from.empty()) {
    Status s = ResumeFrom(spec_.checkpoint.resume_from);
    if (!s.ok()) return Status(s.code(), "checkpoint.resume_from: " + std::string(s.message()));
    return s;
  }
  if (!spec_.checkpoint.init_from.empty()) {
    Status s = InitFromWeights(spec_.checkpoint.init_from, model_.get());
    if (!s.ok()) return Status(s.code(), "checkpoint.init_from: " + std::string(s.message()));
  }
  return OkStatus();
}

Status Trainer::Unresumable(const std::string& path, const Status& s) const {
  return Status(s.code(), "resuming from " + path +
                              " (set checkpoint.resume: false or another checkpoint.dir to start "
                              "afresh): " +
                              std::string(s.message()));
}

Status Trainer::ResumeFrom(const std::string& path) {
  StatusOr<CheckpointState> state = LoadCheckpoint(path, model_.get(), nullptr);
  if (state.ok()) {
    Status s = RestoreOptimizerState(path);
    if (!s.ok()) state = s;
  }
  if (!state.ok()) return Unresumable(path, state.status());
  if (state->step > total_steps_) {
    return InvalidArgumentError("resuming from " + path + ": it is at step " +
                                std::to_string(state->step) + ", past this run's " +
                                std::to_string(total_steps_) + " steps");
  }
  // The manifest counts samples consumed by all ranks (Note [Resharding on resume]).
  // At an epoch's end the padded shards can make position / M exceed the new shard: the
  // epoch is over, which the loader sees at its end.
  // An elastic run's position follows from the step (JoinElasticGroup sets it).
  if (!elastic_) {
    RETURN_IF_ERROR(
        train_loader_->Reset(state->epoch, std::min(state->position / DataWorld(), shard_size_)));
  }
  state->default_generator.ApplyTo(&DefaultGenerator());
  auto it = state->generators.find(kModelGenerator);
  if (it != state->generators.end()) it->second.ApplyTo(&gen_);
  if (spec_.schedule.kind == "cosine" && spec_.schedule.cosine.total_steps == 0 &&
      state->total_steps > 0 && state->total_steps != total_steps_) {
    resume_note_ = "the cosine schedule now ends at step " + std::to_string(total_steps_) +
                   ", where the checkpoint's run ended it at step " +
                   std::to_string(state->total_steps) + ": from step " +
                   std::to_string(state->step) +
                   " the learning rate follows the new length "
                   "(schedule.cosine.total_steps: " +
                   std::to_string(state->total_steps) + " keeps the old one)";
  }
  step_ = state->step;
  if (options_.progress) options_.progress->step.store(step_);  // health reports say where it is
  saved_step_ = state->step;
  last_checkpoint_ = path;
  resumed_from_ = path;
  return OkStatus();
}

Status Trainer::RestoreOptimizerState(const std::string& path) {
  ASSIGN_OR_RETURN(std::vector<optim::NamedTensor> state, LoadOptimizerState(path));
  if (pipe_) state = pipe_->OwnOptimizerState(std::move(state));  // this stage's part
  // Each mode takes the scaler's entries when it has a scaler and leaves them aside otherwise
  // (update_step.h); ZeRO loads its shard once StartDataParallel has built it.
  return update_->LoadStateDict(std::move(state), path);
}

Status Trainer::SaveCheckpoint() {
  SetPhase(Phase::kCheckpoint);
  // ZeRO-3's weights, like a ZeRO optimizer's state, are gathered from every rank, a unit at a
  // time, into rank 0's copy; then rank 0 alone writes.
  nn::NamedTensors weights;
  if (pipe_) RETURN_IF_ERROR(pipe_->Gather());  // rank 0 writes the whole model
  if (dp_ && dp_->sharded()) {
    ASSIGN_OR_RETURN(weights, dp_->GatheredCopy(UniqueStateDict(*model_), rank_ == 0));
  } else if (rank_ == 0) {
    weights = UniqueStateDict(*model_);
  }
  if (pipe_) {
    // Handles of their own on the gathered storage, which outlive Release.
    for (auto& [name, t] : weights) t = t.detach();
    pipe_->Release();
  }
  ASSIGN_OR_RETURN(std::vector<optim::NamedTensor> optimizer_state,
                   update_->StateDict(/*writer=*/rank_ == 0 || pipe_));
  if (pipe_) {
    ASSIGN_OR_RETURN(optimizer_state, pipe_->GatherOptimizerState(std::move(optimizer_state)));
  }
  saved_step_ = step_;
  if (rank_ != 0) return OkStatus();
  const CheckpointState state = checkpoints_->Stamped(StateToSave());
  if (writer_) {
    ASSIGN_OR_RETURN(std::optional<CommittedCheckpoint> previous,
                     writer_->Save(weights, &optimizer_state, state));
    if (previous) Committed(*previous);
    return OkStatus();
  }
  RETURN_IF_ERROR(checkpoints_->SaveTensors(weights, &optimizer_state, state));
  Committed({checkpoints_->dir() + "/" + StepDirName(step_), step_});
  return OkStatus();
}

Status Trainer::CollectCheckpoint(bool wait) {
  if (!writer_) return OkStatus();
  // A hang detector allows a checkpoint's time for the wait.
  if (wait) SetPhase(Phase::kCheckpoint);
  ASSIGN_OR_RETURN(std::optional<CommittedCheckpoint> done,
                   wait ? writer_->Wait() : writer_->Poll());
  if (done) Committed(*done);
  return OkStatus();
}

CheckpointState Trainer::StateToSave() const {
  CheckpointState state;
  state.step = step_;
  state.epoch = static_cast<int64_t>(train_loader_->epoch());
  state.position = train_loader_->position() * DataWorld();
  if (elastic_) {  // samples of the epoch's steps done (Note [Elastic shards])
    state.epoch = step_ / steps_per_epoch_;
    state.position = (step_ % steps_per_epoch_) * StepMicroBatches() * spec_.batch_size;
  }
  state.world_size = world_size_;
  state.total_steps = total_steps_;
  state.default_generator = GeneratorState::Of(DefaultGenerator());
  state.generators[kModelGenerator] = GeneratorState::Of(gen_);  // rank 0's stream
  state.spec = spec::ToJson(spec_);
  state.run = run_;
  return state;
}

void Trainer::Committed(const CommittedCheckpoint& checkpoint) {
  last_checkpoint_ = checkpoint.path;
  if (options_.on_checkpoint) options_.on_checkpoint(checkpoint.path, checkpoint.step);
}

}  // namespace trainyard::trainer
