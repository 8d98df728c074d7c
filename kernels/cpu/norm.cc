#include "kernels/cpu/norm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cpu/simd.h"

namespace trainyard::kernels::cpu {
namespace {

// Columns per task when a reduction runs down the rows of a (rows, n) array.
constexpr int64_t kColumnBlock = 256;

// sum((x - mean)^2)
template <typename T>
TY_SIMD T RowSqDev(const T* x, T mean, int64_t n) {
  T acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) acc[j] += (x[i + j] - mean) * (x[i + j] - mean);
  T s = 0;
  for (; i < n; ++i) s += (x[i] - mean) * (x[i] - mean);
  for (int j = 0; j < 8; ++j) acc[j] += acc[j + 8];
  for (int j = 0; j < 4; ++j) acc[j] += acc[j + 4];
  return s + ((acc[0] + acc[2]) + (acc[1] + acc[3]));
}

// *s1 = sum(gy * w), *s2 = sum(gy * w * (x - mean))
template <typename T>
TY_SIMD void GradSums(const T* x, const T* gy, const T* w, T mean, int64_t n, T* s1, T* s2) {
  T a1[16] = {}, a2[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) {
      const T g = gy[i + j] * w[i + j];
      a1[j] += g;
      a2[j] += g * (x[i + j] - mean);
    }
  T t1 = 0, t2 = 0;
  for (; i < n; ++i) {
    t1 += gy[i] * w[i];
    t2 += gy[i] * w[i] * (x[i] - mean);
  }
  for (int j = 0; j < 16; ++j) t1 += a1[j], t2 += a2[j];
  *s1 = t1;
  *s2 = t2;
}

// y = (x - mean) * rstd * w + b
template <typename T>
TY_SIMD void NormalizeRow(const T* x, T* y, T mean, T rstd, const T* w, const T* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * rstd * w[i] + b[i];
}

// gx = rstd * (gy * w - c1 - (x - mean) * rstd * c2)
template <typename T>
TY_SIMD void LayerNormGradRow(const T* x, const T* gy, const T* w, T* gx, T mean, T rstd, T c1,
                              T c2, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gx[i] = rstd * (gy[i] * w[i] - c1 - (x[i] - mean) * rstd * c2);
}

// gw += gy * (x - mean) * rstd, gb += gy
template <typename T>
TY_SIMD void ParamGradRow(const T* x, const T* gy, T mean, T rstd, T* gw, T* gb, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    gw[i] += gy[i] * (x[i] - mean) * rstd;
    gb[i] += gy[i];
  }
}

// y = x * scale + shift, scalars
template <typename T>
TY_SIMD void AffineRow(const T* x, T* y, T scale, T shift, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale + shift;
}

// y = x * scale + shift, per column
template <typename T>
TY_SIMD void AffineCols(const T* x, T* y, const T* scale, const T* shift, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale[i] + shift[i];
}

// sum(b * (x - mean))
template <typename T>
TY_SIMD T RowDotDev(const T* b, const T* x, T mean, int64_t n) {
  T acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) acc[j] += b[i + j] * (x[i + j] - mean);
  T s = 0;
  for (; i < n; ++i) s += b[i] * (x[i] - mean);
  for (int j = 0; j < 8; ++j) acc[j] += acc[j + 8];
  for (int j = 0; j < 4; ++j) acc[j] += acc[j + 4];
  return s + ((acc[0] + acc[2]) + (acc[1] + acc[3]));
}

// Per column: acc1 += a (when acc1 is set); acc2 += b * (x - mean), or (x - mean)^2 when b is
// null (when acc2 is set).
template <typename T>
TY_SIMD void AccumulateCols(T* acc1, T* acc2, const T* a, const T* b, const T* x, const T* mean,
                            int64_t n) {
  if (acc1 != nullptr)
    for (int64_t i = 0; i < n; ++i) acc1[i] += a[i];
  if (acc2 == nullptr) return;
  if (b != nullptr) {
    for (int64_t i = 0; i < n; ++i) acc2[i] += b[i] * (x[i] - mean[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) acc2[i] += (x[i] - mean[i]) * (x[i] - mean[i]);
  }
}

// y = a * sa + b * sb + s0, scalars
template <typename T>
TY_SIMD void Affine2Row(const T* a, const T* b, T* y, T sa, T sb, T s0, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] * sa + b[i] * sb + s0;
}

