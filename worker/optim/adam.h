// Adam and AdamW with exactly torch.optim's single-tensor update (amsgrad=False,
// maximize=False). For a parameter's t-th update (t = 1 on the first):
//   Adam:   g = grad + weight_decay * param            (L2 penalty added to the gradient)
//   AdamW:  param *= 1 - lr * weight_decay; g = grad   (decoupled weight decay)
//   exp_avg    = lerp(exp_avg, g, 1 - beta1)
//   exp_avg_sq = beta2 * exp_avg_sq + (1 - beta2) * g^2
//   param     -= lr / (1 - beta1^t) * exp_avg / (sqrt(exp_avg_sq) / sqrt(1 - beta2^t) + eps)
// One fused pass per parameter (kernels/cpu/optim.h). State: "exp_avg" and "exp_avg_sq" (see
// Note [Optimizer state dict] in optimizer.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "worker/optim/optimizer.h"

namespace trainyard::optim {

struct AdamOptions {
  double lr = 1e-3;         // >= 0
  double beta1 = 0.9;       // in [0, 1)
  double beta2 = 0.999;     // in [0, 1)
  double eps = 1e-8;        // >= 0
  double weight_decay = 0;  // >= 0; L2, added to the gradient
};

// As AdamOptions, but weight decay is decoupled and on by default, as in torch.optim.AdamW.
struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;  // >= 0; param *= 1 - lr * weight_decay each step
};

class Adam : public Optimizer {
 public:
  // InvalidArgument naming the field for a bad option, or the parameter for a bad parameter.
  static StatusOr<std::unique_ptr<Adam>> Create(std::vector<NamedTensor> params,
                                                const AdamOptions& options);
  static Status Validate(const AdamOptions& options);

  double lr() const override { return options_.lr; }
  void set_lr(double lr) override;
  // The settings in force; for AdamW, weight_decay is the decoupled one.
  const AdamOptions& options() const { return options_; }

 protected:
  // `name` prefixes errors; `decoupled_weight_decay` selects AdamW's decay.
  Adam(std::string name, std::vector<NamedTensor> params, const AdamOptions& options,
       bool decoupled_weight_decay);
  static Status ValidateAs(const std::string& owner, const AdamOptions& options);

  void Update(const Tensor& param, const Tensor& grad, ParamState& state) override;
  void UpdateAll(const std::vector<PendingUpdate>& updates) override;
  std::map<std::string, double> Hyperparameters() const override;
  StatusOr<std::vector<std::string>> CheckHyperparameters(
      const std::map<std::string, double>& h) const override;
  void SetHyperparameters(const std::map<std::string, double>& h) override;

 private:
  AdamOptions options_;
  bool decoupled_weight_decay_;
};

class AdamW : public Adam {
 public:
  static StatusOr<std::unique_ptr<AdamW>> Create(std::vector<NamedTensor> params,
                                                 const AdamWOptions& options);
  static Status Validate(const AdamWOptions& options);

 private:
  AdamW(std::vector<NamedTensor> params, const AdamWOptions& options);
};

}  // namespace trainyard::optim
