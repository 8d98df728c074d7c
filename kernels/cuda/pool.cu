// CudaBackendImpl's pooling: max, average and adaptive average pooling over NCHW planes and
// their backward, with the semantics of kernels/cpu/pool.h (Note [Bit-exact ports] in
// backend_impl.h: backward gathers in the CPU's order of additions, no atomics).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/backend_impl.h"
#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/device_math.cuh"

namespace trainyard::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// Outputs o in [*lo, *hi] whose window [o stride - pad, + extent) holds input i (none: lo > hi).
__device__ __forceinline__ void Covering(int64_t i, int64_t stride, int64_t pad, int64_t extent,
                                         int64_t out, int64_t* lo, int64_t* hi) {
  const int64_t num = i + pad - extent + 1;
  *lo = num <= 0 ? 0 : (num + stride - 1) / stride;
  *hi = Min64(out - 1, (i + pad) / stride);
}

__device__ __forceinline__ int64_t AvgFactor(int64_t o, int64_t stride, int64_t pad, int64_t kernel,
                                             int64_t in, bool include_pad) {
  const int64_t start = o * stride - pad, end = Min64(start + kernel, in + pad);
  return include_pad ? end - start : Min64(end, in) - (start > 0 ? start : 0);
}

// One thread per output (p, oh, ow): taps in window order; the first tap read wins, a later
// one when greater or NaN (MaxRun). Empty windows give -inf and argmax -1.
template <typename T>
__global__ void MaxPoolForwardKernel(const Pool2dShape s, const T* x, T* y, int64_t* argmax) {
  const int64_t total = s.planes * s.out_h * s.out_w;
  for (int64_t o = GlobalThread(); o < total; o += GridThreads()) {
    const int64_t ow = o % s.out_w, oh = o / s.out_w % s.out_h, p = o / (s.out_w * s.out_h);
    const T* xp = x + p * s.height * s.width;
    float best = -INFINITY;
    int64_t arg = -1;
    for (int64_t ki = 0; ki < s.kernel_h; ++ki) {
      const int64_t ih = oh * s.stride_h - s.pad_h + ki * s.dilation_h;
      if (ih < 0 || ih >= s.height) continue;
      for (int64_t kj = 0; kj < s.kernel_w; ++kj) {
        const int64_t iw = ow * s.stride_w - s.pad_w + kj * s.dilation_w;
        if (iw < 0 || iw >= s.width) continue;
        const float v = Load(xp + ih * s.width + iw);
        if (arg < 0 || v > best || v != v) best = v, arg = ih * s.width + iw;
      }
    }
    y[o] = FromFloat<T>(best);
    argmax[o] = arg;
  }
}

// One thread per input pixel: the gy of every window whose argmax it is, in output order.
template <typename T>
__global__ void MaxPoolBackwardKernel(const Pool2dShape s, const T* gy, const int64_t* argmax,
                                      T* gx) {
  const int64_t total = s.planes * s.height * s.width, ohw = s.out_h * s.out_w;
  for (int64_t e = GlobalThread(); e < total; e += GridThreads()) {
    const int64_t iw = e % s.width, ih = e / s.width % s.height, p = e / (s.width * s.height);
    int64_t h0, h1, w0, w1;
    Covering(ih, s.stride_h, s.pad_h, (s.kernel_h - 1) * s.dilation_h + 1, s.out_h, &h0, &h1);
    Covering(iw, s.stride_w, s.pad_w, (s.kernel_w - 1) * s.dilation_w + 1, s.out_w, &w0, &w1);
    float acc = 0;
    for (int64_t oh = h0; oh <= h1; ++oh) {
      for (int64_t ow = w0; ow <= w1; ++ow) {
        const int64_t o = p * ohw + oh * s.out_w + ow;
        if (argmax[o] == ih * s.width + iw) acc += Load(gy + o);
      }
    }
    gx[e] = FromFloat<T>(acc);
  }
}