// y = a * sa + b * sb + s0, per column
template <typename T>
TY_SIMD void Affine2Cols(const T* a, const T* b, T* y, const T* sa, const T* sb, const T* s0,
                         int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] * sa[i] + b[i] * sb[i] + s0[i];
}

// `value` repeated n times when p is null (a missing weight or bias), else p.
template <typename T>
const T* OrFilled(const T* p, int64_t n, T value, std::vector<T>* storage) {
  if (p != nullptr) return p;
  storage->assign(static_cast<size_t>(n), value);
  return storage->data();
}

// Per-channel sums over (outer, inner) of arrays laid out (outer, c, inner), each output
// written when its pointer is set: s1[ch] = sum a; s2[ch] = sum b * (x - mean[ch]), or
// sum (x - mean[ch])^2 when b is null.
template <typename T>
void ChannelSums(const T* a, const T* b, const T* x, const T* mean, T* s1, T* s2, int64_t outer,
                 int64_t c, int64_t inner) {
  if (inner == 1) {  // (outer, c): reduce down the rows, a block of columns per task
    const int64_t blocks = (c + kColumnBlock - 1) / kColumnBlock;
    ParallelFor(blocks, GrainFor(outer * kColumnBlock), [&](int64_t lo, int64_t hi) {
      for (int64_t blk = lo; blk < hi; ++blk) {
        const int64_t c0 = blk * kColumnBlock, len = std::min(kColumnBlock, c - c0);
        T* acc1 = s1 ? s1 + c0 : nullptr;
        T* acc2 = s2 ? s2 + c0 : nullptr;
        if (acc1) std::fill(acc1, acc1 + len, T(0));
        if (acc2) std::fill(acc2, acc2 + len, T(0));
        for (int64_t o = 0; o < outer; ++o) {
          const int64_t off = o * c + c0;
          AccumulateCols(acc1, acc2, a + off, b ? b + off : nullptr, x + off,
                         mean ? mean + c0 : nullptr, len);
        }
      }
    });
    return;
  }
  ParallelFor(c, GrainFor(outer * inner), [&](int64_t lo, int64_t hi) {
    for (int64_t ch = lo; ch < hi; ++ch) {
      T t1 = 0, t2 = 0;
      for (int64_t o = 0; o < outer; ++o) {
        const int64_t off = (o * c + ch) * inner;
        if (s1) t1 += SumContiguous(a + off, inner);
        if (s2)
          t2 +=
              b ? RowDotDev(b + off, x + off, mean[ch], inner) : RowSqDev(x + off, mean[ch], inner);
      }
      if (s1) s1[ch] = t1;
      if (s2) s2[ch] = t2;
    }
  });
}

// y = a * sa[ch] + b * sb[ch] + s0[ch] over arrays laid out (outer, c, inner).
template <typename T>
void ChannelAffine2(const T* a, const T* b, T* y, const T* sa, const T* sb, const T* s0,
                    int64_t outer, int64_t c, int64_t inner) {
  if (inner == 1) {
    ParallelFor(outer, GrainFor(2 * c), [&](int64_t lo, int64_t hi) {
      for (int64_t o = lo; o < hi; ++o) Affine2Cols(a + o * c, b + o * c, y + o * c, sa, sb, s0, c);
    });
    return;
  }
  ParallelFor(outer * c, GrainFor(2 * inner), [&](int64_t lo, int64_t hi) {
    for (int64_t p = lo; p < hi; ++p) {
      const int64_t ch = p % c, off = p * inner;
      Affine2Row(a + off, b + off, y + off, sa[ch], sb[ch], s0[ch], inner);
    }
  });
}

