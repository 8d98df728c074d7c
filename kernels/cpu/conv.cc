#include "kernels/cpu/conv.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cpu/simd.h"

namespace trainyard::kernels::cpu {
namespace {

// Partial weight gradients summed in a fixed order when the batch is split over threads. The
// count depends on the batch size only, never on the thread count (determinism).
constexpr int64_t kMaxWeightPartials = 16;

// dst[i] = src[i * stride] for i < n.
template <typename T>
TY_SIMD void GatherStrided(T* dst, const T* src, int64_t n, int64_t stride) {
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i * stride];
}

// dst[i * stride] += src[i] for i < n (stride >= 1, so no two i write the same element).
template <typename T>
TY_SIMD void ScatterAddStrided(T* dst, const T* src, int64_t n, int64_t stride) {
  for (int64_t i = 0; i < n; ++i) dst[i * stride] += src[i];
}

template <typename T>
TY_SIMD void AddInto(T* dst, const T* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

// Sizes of one group's GEMM: weight block (og, k) times col block (k, l).
struct GemmDims {
  int64_t og;        // output channels per group
  int64_t k;         // input channels per group * kH * kW
  int64_t l;         // oH * oW
  int64_t x_sample;  // elements of one input image
  int64_t y_sample;  // elements of one output image
};

GemmDims DimsOf(const Conv2dShape& s) {
  const int64_t cg = s.in_channels / s.groups;
  return GemmDims{s.out_channels / s.groups, cg * s.kernel_h * s.kernel_w, s.out_h * s.out_w,
                  s.in_channels * s.height * s.width, s.out_channels * s.out_h * s.out_w};
}

// A 1x1 kernel with unit stride and no padding reads the image itself as its col matrix.
bool IsPointwise(const Conv2dShape& s) {
  return s.kernel_h == 1 && s.kernel_w == 1 && s.stride_h == 1 && s.stride_w == 1 && s.pad_h == 0 &&
         s.pad_w == 0;
}

// When Gemm would not cut the per-image product over threads (kernels/cpu/gemm.h), the batch is
// the dimension to spread over them.
bool ParallelOverBatch(const Conv2dShape& s, const GemmDims& d) {
  return s.batch > 1 && GemmBlocks(d.og, d.l, d.k) == 1;
}

int64_t ColSize(const Conv2dShape& s, const GemmDims& d) {
  return IsPointwise(s) ? 0 : s.groups * d.k * d.l;
}

// The col matrix of image `im`: im itself for pointwise kernels, else Im2Col into `col`.
template <typename T>
const T* ColsOf(const Conv2dShape& s, const T* im, T* col) {
  if (IsPointwise(s)) return im;
  Im2Col(s, s.in_channels, im, col);
  return col;
}

// Calls fn(n, col) for every sample n; col is scratch for one sample's col matrix.
template <typename T, typename F>
void ForEachSample(const Conv2dShape& s, const F& fn) {
  const GemmDims d = DimsOf(s);
  auto run = [&](int64_t begin, int64_t end) {
    std::vector<T> col(static_cast<size_t>(ColSize(s, d)));
    for (int64_t n = begin; n < end; ++n) fn(n, col.data());
  };
  if (ParallelOverBatch(s, d)) {
    ParallelFor(s.batch, 1, run);
  } else {
    run(0, s.batch);
  }
}

// gweight_part (O, K) = sum over samples [begin, end) of gy_n (og, l) col_n^T, per group.
template <typename T>
void WeightGradOverSamples(const Conv2dShape& s, const T* gy, const T* x, int64_t begin,
                           int64_t end, T* col, T* gweight_part) {
  const GemmDims d = DimsOf(s);
  for (int64_t n = begin; n < end; ++n) {
    const T* cols = ColsOf(s, x + n * d.x_sample, col);
    const T beta = n == begin ? T(0) : T(1);
    for (int64_t g = 0; g < s.groups; ++g) {
      Gemm<T>(false, true, d.og, d.k, d.l, T(1), gy + n * d.y_sample + g * d.og * d.l, d.l,
              cols + g * d.k * d.l, d.l, beta, gweight_part + g * d.og * d.k, d.k);
    }
  }
}

}  // namespace

int64_t WindowOutSize(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation) {
  const int64_t span = in + 2 * pad - dilation * (kernel - 1) - 1;
  if (span < 0) return 0;
  return span / stride + 1;
}

OutRange ValidOutputs(int64_t out, int64_t stride, int64_t offset, int64_t in) {
  const int64_t lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  const int64_t hi = in - offset <= 0 ? 0 : (in - offset + stride - 1) / stride;
  const int64_t h = std::min(hi, out);
  return OutRange{std::min(lo, h), h};
}

namespace {

// Note [Shifted taps]
// With unit strides and out_w == W (a "same" convolution along the rows), col entry
// (oh, ow) of tap (ki, kj) reads pixel index oh * W + ow + shift with a shift that is the same
// for the whole tap. The entries that read real pixels form one contiguous span of the
// flattened (oH, oW) plane, except for the columns ow outside [lo, hi), whose index would wrap
// into a neighbouring row: a per-column mask blanks those. A tap is then one masked pass over
// one span, instead of a short copy per output row.
struct ShiftedTap {
  int64_t begin = 0, end = 0;  // the span in the flattened (oH, oW) plane; empty if begin >= end
  int64_t shift = 0;           // pixel index minus col index
};

bool HasShiftedTaps(const Conv2dShape& s) {
  return s.stride_h == 1 && s.stride_w == 1 && s.out_w == s.width;
}

ShiftedTap TapSpan(const Conv2dShape& s, int64_t ki, int64_t kj) {
  const int64_t sh = ki * s.dilation_h - s.pad_h, sw = kj * s.dilation_w - s.pad_w;
  const int64_t oh_lo = std::max<int64_t>(0, -sh), oh_hi = std::min(s.out_h, s.height - sh);
  const OutRange ow = ValidOutputs(s.out_w, 1, sw, s.width);
  ShiftedTap t;
  t.shift = sh * s.width + sw;
  if (oh_lo < oh_hi && ow.lo < ow.hi) {
    t.begin = oh_lo * s.out_w + ow.lo;
    t.end = (oh_hi - 1) * s.out_w + ow.hi;
  }
  return t;
}

// masks[kj * l + i] = 1 where column i % oW of tap column kj reads a real pixel, else 0.
template <typename T>
std::vector<T> ColumnMasks(const Conv2dShape& s) {
  const int64_t l = s.out_h * s.out_w;
  std::vector<T> masks(static_cast<size_t>(s.kernel_w * l));
  for (int64_t kj = 0; kj < s.kernel_w; ++kj) {
    const OutRange ow = ValidOutputs(s.out_w, 1, kj * s.dilation_w - s.pad_w, s.width);
    T* m = masks.data() + kj * l;
    for (int64_t oh = 0; oh < s.out_h; ++oh, m += s.out_w)
      for (int64_t c = 0; c < s.out_w; ++c) m[c] = c >= ow.lo && c < ow.hi ? T(1) : T(0);
  }
  return masks;
}

template <typename T>
TY_SIMD void MaskedCopy(T* __restrict dst, const T* __restrict src, const T* __restrict mask,
                        int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = mask[i] != T(0) ? src[i] : T(0);
}

template <typename T>
TY_SIMD void MaskedAdd(T* __restrict dst, const T* __restrict src, const T* __restrict mask,
                       int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += mask[i] != T(0) ? src[i] : T(0);
}

// Im2Col for HasShiftedTaps shapes: row r = (c, ki, kj) is zeros around one masked span.
template <typename T>
void Im2ColShifted(const Conv2dShape& s, int64_t channels, const T* im, T* col) {
  const int64_t l = s.out_h * s.out_w, taps = s.kernel_h * s.kernel_w;
  const std::vector<T> masks = ColumnMasks<T>(s);
  ParallelFor(channels * taps, GrainFor(l), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t c = r / taps, ki = (r % taps) / s.kernel_w, kj = r % s.kernel_w;
      const ShiftedTap t = TapSpan(s, ki, kj);
      T* dst = col + r * l;
      if (t.begin >= t.end) {
        std::fill(dst, dst + l, T(0));
        continue;
      }
      std::fill(dst, dst + t.begin, T(0));
      MaskedCopy(dst + t.begin, im + c * s.height * s.width + t.begin + t.shift,
                 masks.data() + kj * l + t.begin, t.end - t.begin);
      std::fill(dst + t.end, dst + l, T(0));
    }
  });
}

