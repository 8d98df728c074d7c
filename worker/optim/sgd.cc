#include "worker/optim/sgd.h"

#include "kernels/cpu/optim.h"
#include "worker/ops/elementwise.h"
#include "worker/optim/validate.h"
#include "worker/tensor/factories.h"

namespace trainyard::optim {
namespace {

namespace kc = kernels::cpu;

constexpr char kName[] = "sgd";
constexpr char kMomentumBuffer[] = "momentum_buffer";

SGDOptions FromMap(const std::map<std::string, double>& h) {
  SGDOptions o;
  o.lr = h.at("lr");
  o.momentum = h.at("momentum");
  o.dampening = h.at("dampening");
  o.nesterov = h.at("nesterov") != 0;
  o.weight_decay = h.at("weight_decay");
  return o;
}

std::vector<std::string> BufferNames(const SGDOptions& o) {
  if (o.momentum == 0) return {};
  return {kMomentumBuffer};
}

}  // namespace

Status SGD::Validate(const SGDOptions& o) {
  RETURN_IF_ERROR(internal::CheckAtLeast(kName, "lr", o.lr, 0));
  RETURN_IF_ERROR(internal::CheckAtLeast(kName, "momentum", o.momentum, 0));
  RETURN_IF_ERROR(internal::CheckBetween(kName, "dampening", o.dampening, 0, 1));
  RETURN_IF_ERROR(internal::CheckAtLeast(kName, "weight_decay", o.weight_decay, 0));
  if (o.nesterov && (o.momentum <= 0 || o.dampening != 0)) {
    return InvalidArgumentError(
        std::string(kName) + ": nesterov needs momentum > 0 and dampening 0; momentum is " +
        internal::FormatValue(o.momentum) + ", dampening is " + internal::FormatValue(o.dampening));
  }
  return OkStatus();
}

StatusOr<std::unique_ptr<SGD>> SGD::Create(std::vector<NamedTensor> params,
                                           const SGDOptions& options) {
  RETURN_IF_ERROR(Validate(options));
  RETURN_IF_ERROR(CheckParams(kName, params));
  return std::unique_ptr<SGD>(new SGD(std::move(params), options));
}

SGD::SGD(std::vector<NamedTensor> params, const SGDOptions& options)
    : Optimizer(kName, std::move(params)), options_(options) {}

void SGD::set_lr(double lr) {
  TY_CHECK(internal::CheckAtLeast(kName, "lr", lr, 0).ok()) << "sgd: set_lr(" << lr << ")";
  options_.lr = lr;
}

// The update of kernels/cpu/optim.h SgdUpdate composed of in-place ops, for CUDA parameters
// (one kernel per op: SGD is rarely what a GPU job uses; Adam has the fused kernel).
void SGD::CudaUpdate(const Tensor& param, const Tensor& grad, const Tensor& buffer,
                     bool first_step) const {
  const SGDOptions& o = options_;
  Tensor g = grad;
  if (o.weight_decay != 0) g = ops::Add(grad, param, o.weight_decay);
  Tensor step = g;
  if (buffer.defined()) {
    if (first_step) {
      ops::CopyInPlace(buffer, g);
    } else {
      ops::MulScalarInPlace(buffer, o.momentum);
      ops::AddInPlace(buffer, g, 1 - o.dampening);
    }
    step = o.nesterov ? ops::Add(g, buffer, o.momentum) : buffer;
  }
  ops::AddInPlace(param, step, -o.lr);
}

void SGD::Update(const Tensor& param, const Tensor& grad, ParamState& state) {
  const kc::SgdHyper h{options_.lr, options_.momentum, options_.dampening, options_.weight_decay,
                       options_.nesterov};
  Tensor buffer;
  bool first_step = false;
  if (options_.momentum != 0) {
    Tensor& b = state.buffers[kMomentumBuffer];
    first_step = !b.defined();
    if (first_step) b = EmptyLike(param);
    buffer = b;
  }
  if (param.device().is_cuda()) {
    CudaUpdate(param, grad, buffer, first_step);
    return;
  }
  TY_DISPATCH_FLOATING(param.dtype(), "sgd", [&] {
    kc::SgdUpdate<scalar_t>(param.numel(), param.data<scalar_t>(), grad.data<scalar_t>(),
                            buffer.defined() ? buffer.data<scalar_t>() : nullptr, first_step, h);
  });
}

std::map<std::string, double> SGD::Hyperparameters() const {
  return {{"lr", options_.lr},
          {"momentum", options_.momentum},
          {"dampening", options_.dampening},
          {"nesterov", options_.nesterov ? 1.0 : 0.0},
          {"weight_decay", options_.weight_decay}};
}

StatusOr<std::vector<std::string>> SGD::CheckHyperparameters(
    const std::map<std::string, double>& h) const {
  const double nesterov = h.at("nesterov");
  if (nesterov != 0 && nesterov != 1) {
    return InvalidArgumentError(std::string(kName) + ": nesterov is " +
                                internal::FormatValue(nesterov) + "; it must be 0 or 1");
  }
  const SGDOptions o = FromMap(h);
  RETURN_IF_ERROR(Validate(o));
  return BufferNames(o);
}

void SGD::SetHyperparameters(const std::map<std::string, double>& h) { options_ = FromMap(h); }

}  // namespace trainyard::optim