template <typename T>
__global__ void AvgPoolForwardKernel(const Pool2dShape s, bool include_pad, const T* x, T* y) {
  const int64_t total = s.planes * s.out_h * s.out_w;
  for (int64_t o = GlobalThread(); o < total; o += GridThreads()) {
    const int64_t ow = o % s.out_w, oh = o / s.out_w % s.out_h, p = o / (s.out_w * s.out_h);
    const T* xp = x + p * s.height * s.width;
    float sum = 0;
    for (int64_t ki = 0; ki < s.kernel_h; ++ki) {
      const int64_t ih = oh * s.stride_h - s.pad_h + ki * s.dilation_h;
      if (ih < 0 || ih >= s.height) continue;
      for (int64_t kj = 0; kj < s.kernel_w; ++kj) {
        const int64_t iw = ow * s.stride_w - s.pad_w + kj * s.dilation_w;
        if (iw >= 0 && iw < s.width) sum += Load(xp + ih * s.width + iw);
      }
    }
    const int64_t area = AvgFactor(oh, s.stride_h, s.pad_h, s.kernel_h, s.height, include_pad) *
                         AvgFactor(ow, s.stride_w, s.pad_w, s.kernel_w, s.width, include_pad);
    y[o] = FromFloat<T>(__fdiv_rn(sum, static_cast<float>(area)));
  }
}

// Per input pixel: gy / area of the windows holding it, oh ascending and ow descending (the
// CPU scatters tap by tap: kj ascending meets this pixel's windows in ow descending order).
template <typename T>
__global__ void AvgPoolBackwardKernel(const Pool2dShape s, bool include_pad, const T* gy, T* gx) {
  const int64_t total = s.planes * s.height * s.width, ohw = s.out_h * s.out_w;
  for (int64_t e = GlobalThread(); e < total; e += GridThreads()) {
    const int64_t iw = e % s.width, ih = e / s.width % s.height, p = e / (s.width * s.height);
    int64_t h0, h1, w0, w1;
    Covering(ih, s.stride_h, s.pad_h, (s.kernel_h - 1) * s.dilation_h + 1, s.out_h, &h0, &h1);
    Covering(iw, s.stride_w, s.pad_w, (s.kernel_w - 1) * s.dilation_w + 1, s.out_w, &w0, &w1);
    float acc = 0;
    for (int64_t oh = h0; oh <= h1; ++oh) {
      if ((ih + s.pad_h - oh * s.stride_h) % s.dilation_h != 0) continue;
      const int64_t fh = AvgFactor(oh, s.stride_h, s.pad_h, s.kernel_h, s.height, include_pad);
      for (int64_t ow = w1; ow >= w0; --ow) {
        if ((iw + s.pad_w - ow * s.stride_w) % s.dilation_w != 0) continue;
        const int64_t fw = AvgFactor(ow, s.stride_w, s.pad_w, s.kernel_w, s.width, include_pad);
        acc += __fdiv_rn(Load(gy + p * ohw + oh * s.out_w + ow), static_cast<float>(fh * fw));
      }
    }
    gx[e] = FromFloat<T>(acc);
  }
}

// Adaptive bins: [floor(o in / out), ceil((o + 1) in / out)).
__device__ __forceinline__ int64_t BinStart(int64_t o, int64_t in, int64_t out) {
  return o * in / out;
}
__device__ __forceinline__ int64_t BinEnd(int64_t o, int64_t in, int64_t out) {
  return ((o + 1) * in + out - 1) / out;
}

// Row sums first, then their sum, as the CPU (exact for bins narrower than 16).
template <typename T>
__global__ void AdaptiveForwardKernel(const Pool2dShape s, const T* x, T* y) {
  const int64_t total = s.planes * s.out_h * s.out_w;
  for (int64_t o = GlobalThread(); o < total; o += GridThreads()) {
    const int64_t ow = o % s.out_w, oh = o / s.out_w % s.out_h, p = o / (s.out_w * s.out_h);
    const int64_t h0 = BinStart(oh, s.height, s.out_h), h1 = BinEnd(oh, s.height, s.out_h);
    const int64_t w0 = BinStart(ow, s.width, s.out_w), w1 = BinEnd(ow, s.width, s.out_w);
    float sum = 0;
    for (int64_t ih = h0; ih < h1; ++ih) {
      float row = 0;
      for (int64_t iw = w0; iw < w1; ++iw) row += Load(x + (p * s.height + ih) * s.width + iw);
      sum += row;
    }
    y[o] = FromFloat<T>(__fdiv_rn(sum, static_cast<float>((h1 - h0) * (w1 - w0))));
  }
}

