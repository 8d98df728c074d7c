// Stochastic gradient descent with optional momentum, dampening, Nesterov momentum and L2 weight
// decay, with exactly torch.optim.SGD's update (maximize=False):
//   g = grad + weight_decay * param
//   buf = g on a parameter's first update, else momentum * buf + (1 - dampening) * g
//   param -= lr * (momentum == 0 ? g : nesterov ? g + momentum * buf : buf)
// One fused pass per parameter (kernels/cpu/optim.h). State: "momentum_buffer" when
// momentum != 0 (see Note [Optimizer state dict] in optimizer.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "worker/optim/optimizer.h"

namespace trainyard::optim {

struct SGDOptions {
  double lr = 1e-3;         // >= 0
  double momentum = 0;      // >= 0
  double dampening = 0;     // in [0, 1]
  bool nesterov = false;    // needs momentum > 0 and dampening == 0
  double weight_decay = 0;  // >= 0
};

class SGD : public Optimizer {
 public:
  // InvalidArgument naming the field for a bad option, or the parameter for a bad parameter.
  static StatusOr<std::unique_ptr<SGD>> Create(std::vector<NamedTensor> params,
                                               const SGDOptions& options);
  static Status Validate(const SGDOptions& options);

  double lr() const override { return options_.lr; }
  void set_lr(double lr) override;
  const SGDOptions& options() const { return options_; }

 protected:
  void Update(const Tensor& param, const Tensor& grad, ParamState& state) override;
  std::map<std::string, double> Hyperparameters() const override;
  StatusOr<std::vector<std::string>> CheckHyperparameters(
      const std::map<std::string, double>& h) const override;
  void SetHyperparameters(const std::map<std::string, double>& h) override;

 private:
  SGD(std::vector<NamedTensor> params, const SGDOptions& options);
  void CudaUpdate(const Tensor& param, const Tensor& grad, const Tensor& buffer,
                  bool first_step) const;

  SGDOptions options_;
};

}  // namespace trainyard::optim
