#include "kernels/cpu/pool.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "kernels/cpu/conv.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cpu/simd.h"

namespace trainyard::kernels::cpu {
namespace {

// Windows are swept one kernel tap (ki, kj) at a time along a whole output row, so that the
// inner loops run over output columns (vectorisable). Per output element, taps are still
// visited in row-major window order, as in PyTorch's direct loops.

// Running max over n outputs of tap values src[i * stride]; the first tap seen always wins
// (arg < 0), later ones when strictly greater or NaN. index0 is the flat index of src[0].
template <typename T>
TY_SIMD void MaxRun(T* best, int64_t* arg, const T* src, int64_t n, int64_t stride,
                    int64_t index0) {
  for (int64_t i = 0; i < n; ++i) {
    const T v = src[i * stride];
    const bool take = arg[i] < 0 || v > best[i] || v != v;
    best[i] = take ? v : best[i];
    arg[i] = take ? index0 + i * stride : arg[i];
  }
}

// dst[i] += src[i * stride]
template <typename T>
TY_SIMD void AddStrided(T* dst, const T* src, int64_t n, int64_t stride) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i * stride];
}

// dst[i * stride] += src[i] (stride >= 1: no two i write the same element)
template <typename T>
TY_SIMD void ScatterAddStrided(T* dst, const T* src, int64_t n, int64_t stride) {
  for (int64_t i = 0; i < n; ++i) dst[i * stride] += src[i];
}

template <typename T>
TY_SIMD void AddScalar(T* dst, T v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += v;
}

// Calls fn(plane) for every plane, split over threads; `work` is the cost of one plane.
template <typename F>
void ForEachPlane(const Pool2dShape& s, int64_t work, const F& fn) {
  ParallelFor(s.planes, GrainFor(work), [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) fn(p);
  });
}

// Calls fn(ih, off_w, range) for every tap of output row oh that reads an input row:
// tap columns ow in [range.lo, range.hi) read input pixel (ih, ow * stride_w + off_w).
template <typename F>
void ForEachTap(const Pool2dShape& s, int64_t oh, const F& fn) {
  for (int64_t ki = 0; ki < s.kernel_h; ++ki) {
    const int64_t ih = oh * s.stride_h - s.pad_h + ki * s.dilation_h;
    if (ih < 0 || ih >= s.height) continue;
    for (int64_t kj = 0; kj < s.kernel_w; ++kj) {
      const int64_t off_w = kj * s.dilation_w - s.pad_w;
      const OutRange r = ValidOutputs(s.out_w, s.stride_w, off_w, s.width);
      if (r.lo < r.hi) fn(ih, off_w, r);
    }
  }
}

// Avg-pool divisor factor of output o along one axis (the divisor is the product of two).
int64_t AvgFactor(int64_t o, int64_t stride, int64_t pad, int64_t kernel, int64_t in,
                  bool count_include_pad) {
  const int64_t start = o * stride - pad;
  const int64_t end = std::min(start + kernel, in + pad);
  if (count_include_pad) return end - start;
  return std::min(end, in) - std::max(start, int64_t{0});
}

std::vector<int64_t> AvgFactors(int64_t out, int64_t stride, int64_t pad, int64_t kernel,
                                int64_t in, bool count_include_pad) {
  std::vector<int64_t> f(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) f[o] = AvgFactor(o, stride, pad, kernel, in, count_include_pad);
  return f;
}

// Adaptive bins: [floor(o * in / out), ceil((o + 1) * in / out)).
int64_t BinStart(int64_t o, int64_t in, int64_t out) { return o * in / out; }
int64_t BinEnd(int64_t o, int64_t in, int64_t out) { return ((o + 1) * in + out - 1) / out; }

