#include "worker/trainer/update_step.h"

#include <utility>

#include "common/check.h"
#include "worker/dist/zero.h"
#include "worker/optim/adam.h"
#include "worker/optim/clip_grad.h"
#include "worker/optim/sgd.h"
#include "worker/tensor/factories.h"
#include "worker/trainer/manifest.h"

namespace trainyard::trainer {
namespace {

StatusOr<std::unique_ptr<optim::Optimizer>> MakeOptimizer(const spec::OptimizerSpec& o,
                                                          std::vector<optim::NamedTensor> params) {
  if (o.kind == "sgd") {
    optim::SGDOptions s;
    s.lr = o.sgd.lr;
    s.momentum = o.sgd.momentum;
    s.dampening = o.sgd.dampening;
    s.nesterov = o.sgd.nesterov;
    s.weight_decay = o.sgd.weight_decay;
    ASSIGN_OR_RETURN(auto opt, optim::SGD::Create(std::move(params), s));
    return std::unique_ptr<optim::Optimizer>(std::move(opt));
  }
  const spec::AdamSpec& a = o.kind == "adam" ? o.adam : o.adamw;
  if (o.kind == "adam") {
    optim::AdamOptions s{a.lr, a.beta1, a.beta2, a.eps, a.weight_decay};
    ASSIGN_OR_RETURN(auto opt, optim::Adam::Create(std::move(params), s));
    return std::unique_ptr<optim::Optimizer>(std::move(opt));
  }
  optim::AdamWOptions s{a.lr, a.beta1, a.beta2, a.eps, a.weight_decay};
  ASSIGN_OR_RETURN(auto opt, optim::AdamW::Create(std::move(params), s));
  return std::unique_ptr<optim::Optimizer>(std::move(opt));
}

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

// "\"<checkpoint>/optimizer.safetensors\"", for error messages.
std::string OptimizerFileOf(const std::string& checkpoint) {
  return "\"" + checkpoint + "/" + kOptimizerFile + "\"";
}

// The whole optimizer on every rank (plain and fp16): its learning rate, state and clipping.
class WholeOptimizerUpdate : public UpdateStep {
 public:
  WholeOptimizerUpdate(std::unique_ptr<optim::Optimizer> optimizer, std::vector<Tensor> params,
                       double clip_norm, bool data_parallel)
      : optimizer_(std::move(optimizer)),
        params_(std::move(params)),
        clip_norm_(clip_norm),
        data_parallel_(data_parallel) {}

  Status Start(DataParallel*) override { return OkStatus(); }
  void SetLr(double lr) override { optimizer_->set_lr(lr); }

  StatusOr<std::vector<optim::NamedTensor>> StateDict(bool writer) override {
    if (!writer) return std::vector<optim::NamedTensor>();
    return optimizer_->StateDict();
  }

  Status LoadStateDict(std::vector<optim::NamedTensor> state,
                       const std::string& checkpoint) override {
    TakeScalerState(&state);  // an fp16 run's, of no use here
    return LoadOptimizerState(state, checkpoint);
  }

  int64_t state_bytes() const override { return dist::OptimizerStateBytes(*optimizer_); }

 protected:
  Status LoadOptimizerState(const std::vector<optim::NamedTensor>& state,
                            const std::string& checkpoint) {
    Status s = optimizer_->LoadStateDict(state);
    if (!s.ok())
      return s.WithContext("loading optimizer state from " + OptimizerFileOf(checkpoint));
    return OkStatus();
  }

  // The gradients' total norm before clipping them to spec.grad_clip_norm, on the device;
  // undefined when not clipping.
  Tensor Clip() { return clip_norm_ > 0 ? optim::ClipGradNorm(params_, clip_norm_) : Tensor(); }

  // Data parallel keeps each .grad a view into its bucket: zero it rather than drop it.
  void ZeroGrad() { optimizer_->ZeroGrad(/*set_to_none=*/!data_parallel_); }

  std::unique_ptr<optim::Optimizer> optimizer_;
  const std::vector<Tensor> params_;  // the model's, tied weights once; the optimizer's
  const double clip_norm_;            // spec.grad_clip_norm; 0: no clipping
  const bool data_parallel_;
};

class PlainUpdate final : public WholeOptimizerUpdate {
 public:
  using WholeOptimizerUpdate::WholeOptimizerUpdate;