template <typename T>
__global__ void AdaptiveBackwardKernel(const Pool2dShape s, const T* gy, T* gx) {
  const int64_t total = s.planes * s.height * s.width;
  for (int64_t e = GlobalThread(); e < total; e += GridThreads()) {
    const int64_t iw = e % s.width, ih = e / s.width % s.height, p = e / (s.width * s.height);
    const int64_t oh1 = Min64(s.out_h - 1, ((ih + 1) * s.out_h - 1) / s.height);
    const int64_t ow1 = Min64(s.out_w - 1, ((iw + 1) * s.out_w - 1) / s.width);
    float acc = 0;
    for (int64_t oh = ih * s.out_h / s.height; oh <= oh1; ++oh) {
      const int64_t h0 = BinStart(oh, s.height, s.out_h), h1 = BinEnd(oh, s.height, s.out_h);
      if (ih < h0 || ih >= h1) continue;
      for (int64_t ow = iw * s.out_w / s.width; ow <= ow1; ++ow) {
        const int64_t w0 = BinStart(ow, s.width, s.out_w), w1 = BinEnd(ow, s.width, s.out_w);
        if (iw < w0 || iw >= w1) continue;
        const float g = Load(gy + (p * s.out_h + oh) * s.out_w + ow);
        acc += __fdiv_rn(g, static_cast<float>((h1 - h0) * (w1 - w0)));
      }
    }
    gx[e] = FromFloat<T>(acc);
  }
}

}  // namespace

void CudaBackendImpl::MaxPool2dForward(ScalarType type, const Pool2dShape& s, const void* x,
                                       void* y, int64_t* argmax, Stream stream) {
  DispatchDtype<DtypeSet::kFloat>(type, "max_pool2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    MaxPoolForwardKernel<<<BlocksFor(s.planes * s.out_h * s.out_w), kThreads, 0,
                           AsStream(stream)>>>(s, static_cast<const T*>(x), static_cast<T*>(y),
                                               argmax);
  });
  CheckLaunch("max_pool2d");
}

void CudaBackendImpl::MaxPool2dBackward(ScalarType type, const Pool2dShape& s, const void* gy,
                                        const int64_t* argmax, void* gx, Stream stream) {
  DispatchDtype<DtypeSet::kFloat>(type, "max_pool2d backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    MaxPoolBackwardKernel<<<BlocksFor(s.planes * s.height * s.width), kThreads, 0,
                            AsStream(stream)>>>(s, static_cast<const T*>(gy), argmax,
                                                static_cast<T*>(gx));
  });
  CheckLaunch("max_pool2d backward");
}

void CudaBackendImpl::AvgPool2dForward(ScalarType type, const Pool2dShape& s,
                                       bool count_include_pad, const void* x, void* y,
                                       Stream stream) {
  DispatchDtype<DtypeSet::kFloat>(type, "avg_pool2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    AvgPoolForwardKernel<<<BlocksFor(s.planes * s.out_h * s.out_w), kThreads, 0,
                           AsStream(stream)>>>(s, count_include_pad, static_cast<const T*>(x),
                                               static_cast<T*>(y));
  });
  CheckLaunch("avg_pool2d");
}

void CudaBackendImpl::AvgPool2dBackward(ScalarType type, const Pool2dShape& s,
                                        bool count_include_pad, const void* gy, void* gx,
                                        Stream stream) {
  DispatchDtype<DtypeSet::kFloat>(type, "avg_pool2d backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    AvgPoolBackwardKernel<<<BlocksFor(s.planes * s.height * s.width), kThreads, 0,
                            AsStream(stream)>>>(s, count_include_pad, static_cast<const T*>(gy),
                                                static_cast<T*>(gx));
  });
  CheckLaunch("avg_pool2d backward");
}

void CudaBackendImpl::AdaptiveAvgPool2dForward(ScalarType type, const Pool2dShape& s, const void* x,
                                               void* y, Stream stream) {
  DispatchDtype<DtypeSet::kFloat>(type, "adaptive_avg_pool2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    AdaptiveForwardKernel<<<BlocksFor(s.planes * s.out_h * s.out_w), kThreads, 0,
                            AsStream(stream)>>>(s, static_cast<const T*>(x), static_cast<T*>(y));
  });
  CheckLaunch("adaptive_avg_pool2d");
}

void CudaBackendImpl::AdaptiveAvgPool2dBackward(ScalarType type, const Pool2dShape& s,
                                                const void* gy, void* gx, Stream stream) {
  DispatchDtype<DtypeSet::kFloat>(type, "adaptive_avg_pool2d backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    AdaptiveBackwardKernel<<<BlocksFor(s.planes * s.height * s.width), kThreads, 0,
                             AsStream(stream)>>>(s, static_cast<const T*>(gy), static_cast<T*>(gx));
  });
  CheckLaunch("adaptive_avg_pool2d backward");
}

}  // namespace trainyard::kernels::cuda
