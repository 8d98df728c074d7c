#include "worker/optim/schedule.h"

#include <cmath>

#include "common/check.h"
#include "worker/optim/validate.h"

namespace trainyard::optim {
namespace {

constexpr double kPi = 3.141592653589793;  // Python's math.pi

void CheckStep(int64_t step) { TY_CHECK(step >= 0) << "LrAt: step " << step << " is negative"; }

}  // namespace

StatusOr<std::unique_ptr<ConstantSchedule>> ConstantSchedule::Create(double lr) {
  RETURN_IF_ERROR(internal::CheckAtLeast("constant schedule", "lr", lr, 0));
  return std::unique_ptr<ConstantSchedule>(new ConstantSchedule(lr));
}

double ConstantSchedule::LrAt(int64_t step) const {
  CheckStep(step);
  return lr_;
}

StatusOr<std::unique_ptr<StepSchedule>> StepSchedule::Create(double lr, int64_t step_size,
                                                             double gamma) {
  const char* owner = "step schedule";
  RETURN_IF_ERROR(internal::CheckAtLeast(owner, "lr", lr, 0));
  RETURN_IF_ERROR(internal::CheckCountAtLeast(owner, "step_size", step_size, 1));
  RETURN_IF_ERROR(internal::CheckPositive(owner, "gamma", gamma));
  return std::unique_ptr<StepSchedule>(new StepSchedule(lr, step_size, gamma));
}

double StepSchedule::LrAt(int64_t step) const {
  CheckStep(step);
  return lr_ * std::pow(gamma_, static_cast<double>(step / step_size_));
}

StatusOr<std::unique_ptr<CosineSchedule>> CosineSchedule::Create(double max_lr,
                                                                 int64_t warmup_steps,
                                                                 int64_t total_steps,
                                                                 double min_lr) {
  const char* owner = "cosine schedule";
  RETURN_IF_ERROR(internal::CheckAtLeast(owner, "max_lr", max_lr, 0));
  RETURN_IF_ERROR(internal::CheckBetween(owner, "min_lr", min_lr, 0, max_lr));
  RETURN_IF_ERROR(internal::CheckCountAtLeast(owner, "warmup_steps", warmup_steps, 0));
  RETURN_IF_ERROR(internal::CheckCountAtLeast(owner, "total_steps", total_steps, warmup_steps + 1));
  return std::unique_ptr<CosineSchedule>(
      new CosineSchedule(max_lr, warmup_steps, total_steps, min_lr));
}

double CosineSchedule::LrAt(int64_t step) const {
  CheckStep(step);
  if (step < warmup_steps_) {
    return max_lr_ * static_cast<double>(step + 1) / static_cast<double>(warmup_steps_ + 1);
  }
  if (step > total_steps_) return min_lr_;
  const double ratio =
      static_cast<double>(step - warmup_steps_) / static_cast<double>(total_steps_ - warmup_steps_);
  const double coeff = 0.5 * (1.0 + std::cos(kPi * ratio));
  return min_lr_ + coeff * (max_lr_ - min_lr_);
}

}  // namespace trainyard::optim