  StatusOr<UpdateReport> Apply() override {
    UpdateReport report;
    report.device_grad_norm = Clip();
    optimizer_->Step();
    ZeroGrad();
    return report;
  }
};

// precision fp16 (Note [Mixed precision] in trainer.h).
class ScaledUpdate final : public WholeOptimizerUpdate {
 public:
  ScaledUpdate(std::unique_ptr<optim::GradScaler> scaler,
               std::unique_ptr<optim::Optimizer> optimizer, std::vector<Tensor> params,
               double clip_norm, bool data_parallel)
      : WholeOptimizerUpdate(std::move(optimizer), std::move(params), clip_norm, data_parallel),
        scaler_(std::move(scaler)) {}

  Tensor ScaleLoss(const Tensor& loss) const override { return scaler_->Scale(loss); }

  StatusOr<UpdateReport> Apply() override {
    // The all-reduce is complete (the trainer waited for it): unscale, then clip the true
    // gradients; a non-finite norm belongs to a step the scaler skips.
    UpdateReport report;
    report.loss_scale = scaler_->scale();
    scaler_->UnscaleAndCheck(params_);
    report.device_grad_norm = Clip();
    report.skipped = !scaler_->Step(*optimizer_, params_);
    scaler_->Update(/*found_inf=*/report.skipped);
    ZeroGrad();
    return report;
  }

  StatusOr<std::vector<optim::NamedTensor>> StateDict(bool writer) override {
    std::vector<optim::NamedTensor> state;
    ASSIGN_OR_RETURN(state, WholeOptimizerUpdate::StateDict(writer));
    if (!writer) return state;
    for (auto& [key, t] : scaler_->StateDict()) state.emplace_back(kScalerPrefix + key, t);
    return state;
  }

  Status LoadStateDict(std::vector<optim::NamedTensor> state,
                       const std::string& checkpoint) override {
    // A run of another precision left the scaler's entries out: start from the initial scale.
    const std::vector<optim::NamedTensor> scaler_state = TakeScalerState(&state);
    if (!scaler_state.empty()) {
      Status s = scaler_->LoadStateDict(scaler_state);
      if (!s.ok()) {
        return s.WithContext("loading the grad scaler's state from " + OptimizerFileOf(checkpoint));
      }
    }
    return LoadOptimizerState(state, checkpoint);
  }

 private:
  std::unique_ptr<optim::GradScaler> scaler_;
};

// ZeRO (worker/dist/zero.h). The sharded optimizer needs the reducer, which Start
// brings; a resumed state waits for it. With fp16's `scaler`, each rank unscales and checks
// its gradient shards and the ranks agree on skipping the step (one all-reduce).
class ZeroUpdate final : public UpdateStep {
 public:
  ZeroUpdate(spec::OptimizerSpec optimizer, double clip_norm,
             std::unique_ptr<optim::GradScaler> scaler)
      : optimizer_spec_(std::move(optimizer)), clip_norm_(clip_norm), scaler_(std::move(scaler)) {}

  Tensor ScaleLoss(const Tensor& loss) const override {
    return scaler_ ? scaler_->Scale(loss) : loss;
  }

  Status Start(DataParallel* dp) override {
    TY_CHECK(dp != nullptr) << "ZeRO started without a process group";
    dp_ = dp;
    const spec::OptimizerSpec& o = optimizer_spec_;
    ASSIGN_OR_RETURN(zero_, dist::ZeroOptimizer::Create(
                                &dp->reducer(),
                                [&o](std::vector<optim::NamedTensor> p) {
                                  return MakeOptimizer(o, std::move(p));
                                },
                                dp->WeightShards()));
    if (resumed_state_.empty()) return OkStatus();
    // Each rank keeps its shard of the whole state.
    Status s = zero_->LoadStateDict(resumed_state_);
    if (!s.ok()) return s.WithContext("resuming the sharded optimizer from " + resumed_from_);
    resumed_state_.clear();
    return OkStatus();
  }

  void SetLr(double lr) override { zero_->set_lr(lr); }