// The common 2x2 window with stride 2 and no padding or dilation: the same rule as MaxRun over
// the taps (0,0), (0,1), (1,0), (1,1) in that order, written as selects. Output i of a row
// reads r0[2i], r0[2i+1] (input row 2 oh, flat index index0 + 2i) and r1[2i], r1[2i+1].
template <typename T>
inline void Max2x2(T* best, int64_t* arg, const T* r0, const T* r1, int64_t i, int64_t index0,
                   int64_t width) {
  T b = r0[2 * i];
  int64_t a = index0 + 2 * i;
  const T v1 = r0[2 * i + 1], v2 = r1[2 * i], v3 = r1[2 * i + 1];
  bool take = v1 > b || v1 != v1;
  b = take ? v1 : b;
  a = take ? index0 + 2 * i + 1 : a;
  take = v2 > b || v2 != v2;
  b = take ? v2 : b;
  a = take ? index0 + width + 2 * i : a;
  take = v3 > b || v3 != v3;
  b = take ? v3 : b;
  a = take ? index0 + width + 2 * i + 1 : a;
  best[i] = b;
  arg[i] = a;
}

// One output row of n. Rows are short (7 to 28 outputs in small CNNs), too short for GCC's
// vector loop and its scalar remainder, so the row goes in groups of 8 lanes, the last group
// overlapping the one before (an output is a pure function of the input, so writing it twice
// is harmless).
template <typename T>
TY_SIMD void MaxRow2x2(T* __restrict best, int64_t* __restrict arg, const T* __restrict r0,
                       const T* __restrict r1, int64_t n, int64_t index0, int64_t width) {
  constexpr int64_t kLanes = 8;
  if (n < kLanes) {
    for (int64_t i = 0; i < n; ++i) Max2x2(best, arg, r0, r1, i, index0, width);
    return;
  }
  for (int64_t i0 = 0; i0 < n; i0 += kLanes) {
    const int64_t b = std::min(i0, n - kLanes);
    for (int64_t l = 0; l < kLanes; ++l) Max2x2(best, arg, r0, r1, b + l, index0, width);
  }
}

// The adjoint of MaxRow2x2 for one output row: each of the four pixels under window i gets
// gy[i] if it is the window's argmax, else 0.
template <typename T>
TY_SIMD void RouteRow2x2(T* __restrict g0, T* __restrict g1, const T* __restrict gy,
                         const int64_t* __restrict arg, int64_t n, int64_t index0, int64_t width) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t a = arg[i] - index0 - 2 * i;  // 0, 1, width or width + 1
    g0[2 * i] = a == 0 ? gy[i] : T(0);
    g0[2 * i + 1] = a == 1 ? gy[i] : T(0);
    g1[2 * i] = a == width ? gy[i] : T(0);
    g1[2 * i + 1] = a == width + 1 ? gy[i] : T(0);
  }
}

bool IsPlain2x2(const Pool2dShape& s) {
  return s.kernel_h == 2 && s.kernel_w == 2 && s.stride_h == 2 && s.stride_w == 2 && s.pad_h == 0 &&
         s.pad_w == 0 && s.dilation_h == 1 && s.dilation_w == 1;
}

}  // namespace

template <typename T>
void MaxPool2dForward(const Pool2dShape& s, const T* x, T* y, int64_t* argmax) {
  const int64_t hw = s.height * s.width, ohw = s.out_h * s.out_w;
  if (IsPlain2x2(s)) {
    ForEachPlane(s, 4 * ohw, [&](int64_t p) {
      for (int64_t oh = 0; oh < s.out_h; ++oh) {
        const int64_t index0 = 2 * oh * s.width;
        const T* r0 = x + p * hw + index0;
        MaxRow2x2(y + p * ohw + oh * s.out_w, argmax + p * ohw + oh * s.out_w, r0, r0 + s.width,
                  s.out_w, index0, s.width);
      }
    });
    return;
  }
  ForEachPlane(s, ohw * s.kernel_h * s.kernel_w, [&](int64_t p) {
    const T* xp = x + p * hw;
    for (int64_t oh = 0; oh < s.out_h; ++oh) {
      T* yr = y + p * ohw + oh * s.out_w;
      int64_t* ar = argmax + p * ohw + oh * s.out_w;
      std::fill(yr, yr + s.out_w, -std::numeric_limits<T>::infinity());
      std::fill(ar, ar + s.out_w, int64_t{-1});
      ForEachTap(s, oh, [&](int64_t ih, int64_t off_w, OutRange r) {
        const int64_t index0 = ih * s.width + r.lo * s.stride_w + off_w;
        MaxRun(yr + r.lo, ar + r.lo, xp + index0, r.hi - r.lo, s.stride_w, index0);
      });
    }
  });
}

