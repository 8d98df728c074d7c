#include "kernels/cpu/optim.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/check.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd.h"

namespace trainyard::kernels::cpu {
namespace {

// Note [Fused multiply-add]
// PyTorch's CPU kernels for add(alpha=), lerp and addcmul compute a * b + c with one rounding
// (an FMA instruction, in both their vector and scalar paths: checked against torch 2.x on
// x86-64 with AVX-512). The updates below call std::fma at exactly those places, so they match
// PyTorch and give the same bits on every machine: std::fma is exact by definition (one
// instruction in the AVX2 and AVX-512 clones, a libm call in the baseline clone). Everything
// else (mul_, addcdiv, sqrt, division) rounds each operation, and the code keeps GCC from
// contracting those: C++ builds default to -ffp-contract=fast, so a product whose only use is
// an addition must not be written in the same expression. The one known difference: PyTorch
// builds with MKL take float sqrt from MKL's vector math, which is not always correctly
// rounded, so an element can differ by an ulp there (about 1e-9 relative after 20 steps in
// tests/worker/optim).

// About four reads and two writes per element: chunks of ~8k elements keep a thread busy
// for a few microseconds.
constexpr int64_t kUpdateGrain = 8192;

// The SGD hyperparameters rounded to T, as PyTorch's scalar arguments are.
template <typename T>
struct SgdScalars {
  bool use_weight_decay;
  T weight_decay;
  T momentum;
  T one_minus_dampening;
  bool nesterov;
  T neg_lr;
};

enum class SgdMode { kPlain, kFirstStep, kMomentum };

template <typename T>
TY_SIMD void SgdChunk(SgdMode mode, int64_t n, T* __restrict p, const T* __restrict g,
                      T* __restrict buf, const SgdScalars<T> s) {
  if (mode == SgdMode::kPlain) {
    for (int64_t i = 0; i < n; ++i) {
      const T gi = s.use_weight_decay ? std::fma(s.weight_decay, p[i], g[i]) : g[i];
      p[i] = std::fma(s.neg_lr, gi, p[i]);
    }
  } else if (mode == SgdMode::kFirstStep) {
    for (int64_t i = 0; i < n; ++i) {
      const T gi = s.use_weight_decay ? std::fma(s.weight_decay, p[i], g[i]) : g[i];
      const T d = s.nesterov ? std::fma(s.momentum, gi, gi) : gi;
      buf[i] = gi;
      p[i] = std::fma(s.neg_lr, d, p[i]);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      const T gi = s.use_weight_decay ? std::fma(s.weight_decay, p[i], g[i]) : g[i];
      const T b = std::fma(s.one_minus_dampening, gi, buf[i] * s.momentum);
      const T d = s.nesterov ? std::fma(s.momentum, b, gi) : b;
      buf[i] = b;
      p[i] = std::fma(s.neg_lr, d, p[i]);
    }
  }
}

// The Adam hyperparameters and bias corrections of one step, rounded to T where PyTorch
// rounds them (see AdamUpdate for where each comes from).
template <typename T>
struct AdamScalars {
  T decay;  // param multiplier before the update: 1 - lr * weight_decay (AdamW) or 1
  bool use_l2;
  T l2;
  bool lerp_small;  // lerp base is exp_avg (weight < 0.5) or g
  T lerp_coef;      // weight, or weight - 1
  T beta2;
  T one_minus_beta2;
  T bias_correction2_sqrt;
  T eps;
  T neg_step_size;
};

// Under the project's flags std::sqrt keeps its errno path, and GCC vectorises no loop that
// calls it. So a chunk runs in tiles that stay in L1: a vectorised pass updates the moments,
// a scalar pass takes the square roots, a vectorised pass updates the parameter.
template <typename T>
TY_SIMD void AdamChunk(int64_t n, T* __restrict p, const T* __restrict g, T* __restrict m,
                       T* __restrict v, const AdamScalars<T> s) {
  constexpr int64_t kTile = 512;
  T root[kTile];
  for (int64_t t0 = 0; t0 < n; t0 += kTile) {
    const int64_t len = std::min(kTile, n - t0);
    T* pt = p + t0;
    const T* gt = g + t0;
    T* mt = m + t0;
    T* vt = v + t0;
    for (int64_t i = 0; i < len; ++i) {
      const T gi = s.use_l2 ? std::fma(s.l2, pt[i], gt[i]) : gt[i];
      const T base = s.lerp_small ? mt[i] : gi;
      mt[i] = std::fma(s.lerp_coef, gi - mt[i], base);
      vt[i] = std::fma(s.one_minus_beta2 * gi, gi, vt[i] * s.beta2);
      // Stored here, not folded into the update below: there the product would be contracted
      // into an FMA, and PyTorch rounds it (param.mul_) on its own.
      pt[i] = pt[i] * s.decay;
    }
    for (int64_t i = 0; i < len; ++i) root[i] = std::sqrt(vt[i]);
    for (int64_t i = 0; i < len; ++i) {
      const T denom = root[i] / s.bias_correction2_sqrt + s.eps;
      pt[i] = pt[i] + s.neg_step_size * mt[i] / denom;
    }
  }
}

template <typename T>
AdamScalars<T> MakeAdamScalars(const AdamHyper& h, int64_t step) {
  AdamScalars<T> s;
  const bool decay = h.weight_decay != 0;
  s.decay = decay && h.decoupled_weight_decay ? static_cast<T>(1 - h.lr * h.weight_decay) : T(1);
  s.use_l2 = decay && !h.decoupled_weight_decay;
  s.l2 = static_cast<T>(h.weight_decay);
  // exp_avg.lerp_(grad, 1 - beta1): the weight is rounded to T before the |w| < 0.5 test.
  const T w = static_cast<T>(1 - h.beta1);
  s.lerp_small = std::fabs(w) < T(0.5);
  s.lerp_coef = s.lerp_small ? w : w - T(1);
  s.beta2 = static_cast<T>(h.beta2);
  s.one_minus_beta2 = static_cast<T>(1 - h.beta2);
  // Python float arithmetic on the step count: beta ** step, then bias_correction2 ** 0.5.
  const double t = static_cast<double>(step);
  const double bias_correction1 = 1 - std::pow(h.beta1, t);
  const double bias_correction2 = 1 - std::pow(h.beta2, t);
  s.bias_correction2_sqrt = static_cast<T>(std::pow(bias_correction2, 0.5));
  s.eps = static_cast<T>(h.eps);
  s.neg_step_size = static_cast<T>(-(h.lr / bias_correction1));
  return s;
}

constexpr int64_t kNormBlock = 4096;

// acc = add(acc, x_i) over one block with 8 double lanes (vectorisable), lanes added pairwise.
// `add` spells out any FMA (std::fma) so that every machine gets the same sum.
template <typename T, typename F>
TY_SIMD double BlockSum(const T* x, int64_t n, F add) {
  double acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] = add(acc[j], static_cast<double>(x[i + j]));
  double s = 0;
  for (; i < n; ++i) s = add(s, static_cast<double>(x[i]));
  return s + (((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])));
}