// y = x * scale[ch] + shift[ch] over x: (outer, c, inner).
template <typename T>
void ChannelAffine(const T* x, T* y, const T* scale, const T* shift, int64_t outer, int64_t c,
                   int64_t inner) {
  if (inner == 1) {
    ParallelFor(outer, GrainFor(c), [&](int64_t lo, int64_t hi) {
      for (int64_t o = lo; o < hi; ++o) AffineCols(x + o * c, y + o * c, scale, shift, c);
    });
    return;
  }
  ParallelFor(outer * c, GrainFor(inner), [&](int64_t lo, int64_t hi) {
    for (int64_t p = lo; p < hi; ++p) {
      AffineRow(x + p * inner, y + p * inner, scale[p % c], shift[p % c], inner);
    }
  });
}

}  // namespace

template <typename T>
void LayerNormForward(const T* x, const T* weight, const T* bias, T* y, T* mean, T* rstd,
                      int64_t rows, int64_t n, T eps) {
  std::vector<T> ones, zeros;
  const T* w = OrFilled(weight, n, T(1), &ones);
  const T* b = OrFilled(bias, n, T(0), &zeros);
  ParallelFor(rows, GrainFor(3 * n), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T* xr = x + r * n;
      const T mu = SumContiguous(xr, n) / static_cast<T>(n);
      const T rs = T(1) / std::sqrt(RowSqDev(xr, mu, n) / static_cast<T>(n) + eps);
      NormalizeRow(xr, y + r * n, mu, rs, w, b, n);
      mean[r] = mu;
      rstd[r] = rs;
    }
  });
}

template <typename T>
void LayerNormBackward(const T* x, const T* gy, const T* mean, const T* rstd, const T* weight,
                       T* gx, T* gweight, T* gbias, int64_t rows, int64_t n) {
  std::vector<T> ones;
  const T* w = OrFilled(weight, n, T(1), &ones);
  if (gx != nullptr) {
    ParallelFor(rows, GrainFor(3 * n), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const int64_t o = r * n;
        T s1, s2;
        GradSums(x + o, gy + o, w, mean[r], n, &s1, &s2);
        const T inv_n = T(1) / static_cast<T>(n);
        LayerNormGradRow(x + o, gy + o, w, gx + o, mean[r], rstd[r], s1 * inv_n,
                         s2 * rstd[r] * inv_n, n);
      }
    });
  }
  if (gweight == nullptr && gbias == nullptr) return;
  std::vector<T> scratch_w, scratch_b;
  T* gw = gweight != nullptr ? gweight : (scratch_w.resize(n), scratch_w.data());
  T* gb = gbias != nullptr ? gbias : (scratch_b.resize(n), scratch_b.data());
  const int64_t blocks = (n + kColumnBlock - 1) / kColumnBlock;
  ParallelFor(blocks, GrainFor(rows * kColumnBlock), [&](int64_t lo, int64_t hi) {
    for (int64_t blk = lo; blk < hi; ++blk) {
      const int64_t j0 = blk * kColumnBlock, len = std::min(kColumnBlock, n - j0);
      std::fill(gw + j0, gw + j0 + len, T(0));
      std::fill(gb + j0, gb + j0 + len, T(0));
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t o = r * n + j0;
        ParamGradRow(x + o, gy + o, mean[r], rstd[r], gw + j0, gb + j0, len);
      }
    }
  });
}

template <typename T>
void BatchNormStats(const T* x, T* mean, T* var, int64_t outer, int64_t c, int64_t inner) {
  const T m = static_cast<T>(outer * inner);
  ChannelSums<T>(x, nullptr, x, nullptr, mean, nullptr, outer, c, inner);
  for (int64_t ch = 0; ch < c; ++ch) mean[ch] /= m;
  // A second pass about the mean (more accurate than E[x^2] - E[x]^2).
  ChannelSums<T>(x, nullptr, x, mean, nullptr, var, outer, c, inner);
  for (int64_t ch = 0; ch < c; ++ch) var[ch] /= m;
}

