#include "worker/optim/grad_scaler.h"

#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "worker/autograd/grad_mode.h"
#include "worker/ops/elementwise.h"
#include "worker/ops/reduction.h"
#include "worker/optim/validate.h"
#include "worker/tensor/cuda_backend.h"
#include "worker/tensor/factories.h"

namespace trainyard::optim {
namespace {

constexpr char kOwner[] = "grad_scaler";
constexpr char kScaleKey[] = "scale";
constexpr char kGrowthTrackerKey[] = "growth_tracker";

// Multiplies every tensor of `grads` by inv_scale in place; true when some element of some
// tensor is inf or NaN. One scalar is read back per device kind:
// - contiguous f32 gradients on the first CUDA device among them go through the multi-tensor
//   kernel (Backend::UnscaleCheck, PyTorch's _amp_foreach_non_finite_check_and_unscale_), which
//   unscales and flags a non-finite value in a device scalar in one pass;
// - the others are unscaled by an op each and checked by summing x * 0, which is 0 for a finite
//   x and NaN otherwise (a sum of zeros cannot overflow).
bool UnscaleAndFindNonFinite(const std::vector<Tensor>& grads, double inv_scale) {
  std::vector<float*> fused;
  std::vector<int64_t> sizes;
  Device device = Device::Cpu();
  Tensor poison;
  for (const Tensor& g : grads) {
    if (g.device().is_cuda() && g.dtype() == DType::kFloat32 && g.is_contiguous() &&
        (fused.empty() || g.device() == device)) {
      device = g.device();
      fused.push_back(g.data<float>());
      sizes.push_back(g.numel());
      continue;
    }
    ops::MulScalarInPlace(g, inv_scale);
    Tensor part = ops::Sum(ops::MulScalar(g, 0.0));
    poison = poison.defined() ? ops::Add(poison, part) : part;
  }
  bool found = poison.defined() && std::isnan(poison.item());
  if (!fused.empty()) {
    const Tensor flag = Zeros({1}, Options(DType::kFloat32).set_device(device));
    CudaBackend().UnscaleCheck(fused.data(), sizes.data(), static_cast<int>(fused.size()),
                               static_cast<float>(inv_scale), flag.data<float>(),
                               ComputeStream(device));
    found = flag.item() != 0 || found;
  }
  return found;
}

Status Invalid(const std::string& what) {
  return InvalidArgumentError(std::string(kOwner) + " state: " + what);
}

// The one-element entry `key` of `dict` with `dtype`, or an error naming it.
StatusOr<Tensor> Entry(const std::map<std::string, Tensor>& dict, const char* key, DType dtype) {
  auto it = dict.find(key);
  if (it == dict.end()) return Invalid(std::string("\"") + key + "\" is missing");
  const Tensor& t = it->second;
  if (!t.defined() || t.numel() != 1 || t.dtype() != dtype) {
    return Invalid(std::string("\"") + key + "\" must be a one-element " + DTypeName(dtype) +
                   " tensor");
  }
  return t;
}

}  // namespace

Status GradScaler::Validate(const GradScalerOptions& o) {
  RETURN_IF_ERROR(internal::CheckPositive(kOwner, "init_scale", o.init_scale));
  RETURN_IF_ERROR(internal::CheckAbove(kOwner, "growth_factor", o.growth_factor, 1));
  RETURN_IF_ERROR(internal::CheckOpenInterval(kOwner, "backoff_factor", o.backoff_factor, 0, 1));
  return internal::CheckCountAtLeast(kOwner, "growth_interval", o.growth_interval, 1);
}

StatusOr<std::unique_ptr<GradScaler>> GradScaler::Create(const GradScalerOptions& options) {
  RETURN_IF_ERROR(Validate(options));
  return std::unique_ptr<GradScaler>(new GradScaler(options));
}

Tensor GradScaler::Scale(const Tensor& loss) const { return ops::MulScalar(loss, scale_); }

bool GradScaler::UnscaleAndCheck(const std::vector<Tensor>& params) {
  TY_CHECK(!found_inf_.has_value())
      << "GradScaler::UnscaleAndCheck called twice since the last Update; the gradients are "
         "already unscaled";
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (g.defined()) grads.push_back(g);
  }
  // For the usual powers of two, 1 / scale is exact in any dtype.
  found_inf_ = UnscaleAndFindNonFinite(grads, 1.0 / scale_);
  return *found_inf_;
}

bool GradScaler::Step(Optimizer& optimizer, const std::vector<Tensor>& params) {
  if (!found_inf_.has_value()) UnscaleAndCheck(params);
  if (*found_inf_) return false;
  optimizer.Step();
  return true;
}

void GradScaler::Update(bool found_inf) {
  found_inf_.reset();
  if (found_inf) {
    scale_ *= options_.backoff_factor;
    growth_tracker_ = 0;
    return;
  }
  if (++growth_tracker_ < options_.growth_interval) return;
  growth_tracker_ = 0;
  const double grown = scale_ * options_.growth_factor;
  // PyTorch keeps the scale as a float32 tensor and grows it only while that stays finite.
  if (grown <= std::numeric_limits<float>::max()) scale_ = grown;
}

std::vector<NamedTensor> GradScaler::StateDict() const {
  return {{kGrowthTrackerKey, Scalar(static_cast<double>(growth_tracker_), Options(DType::kInt64))},
          {kScaleKey, Scalar(scale_, Options(DType::kFloat64))}};
}

Status GradScaler::LoadStateDict(const std::vector<NamedTensor>& state) {
  std::map<std::string, Tensor> dict;
  for (const auto& [key, t] : state) {
    if (key != kScaleKey && key != kGrowthTrackerKey) {
      return Invalid("unknown entry \"" + key + "\"; a grad scaler has growth_tracker, scale");
    }
    if (!dict.emplace(key, t).second) return Invalid("\"" + key + "\" appears twice");
  }
  ASSIGN_OR_RETURN(Tensor scale, Entry(dict, kScaleKey, DType::kFloat64));
  ASSIGN_OR_RETURN(Tensor tracker, Entry(dict, kGrowthTrackerKey, DType::kInt64));
  const double s = scale.item();
  if (!std::isfinite(s) || s <= 0) {
    return Invalid("\"scale\" is " + internal::FormatValue(s) + "; it must be finite and positive");
  }
  const int64_t n = ToVector<int64_t>(tracker)[0];
  if (n < 0) {
    return Invalid("\"growth_tracker\" is " + std::to_string(n) + "; it must be at least 0");
  }
  scale_ = s;
  growth_tracker_ = n;
  return OkStatus();
}

}  // namespace trainyard::optim