template <typename T>
void MaxPool2dBackward(const Pool2dShape& s, const T* gy, const int64_t* argmax, T* gx) {
  const int64_t hw = s.height * s.width, ohw = s.out_h * s.out_w;
  if (IsPlain2x2(s)) {
    // Windows do not overlap: every pixel gets its window's gradient or zero, written once.
    ForEachPlane(s, 2 * hw, [&](int64_t p) {
      for (int64_t oh = 0; oh < s.out_h; ++oh) {
        const int64_t o = p * ohw + oh * s.out_w;
        T* g0 = gx + p * hw + 2 * oh * s.width;
        RouteRow2x2(g0, g0 + s.width, gy + o, argmax + o, s.out_w, 2 * oh * s.width, s.width);
      }
      // Rows and columns that no window reads (odd sizes) get zeros.
      for (int64_t ih = 0; ih < s.height; ++ih) {
        T* row = gx + p * hw + ih * s.width;
        if (ih >= 2 * s.out_h) {
          std::fill(row, row + s.width, T(0));
        } else {
          std::fill(row + 2 * s.out_w, row + s.width, T(0));
        }
      }
    });
    return;
  }
  ForEachPlane(s, ohw + hw, [&](int64_t p) {
    T* gxp = gx + p * hw;
    std::fill(gxp, gxp + hw, T(0));
    for (int64_t i = 0; i < ohw; ++i) {
      const int64_t a = argmax[p * ohw + i];
      if (a >= 0) gxp[a] += gy[p * ohw + i];
    }
  });
}

template <typename T>
void AvgPool2dForward(const Pool2dShape& s, bool count_include_pad, const T* x, T* y) {
  const int64_t hw = s.height * s.width, ohw = s.out_h * s.out_w;
  const auto fh = AvgFactors(s.out_h, s.stride_h, s.pad_h, s.kernel_h, s.height, count_include_pad);
  const auto fw = AvgFactors(s.out_w, s.stride_w, s.pad_w, s.kernel_w, s.width, count_include_pad);
  ForEachPlane(s, ohw * s.kernel_h * s.kernel_w, [&](int64_t p) {
    const T* xp = x + p * hw;
    for (int64_t oh = 0; oh < s.out_h; ++oh) {
      T* yr = y + p * ohw + oh * s.out_w;
      std::fill(yr, yr + s.out_w, T(0));
      ForEachTap(s, oh, [&](int64_t ih, int64_t off_w, OutRange r) {
        AddStrided(yr + r.lo, xp + ih * s.width + r.lo * s.stride_w + off_w, r.hi - r.lo,
                   s.stride_w);
      });
      for (int64_t ow = 0; ow < s.out_w; ++ow) yr[ow] /= static_cast<T>(fh[oh] * fw[ow]);
    }
  });
}