template <typename T>
void BatchNormForward(const T* x, const T* mean, const T* invstd, const T* weight, const T* bias,
                      T* y, int64_t outer, int64_t c, int64_t inner) {
  std::vector<T> scale(static_cast<size_t>(c)), shift(static_cast<size_t>(c));
  for (int64_t ch = 0; ch < c; ++ch) {
    scale[ch] = invstd[ch] * (weight ? weight[ch] : T(1));
    shift[ch] = (bias ? bias[ch] : T(0)) - mean[ch] * scale[ch];
  }
  ChannelAffine(x, y, scale.data(), shift.data(), outer, c, inner);
}

template <typename T>
void BatchNormTrainingForward(const T* x, const T* weight, const T* bias, T* y, T* running_mean,
                              T* running_var, double momentum, double eps, T* mean, T* invstd,
                              int64_t outer, int64_t c, int64_t inner) {
  std::vector<T> var(static_cast<size_t>(c));
  BatchNormStats(x, mean, var.data(), outer, c, inner);
  const T m = static_cast<T>(outer * inner), mom = static_cast<T>(momentum);
  for (int64_t ch = 0; ch < c; ++ch) {
    invstd[ch] = T(1) / std::sqrt(var[ch] + static_cast<T>(eps));
    if (running_mean == nullptr) continue;
    running_mean[ch] = running_mean[ch] * (T(1) - mom) + mean[ch] * mom;
    running_var[ch] = running_var[ch] * (T(1) - mom) + var[ch] * (m / (m - T(1))) * mom;
  }
  BatchNormForward(x, mean, invstd, weight, bias, y, outer, c, inner);
}

template <typename T>
void BatchNormBackward(const T* x, const T* gy, const T* mean, const T* invstd, const T* weight,
                       T* gx, T* gweight, T* gbias, int64_t outer, int64_t c, int64_t inner,
                       bool training) {
  // sum_g[ch] = sum gy, sum_gd[ch] = sum gy * (x - mean).
  std::vector<T> sum_g(static_cast<size_t>(c)), sum_gd(static_cast<size_t>(c));
  ChannelSums<T>(gy, gy, x, mean, sum_g.data(), sum_gd.data(), outer, c, inner);
  const T m = static_cast<T>(outer * inner);
  if (gx != nullptr) {
    // gx = kg * gy + kx * x + k0 per channel: the formulas above expanded.
    std::vector<T> kg(c), kx(c), k0(c);
    for (int64_t ch = 0; ch < c; ++ch) {
      const T wi = (weight ? weight[ch] : T(1)) * invstd[ch];
      kg[ch] = wi;
      kx[ch] = training ? -wi * invstd[ch] * invstd[ch] * sum_gd[ch] / m : T(0);
      k0[ch] = training ? -wi * sum_g[ch] / m - kx[ch] * mean[ch] : T(0);
    }
    ChannelAffine2(gy, x, gx, kg.data(), kx.data(), k0.data(), outer, c, inner);
  }
  for (int64_t ch = 0; ch < c; ++ch) {
    if (gweight != nullptr) gweight[ch] = sum_gd[ch] * invstd[ch];
    if (gbias != nullptr) gbias[ch] = sum_g[ch];
  }
}

#define TY_INSTANTIATE(T)                                                                          \
  template void LayerNormForward<T>(const T*, const T*, const T*, T*, T*, T*, int64_t, int64_t,    \
                                    T);                                                            \
  template void LayerNormBackward<T>(const T*, const T*, const T*, const T*, const T*, T*, T*, T*, \
                                     int64_t, int64_t);                                            \
  template void BatchNormStats<T>(const T*, T*, T*, int64_t, int64_t, int64_t);                    \
  template void BatchNormTrainingForward<T>(const T*, const T*, const T*, T*, T*, T*, double,      \
                                            double, T*, T*, int64_t, int64_t, int64_t);            \
  template void BatchNormForward<T>(const T*, const T*, const T*, const T*, const T*, T*, int64_t, \
                                    int64_t, int64_t);                                             \
  template void BatchNormBackward<T>(const T*, const T*, const T*, const T*, const T*, T*, T*, T*, \
                                     int64_t, int64_t, int64_t, bool);
TY_INSTANTIATE(float)
TY_INSTANTIATE(double)
#undef TY_INSTANTIATE

}  // namespace trainyard::kernels::cpu