// Col2Im for HasShiftedTaps shapes; each pixel is still summed in (ki, kj) order.
template <typename T>
void Col2ImShifted(const Conv2dShape& s, int64_t channels, const T* col, T* im) {
  const int64_t l = s.out_h * s.out_w, taps = s.kernel_h * s.kernel_w;
  const std::vector<T> masks = ColumnMasks<T>(s);
  ParallelFor(channels, GrainFor(taps * l), [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      T* plane = im + c * s.height * s.width;
      std::fill(plane, plane + s.height * s.width, T(0));
      for (int64_t tap = 0; tap < taps; ++tap) {
        const int64_t kj = tap % s.kernel_w;
        const ShiftedTap t = TapSpan(s, tap / s.kernel_w, kj);
        if (t.begin >= t.end) continue;
        MaskedAdd(plane + t.begin + t.shift, col + (c * taps + tap) * l + t.begin,
                  masks.data() + kj * l + t.begin, t.end - t.begin);
      }
    }
  });
}

}  // namespace

template <typename T>
void Im2Col(const Conv2dShape& s, int64_t channels, const T* im, T* col) {
  if (HasShiftedTaps(s)) return Im2ColShifted(s, channels, im, col);
  const int64_t l = s.out_h * s.out_w, taps = s.kernel_h * s.kernel_w;
  ParallelFor(channels * taps, GrainFor(l), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t c = r / taps, ki = (r % taps) / s.kernel_w, kj = r % s.kernel_w;
      const int64_t off_w = kj * s.dilation_w - s.pad_w;
      const OutRange ow = ValidOutputs(s.out_w, s.stride_w, off_w, s.width);
      const T* plane = im + c * s.height * s.width;
      T* dst = col + r * l;
      for (int64_t oh = 0; oh < s.out_h; ++oh, dst += s.out_w) {
        const int64_t ih = oh * s.stride_h - s.pad_h + ki * s.dilation_h;
        if (ih < 0 || ih >= s.height || ow.lo == ow.hi) {
          std::fill(dst, dst + s.out_w, T(0));
          continue;
        }
        std::fill(dst, dst + ow.lo, T(0));
        GatherStrided(dst + ow.lo, plane + ih * s.width + ow.lo * s.stride_w + off_w, ow.hi - ow.lo,
                      s.stride_w);
        std::fill(dst + ow.hi, dst + s.out_w, T(0));
      }
    }
  });
}