  StatusOr<UpdateReport> Apply() override {
    UpdateReport report;
    if (scaler_) {
      report.loss_scale = scaler_->scale();
      ASSIGN_OR_RETURN(report.skipped, AnyRank(scaler_->UnscaleAndCheck(zero_->masters())));
      scaler_->Update(/*found_inf=*/report.skipped);
      if (report.skipped) {
        zero_->SkipStep();
        return report;
      }
    }
    if (clip_norm_ > 0) {
      ASSIGN_OR_RETURN(report.grad_norm, zero_->ClipGradNorm(clip_norm_));
    }
    RETURN_IF_ERROR(zero_->Step());
    return report;
  }

  StatusOr<std::vector<optim::NamedTensor>> StateDict(bool) override {
    ASSIGN_OR_RETURN(std::vector<optim::NamedTensor> state, zero_->StateDict());
    if (scaler_) {
      for (auto& [key, t] : scaler_->StateDict()) state.emplace_back(kScalerPrefix + key, t);
    }
    return state;
  }

  Status LoadStateDict(std::vector<optim::NamedTensor> state,
                       const std::string& checkpoint) override {
    // Another precision's run left the scaler's entries out: start from the initial scale.
    const std::vector<optim::NamedTensor> scaler_state = TakeScalerState(&state);
    if (scaler_ && !scaler_state.empty()) {
      Status s = scaler_->LoadStateDict(scaler_state);
      if (!s.ok()) {
        return s.WithContext("loading the grad scaler's state from " + OptimizerFileOf(checkpoint));
      }
    }
    resumed_state_ = std::move(state);
    resumed_from_ = checkpoint;
    return OkStatus();
  }

  int64_t state_bytes() const override { return zero_ ? zero_->state_bytes() : 0; }

 private:
  // Whether any rank's `here` is true.
  StatusOr<bool> AnyRank(bool here) {
    Tensor t = FromVector<double>({here ? 1.0 : 0.0}, Shape{1});
    RETURN_IF_ERROR(dist::AllReduceHost(dp_->group(), t, dist::ReduceOp::kMax, dp_->Device()));
    return t.data<double>()[0] > 0;
  }

  const spec::OptimizerSpec optimizer_spec_;
  const double clip_norm_;                         // spec.grad_clip_norm; 0: no clipping
  std::unique_ptr<optim::GradScaler> scaler_;      // precision fp16 only
  DataParallel* dp_ = nullptr;                     // from Start
  std::unique_ptr<dist::ZeroOptimizer> zero_;      // from Start
  std::vector<optim::NamedTensor> resumed_state_;  // from LoadStateDict, until Start
  std::string resumed_from_;
};

}  // namespace

Status ValidateUpdateStep(const spec::JobSpec& spec, const optim::GradScalerOptions& scaler) {
  if (spec.precision != "fp16") return OkStatus();
  return optim::GradScaler::Validate(scaler);
}

StatusOr<std::unique_ptr<UpdateStep>> MakeUpdateStep(const spec::JobSpec& spec,
                                                     const optim::GradScalerOptions& scaler,
                                                     nn::Module& model, bool data_parallel) {
  RETURN_IF_ERROR(ValidateUpdateStep(spec, scaler));
  const double clip = spec.grad_clip_norm;
  // ZeRO replaces the whole optimizer exactly when there is a group to shard it over.
  if (data_parallel && spec.parallelism.zero_stage != 0) {
    std::unique_ptr<optim::GradScaler> grad_scaler;
    if (spec.precision == "fp16") {
      ASSIGN_OR_RETURN(grad_scaler, optim::GradScaler::Create(scaler));
    }
    return std::unique_ptr<UpdateStep>(
        new ZeroUpdate(spec.optimizer, clip, std::move(grad_scaler)));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<optim::Optimizer> optimizer,
                   MakeOptimizer(spec.optimizer, model.NamedParameters()));
  std::vector<Tensor> params = model.Parameters();
  if (spec.precision != "fp16") {
    return std::unique_ptr<UpdateStep>(
        new PlainUpdate(std::move(optimizer), std::move(params), clip, data_parallel));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<optim::GradScaler> grad_scaler,
                   optim::GradScaler::Create(scaler));
  return std::unique_ptr<UpdateStep>(new ScaledUpdate(std::move(grad_scaler), std::move(optimizer),
                                                      std::move(params), clip, data_parallel));
}

}  // namespace trainyard::trainer
