#include "worker/optim/adam.h"

#include "kernels/cpu/optim.h"
#include "worker/optim/validate.h"
#include "worker/tensor/cuda_backend.h"
#include "worker/tensor/factories.h"

namespace trainyard::optim {
namespace {

namespace kc = kernels::cpu;

constexpr char kExpAvg[] = "exp_avg";
constexpr char kExpAvgSq[] = "exp_avg_sq";

AdamOptions FromMap(const std::map<std::string, double>& h) {
  AdamOptions o;
  o.lr = h.at("lr");
  o.beta1 = h.at("beta1");
  o.beta2 = h.at("beta2");
  o.eps = h.at("eps");
  o.weight_decay = h.at("weight_decay");
  return o;
}

AdamOptions FromAdamW(const AdamWOptions& w) {
  AdamOptions o;
  o.lr = w.lr;
  o.beta1 = w.beta1;
  o.beta2 = w.beta2;
  o.eps = w.eps;
  o.weight_decay = w.weight_decay;
  return o;
}

}  // namespace

Status Adam::ValidateAs(const std::string& owner, const AdamOptions& o) {
  RETURN_IF_ERROR(internal::CheckAtLeast(owner, "lr", o.lr, 0));
  RETURN_IF_ERROR(internal::CheckFraction(owner, "beta1", o.beta1));
  RETURN_IF_ERROR(internal::CheckFraction(owner, "beta2", o.beta2));
  RETURN_IF_ERROR(internal::CheckAtLeast(owner, "eps", o.eps, 0));
  return internal::CheckAtLeast(owner, "weight_decay", o.weight_decay, 0);
}

Status Adam::Validate(const AdamOptions& options) { return ValidateAs("adam", options); }

StatusOr<std::unique_ptr<Adam>> Adam::Create(std::vector<NamedTensor> params,
                                             const AdamOptions& options) {
  RETURN_IF_ERROR(Validate(options));
  RETURN_IF_ERROR(CheckParams("adam", params));
  return std::unique_ptr<Adam>(new Adam("adam", std::move(params), options, false));
}

Adam::Adam(std::string name, std::vector<NamedTensor> params, const AdamOptions& options,
           bool decoupled_weight_decay)
    : Optimizer(std::move(name), std::move(params)),
      options_(options),
      decoupled_weight_decay_(decoupled_weight_decay) {}

void Adam::set_lr(double lr) {
  TY_CHECK(internal::CheckAtLeast(name(), "lr", lr, 0).ok()) << name() << ": set_lr(" << lr << ")";
  options_.lr = lr;
}

void Adam::Update(const Tensor& param, const Tensor& grad, ParamState& state) {
  Tensor& exp_avg = state.buffers[kExpAvg];
  Tensor& exp_avg_sq = state.buffers[kExpAvgSq];
  if (!exp_avg.defined()) exp_avg = ZerosLike(param);
  if (!exp_avg_sq.defined()) exp_avg_sq = ZerosLike(param);
  const kc::AdamHyper h{options_.lr,  options_.beta1,        options_.beta2,
                        options_.eps, options_.weight_decay, decoupled_weight_decay_};
  TY_DISPATCH_FLOATING(param.dtype(), "adam", [&] {
    kc::AdamUpdate<scalar_t>(param.numel(), param.data<scalar_t>(), grad.data<scalar_t>(),
                             exp_avg.data<scalar_t>(), exp_avg_sq.data<scalar_t>(), state.step, h);
  });
}

void Adam::UpdateAll(const std::vector<PendingUpdate>& updates) {
  // CUDA parameters go through the multi-tensor kernel: one launch per distinct step count
  // (usually one), instead of one per parameter.
  std::map<int64_t, std::vector<cuda::AdamTensor>> by_step;
  Device device;
  for (const PendingUpdate& u : updates) {
    if (u.param->device().is_cpu()) {
      Update(*u.param, u.grad, *u.state);
      continue;
    }
    device = u.param->device();
    Tensor& exp_avg = u.state->buffers[kExpAvg];
    Tensor& exp_avg_sq = u.state->buffers[kExpAvgSq];
    if (!exp_avg.defined()) exp_avg = ZerosLike(*u.param);
    if (!exp_avg_sq.defined()) exp_avg_sq = ZerosLike(*u.param);
    by_step[u.state->step].push_back(cuda::AdamTensor{u.param->data<float>(), u.grad.data<float>(),
                                                      exp_avg.data<float>(),
                                                      exp_avg_sq.data<float>(), u.param->numel()});
  }
  for (const auto& [step, tensors] : by_step) {
    CudaBackend().AdamMulti(tensors.data(), static_cast<int>(tensors.size()), step, options_.lr,
                            options_.beta1, options_.beta2, options_.eps, options_.weight_decay,
                            decoupled_weight_decay_, /*found_inf=*/nullptr, ComputeStream(device));
  }
}

std::map<std::string, double> Adam::Hyperparameters() const {
  return {{"lr", options_.lr},
          {"beta1", options_.beta1},
          {"beta2", options_.beta2},
          {"eps", options_.eps},
          {"weight_decay", options_.weight_decay}};
}

StatusOr<std::vector<std::string>> Adam::CheckHyperparameters(
    const std::map<std::string, double>& h) const {
  RETURN_IF_ERROR(ValidateAs(name(), FromMap(h)));
  return std::vector<std::string>{kExpAvg, kExpAvgSq};
}

void Adam::SetHyperparameters(const std::map<std::string, double>& h) { options_ = FromMap(h); }

Status AdamW::Validate(const AdamWOptions& options) {
  return ValidateAs("adamw", FromAdamW(options));
}

StatusOr<std::unique_ptr<AdamW>> AdamW::Create(std::vector<NamedTensor> params,
                                               const AdamWOptions& options) {
  RETURN_IF_ERROR(Validate(options));
  RETURN_IF_ERROR(CheckParams("adamw", params));
  return std::unique_ptr<AdamW>(new AdamW(std::move(params), options));
}

AdamW::AdamW(std::vector<NamedTensor> params, const AdamWOptions& options)
    : Adam("adamw", std::move(params), FromAdamW(options), /*decoupled_weight_decay=*/true) {}

}  // namespace trainyard::optim
