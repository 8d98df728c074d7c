// Learning-rate schedules: pure functions of the optimizer step, so a resumed run needs only
// its step count. `step` counts optimizer steps from 0 (the first Step() uses LrAt(0)); the
// trainer calls optimizer.set_lr(schedule.LrAt(step)) before each Step().
#pragma once

#include <cstdint>
#include <memory>

#include "common/status.h"

namespace trainyard::optim {

class LrSchedule {
 public:
  virtual ~LrSchedule() = default;
  // step >= 0 (TY_CHECK). The result is finite and >= 0.
  virtual double LrAt(int64_t step) const = 0;
};

// lr at every step.
class ConstantSchedule final : public LrSchedule {
 public:
  // InvalidArgument unless lr is finite and >= 0.
  static StatusOr<std::unique_ptr<ConstantSchedule>> Create(double lr);
  double LrAt(int64_t step) const override;

 private:
  explicit ConstantSchedule(double lr) : lr_(lr) {}
  double lr_;
};

// torch.optim.lr_scheduler.StepLR stepped once per optimizer step:
// lr * gamma^floor(step / step_size). This is StepLR's closed form; StepLR itself multiplies
// by gamma at each boundary, which can differ in the last bit.
class StepSchedule final : public LrSchedule {
 public:
  // InvalidArgument unless lr >= 0, step_size >= 1, gamma > 0 (all finite).
  static StatusOr<std::unique_ptr<StepSchedule>> Create(double lr, int64_t step_size, double gamma);
  double LrAt(int64_t step) const override;

 private:
  StepSchedule(double lr, int64_t step_size, double gamma)
      : lr_(lr), step_size_(step_size), gamma_(gamma) {}
  double lr_;
  int64_t step_size_;
  double gamma_;
};

// nanoGPT's get_lr (karpathy/nanoGPT train.py), to the bit:
//   step <  warmup_steps:  max_lr * (step + 1) / (warmup_steps + 1)   (linear, never 0)
//   step >  total_steps:   min_lr
//   otherwise:             min_lr + 0.5 * (1 + cos(pi * r)) * (max_lr - min_lr),
//                          r = (step - warmup_steps) / (total_steps - warmup_steps)
// so the rate rises to max_lr at step warmup_steps, falls to min_lr at total_steps
// (nanoGPT's lr_decay_iters) and stays there.
class CosineSchedule final : public LrSchedule {
 public:
  // InvalidArgument unless 0 <= min_lr <= max_lr (finite), warmup_steps >= 0 and
  // total_steps > warmup_steps.
  static StatusOr<std::unique_ptr<CosineSchedule>> Create(double max_lr, int64_t warmup_steps,
                                                          int64_t total_steps, double min_lr);
  double LrAt(int64_t step) const override;

 private:
  CosineSchedule(double max_lr, int64_t warmup_steps, int64_t total_steps, double min_lr)
      : max_lr_(max_lr), warmup_steps_(warmup_steps), total_steps_(total_steps), min_lr_(min_lr) {}
  double max_lr_;
  int64_t warmup_steps_;
  int64_t total_steps_;
  double min_lr_;
};

}  // namespace trainyard::optim