template <typename T>
void Col2Im(const Conv2dShape& s, int64_t channels, const T* col, T* im) {
  if (HasShiftedTaps(s)) return Col2ImShifted(s, channels, col, im);
  const int64_t l = s.out_h * s.out_w, taps = s.kernel_h * s.kernel_w;
  // One chunk owns whole channel planes: each pixel is summed in (ki, kj, oh) order.
  ParallelFor(channels, GrainFor(taps * l), [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      T* plane = im + c * s.height * s.width;
      std::fill(plane, plane + s.height * s.width, T(0));
      for (int64_t t = 0; t < taps; ++t) {
        const int64_t ki = t / s.kernel_w, kj = t % s.kernel_w;
        const int64_t off_w = kj * s.dilation_w - s.pad_w;
        const OutRange ow = ValidOutputs(s.out_w, s.stride_w, off_w, s.width);
        if (ow.lo == ow.hi) continue;
        const T* src = col + (c * taps + t) * l;
        for (int64_t oh = 0; oh < s.out_h; ++oh) {
          const int64_t ih = oh * s.stride_h - s.pad_h + ki * s.dilation_h;
          if (ih < 0 || ih >= s.height) continue;
          ScatterAddStrided(plane + ih * s.width + ow.lo * s.stride_w + off_w,
                            src + oh * s.out_w + ow.lo, ow.hi - ow.lo, s.stride_w);
        }
      }
    }
  });
}