// Blocks of kNormBlock are summed in parallel, block sums in order: the same result for any
// thread count.
template <typename T, typename F>
double BlockedSum(const T* x, int64_t n, F add) {
  const int64_t blocks = (n + kNormBlock - 1) / kNormBlock;
  if (blocks <= 1) return BlockSum(x, n, add);
  std::vector<double> partial(blocks);
  ParallelFor(blocks, 4, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      const int64_t begin = k * kNormBlock;
      partial[k] = BlockSum(x + begin, std::min(kNormBlock, n - begin), add);
    }
  });
  double total = 0;
  for (double v : partial) total += v;
  return total;
}

template <typename T>
TY_SIMD double BlockMaxAbs(const T* x, int64_t n) {
  T best = 0;
  bool nan = false;
  for (int64_t i = 0; i < n; ++i) {
    const T a = std::fabs(x[i]);
    nan |= a != a;
    best = a > best ? a : best;
  }
  return nan ? std::numeric_limits<double>::quiet_NaN() : static_cast<double>(best);
}

}  // namespace

template <typename T>
void SgdUpdate(int64_t n, T* param, const T* grad, T* momentum_buffer, bool first_step,
               const SgdHyper& h) {
  const bool momentum = h.momentum != 0;
  TY_CHECK(!momentum || momentum_buffer != nullptr) << "SgdUpdate: momentum without a buffer";
  const SgdScalars<T> s{h.weight_decay != 0,
                        static_cast<T>(h.weight_decay),
                        static_cast<T>(h.momentum),
                        static_cast<T>(1 - h.dampening),
                        h.nesterov,
                        static_cast<T>(-h.lr)};
  const SgdMode mode = !momentum    ? SgdMode::kPlain
                       : first_step ? SgdMode::kFirstStep
                                    : SgdMode::kMomentum;
  ParallelFor(n, kUpdateGrain, [&](int64_t b, int64_t e) {
    SgdChunk(mode, e - b, param + b, grad + b, momentum ? momentum_buffer + b : nullptr, s);
  });
}

template <typename T>
void AdamUpdate(int64_t n, T* param, const T* grad, T* exp_avg, T* exp_avg_sq, int64_t step,
                const AdamHyper& h) {
  TY_CHECK(step >= 1) << "AdamUpdate: step " << step << " (the first update is step 1)";
  const AdamScalars<T> s = MakeAdamScalars<T>(h, step);
  ParallelFor(n, kUpdateGrain, [&](int64_t b, int64_t e) {
    AdamChunk(e - b, param + b, grad + b, exp_avg + b, exp_avg_sq + b, s);
  });
}

template <typename T>
double SumAbsPow(const T* x, int64_t n, double p) {
  TY_CHECK(p > 0) << "SumAbsPow: p is " << p << "; it must be positive";
  if (p == 2) return BlockedSum(x, n, [](double acc, double v) { return std::fma(v, v, acc); });
  if (p == 1) return BlockedSum(x, n, [](double acc, double v) { return acc + std::fabs(v); });
  return BlockedSum(x, n, [p](double acc, double v) { return acc + std::pow(std::fabs(v), p); });
}

template <typename T>
double MaxAbs(const T* x, int64_t n) {
  const int64_t blocks = (n + kNormBlock - 1) / kNormBlock;
  std::vector<double> partial(blocks);
  ParallelFor(blocks, 4, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      const int64_t begin = k * kNormBlock;
      partial[k] = BlockMaxAbs(x + begin, std::min(kNormBlock, n - begin));
    }
  });
  double best = 0;
  for (double v : partial) {
    if (v != v) return v;
    best = std::max(best, v);
  }
  return best;
}

template void SgdUpdate<float>(int64_t, float*, const float*, float*, bool, const SgdHyper&);
template void SgdUpdate<double>(int64_t, double*, const double*, double*, bool, const SgdHyper&);
template void AdamUpdate<float>(int64_t, float*, const float*, float*, float*, int64_t,
                                const AdamHyper&);
template void AdamUpdate<double>(int64_t, double*, const double*, double*, double*, int64_t,
                                 const AdamHyper&);
template double SumAbsPow<float>(const float*, int64_t, double);
template double SumAbsPow<double>(const double*, int64_t, double);
template double MaxAbs<float>(const float*, int64_t);
template double MaxAbs<double>(const double*, int64_t);

}  // namespace trainyard::kernels::cpu
