// Fused optimizer updates and gradient norms over contiguous arrays. An update reads the
// gradient and the optimizer state once and writes the parameter and the state in the same
// pass. The arithmetic and its order are those of torch.optim's single-tensor CPU path, one
// PyTorch op at a time, with each hyperparameter computed in double and rounded to T where
// PyTorch rounds it, and with a fused multiply-add exactly where PyTorch's kernels fuse (see
// Note [Fused multiply-add] in optim.cc). Results are the same on every machine and for every
// thread count, and equal PyTorch's bit for bit except where its MKL float sqrt is one ulp off.
// T is float or double.
#pragma once

#include <cstdint>

namespace trainyard::kernels::cpu {

struct SgdHyper {
  double lr = 0;
  double momentum = 0;  // 0: no momentum buffer
  double dampening = 0;
  double weight_decay = 0;  // L2: added to the gradient as weight_decay * param
  bool nesterov = false;
};

// With g = fma(weight_decay, param, grad) (only when weight_decay != 0):
//   momentum == 0:  param = fma(-lr, g, param)     (momentum_buffer unused, may be null)
//   otherwise:      buf = first_step ? g : fma(1 - dampening, g, buf * momentum)
//                   param = fma(-lr, nesterov ? fma(momentum, buf, g) : buf, param)
// All arrays hold n elements; param and momentum_buffer are updated in place.
template <typename T>
void SgdUpdate(int64_t n, T* param, const T* grad, T* momentum_buffer, bool first_step,
               const SgdHyper& h);

struct AdamHyper {
  double lr = 0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  // false (Adam): g = grad + weight_decay * param. true (AdamW): param *= 1 - lr * weight_decay
  // before the update, and g = grad.
  bool decoupled_weight_decay = false;
};

// One Adam step; `step` is this update's count, 1 for the first (bias corrections use it).
// With g = fma(weight_decay, param, grad) for Adam with weight decay, else grad, and
// param *= 1 - lr * weight_decay first for AdamW:
//   exp_avg    = lerp(exp_avg, g, 1 - beta1)
//   exp_avg_sq = fma((1 - beta2) * g, g, exp_avg_sq * beta2)
//   denom      = sqrt(exp_avg_sq) / sqrt(1 - beta2^step) + eps
//   param      = param + (-(lr / (1 - beta1^step)) * exp_avg) / denom
// lerp is PyTorch's: fma(w, b - a, a) for |w| < 0.5, else fma(w - 1, b - a, b).
template <typename T>
void AdamUpdate(int64_t n, T* param, const T* grad, T* exp_avg, T* exp_avg_sq, int64_t step,
                const AdamHyper& h);

// sum_i |x_i|^p, accumulated in double (p = 1 and p = 2 without calling pow). p > 0.
template <typename T>
double SumAbsPow(const T* x, int64_t n, double p);

// max_i |x_i|; NaN if any element is NaN; 0 when n == 0.
template <typename T>
double MaxAbs(const T* x, int64_t n);

}  // namespace trainyard::kernels::cpu