template <typename T>
void AvgPool2dBackward(const Pool2dShape& s, bool count_include_pad, const T* gy, T* gx) {
  const int64_t hw = s.height * s.width, ohw = s.out_h * s.out_w;
  const auto fh = AvgFactors(s.out_h, s.stride_h, s.pad_h, s.kernel_h, s.height, count_include_pad);
  const auto fw = AvgFactors(s.out_w, s.stride_w, s.pad_w, s.kernel_w, s.width, count_include_pad);
  ForEachPlane(s, ohw * s.kernel_h * s.kernel_w + hw, [&](int64_t p) {
    T* gxp = gx + p * hw;
    std::fill(gxp, gxp + hw, T(0));
    std::vector<T> scaled(static_cast<size_t>(s.out_w));
    for (int64_t oh = 0; oh < s.out_h; ++oh) {
      const T* gr = gy + p * ohw + oh * s.out_w;
      for (int64_t ow = 0; ow < s.out_w; ++ow)
        scaled[ow] = gr[ow] / static_cast<T>(fh[oh] * fw[ow]);
      ForEachTap(s, oh, [&](int64_t ih, int64_t off_w, OutRange r) {
        ScatterAddStrided(gxp + ih * s.width + r.lo * s.stride_w + off_w, scaled.data() + r.lo,
                          r.hi - r.lo, s.stride_w);
      });
    }
  });
}

template <typename T>
void AdaptiveAvgPool2dForward(const Pool2dShape& s, const T* x, T* y) {
  const int64_t hw = s.height * s.width, ohw = s.out_h * s.out_w;
  ForEachPlane(s, hw + ohw, [&](int64_t p) {
    const T* xp = x + p * hw;
    for (int64_t oh = 0; oh < s.out_h; ++oh) {
      const int64_t h0 = BinStart(oh, s.height, s.out_h), h1 = BinEnd(oh, s.height, s.out_h);
      for (int64_t ow = 0; ow < s.out_w; ++ow) {
        const int64_t w0 = BinStart(ow, s.width, s.out_w), w1 = BinEnd(ow, s.width, s.out_w);
        T sum = 0;
        for (int64_t ih = h0; ih < h1; ++ih) sum += SumContiguous(xp + ih * s.width + w0, w1 - w0);
        y[p * ohw + oh * s.out_w + ow] = sum / static_cast<T>((h1 - h0) * (w1 - w0));
      }
    }
  });
}

template <typename T>
void AdaptiveAvgPool2dBackward(const Pool2dShape& s, const T* gy, T* gx) {
  const int64_t hw = s.height * s.width, ohw = s.out_h * s.out_w;
  ForEachPlane(s, hw + ohw, [&](int64_t p) {
    T* gxp = gx + p * hw;
    std::fill(gxp, gxp + hw, T(0));
    for (int64_t oh = 0; oh < s.out_h; ++oh) {
      const int64_t h0 = BinStart(oh, s.height, s.out_h), h1 = BinEnd(oh, s.height, s.out_h);
      for (int64_t ow = 0; ow < s.out_w; ++ow) {
        const int64_t w0 = BinStart(ow, s.width, s.out_w), w1 = BinEnd(ow, s.width, s.out_w);
        const T v = gy[p * ohw + oh * s.out_w + ow] / static_cast<T>((h1 - h0) * (w1 - w0));
        for (int64_t ih = h0; ih < h1; ++ih) AddScalar(gxp + ih * s.width + w0, v, w1 - w0);
      }
    }
  });
}

#define TY_INSTANTIATE(T)                                                               \
  template void MaxPool2dForward<T>(const Pool2dShape&, const T*, T*, int64_t*);        \
  template void MaxPool2dBackward<T>(const Pool2dShape&, const T*, const int64_t*, T*); \
  template void AvgPool2dForward<T>(const Pool2dShape&, bool, const T*, T*);            \
  template void AvgPool2dBackward<T>(const Pool2dShape&, bool, const T*, T*);           \
  template void AdaptiveAvgPool2dForward<T>(const Pool2dShape&, const T*, T*);          \
  template void AdaptiveAvgPool2dBackward<T>(const Pool2dShape&, const T*, T*);
TY_INSTANTIATE(float)
TY_INSTANTIATE(double)
#undef TY_INSTANTIATE

}  // namespace trainyard::kernels::cpu