template <typename T>
void Conv2dForward(const Conv2dShape& s, const T* x, const T* weight, const T* bias, T* y) {
  const GemmDims d = DimsOf(s);
  ForEachSample<T>(s, [&](int64_t n, T* col) {
    const T* cols = ColsOf(s, x + n * d.x_sample, col);
    T* yn = y + n * d.y_sample;
    if (bias != nullptr) {
      for (int64_t o = 0; o < s.out_channels; ++o)
        std::fill(yn + o * d.l, yn + (o + 1) * d.l, bias[o]);
    }
    // y_g (og, l) = w_g (og, k) col_g (k, l) [+ bias rows]
    for (int64_t g = 0; g < s.groups; ++g) {
      Gemm<T>(false, false, d.og, d.l, d.k, T(1), weight + g * d.og * d.k, d.k,
              cols + g * d.k * d.l, d.l, bias != nullptr ? T(1) : T(0), yn + g * d.og * d.l, d.l);
    }
  });
}

template <typename T>
void Conv2dBackwardInput(const Conv2dShape& s, const T* gy, const T* weight, T* gx) {
  const GemmDims d = DimsOf(s);
  const bool pointwise = IsPointwise(s);
  ForEachSample<T>(s, [&](int64_t n, T* col) {
    T* gxn = gx + n * d.x_sample;
    T* cols = pointwise ? gxn : col;
    // col_g (k, l) = w_g^T (k, og) gy_g (og, l)
    for (int64_t g = 0; g < s.groups; ++g) {
      Gemm<T>(true, false, d.k, d.l, d.og, T(1), weight + g * d.og * d.k, d.k,
              gy + n * d.y_sample + g * d.og * d.l, d.l, T(0), cols + g * d.k * d.l, d.l);
    }
    if (!pointwise) Col2Im(s, s.in_channels, col, gxn);
  });
}

template <typename T>
void Conv2dBackwardWeight(const Conv2dShape& s, const T* gy, const T* x, T* gweight) {
  const GemmDims d = DimsOf(s);
  const int64_t wsize = s.out_channels * d.k;
  if (s.batch == 0) {
    std::fill(gweight, gweight + wsize, T(0));
    return;
  }
  const int64_t parts =
      ParallelOverBatch(s, d) ? std::min(s.batch, kMaxWeightPartials) : int64_t{1};
  std::vector<T> partials(static_cast<size_t>((parts - 1) * wsize));
  ParallelFor(parts, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> col(static_cast<size_t>(ColSize(s, d)));
    for (int64_t p = begin; p < end; ++p) {
      T* acc = p == 0 ? gweight : partials.data() + (p - 1) * wsize;
      WeightGradOverSamples(s, gy, x, p * s.batch / parts, (p + 1) * s.batch / parts, col.data(),
                            acc);
    }
  });
  for (int64_t p = 1; p < parts; ++p) AddInto(gweight, partials.data() + (p - 1) * wsize, wsize);
}

template <typename T>
void Conv2dBackwardBias(const Conv2dShape& s, const T* gy, T* gbias) {
  const int64_t l = s.out_h * s.out_w;
  ParallelFor(s.out_channels, GrainFor(s.batch * l), [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o) {
      double acc = 0;
      for (int64_t n = 0; n < s.batch; ++n)
        acc += static_cast<double>(SumContiguous(gy + (n * s.out_channels + o) * l, l));
      gbias[o] = static_cast<T>(acc);
    }
  });
}

#define TY_INSTANTIATE(T)                                                               \
  template void Im2Col<T>(const Conv2dShape&, int64_t, const T*, T*);                   \
  template void Col2Im<T>(const Conv2dShape&, int64_t, const T*, T*);                   \
  template void Conv2dForward<T>(const Conv2dShape&, const T*, const T*, const T*, T*); \
  template void Conv2dBackwardInput<T>(const Conv2dShape&, const T*, const T*, T*);     \
  template void Conv2dBackwardWeight<T>(const Conv2dShape&, const T*, const T*, T*);    \
  template void Conv2dBackwardBias<T>(const Conv2dShape&, const T*, T*);
TY_INSTANTIATE(float)
TY_INSTANTIATE(double)
#undef TY_INSTANTIATE

}  // namespace trainyard::kernels::cpu
