// cuDNN on the host for the CUDA emulation (emu.h): the legacy calls kernels/cuda/dnn.cc makes,
// with cuDNN's documented semantics, so that dnn.cc itself (descriptors, output sizes, the
// batch split, the batch norm view and its running statistics) runs in the emulated build.
// Convolutions are cross-correlations over NCHW tensors with padding, strides, dilation and
// groups, weights (k, c / groups, r, s), summed in f32; out = alpha * result + beta * out, out
// not read when beta is 0. Spatial batch norm in training normalises each channel over N, H and
// W with the biased variance, saves the mean and 1 / sqrt(var + eps), and updates the running
// mean and the running variance, the latter with the unbiased variance, by the factor given.
//
// It refuses what cuDNN refuses: descriptors whose channels, groups or output sizes do not
// agree, and an epsilon below CUDNN_BN_MIN_EPSILON.
#include <cudnn.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "tests/testing/cuda_emu/runtime_emu.h"

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

struct cudnnContext {
  cudaStream_t stream = nullptr;  // cudnnSetStream's: the calls run on it
};
struct cudnnTensorStruct {
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int n = 0, c = 0, h = 0, w = 0;
};
struct cudnnFilterStruct {
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int k = 0, c = 0, r = 0, s = 0;
};
struct cudnnConvolutionStruct {
  int pad_h = 0, pad_w = 0, stride_h = 1, stride_w = 1, dil_h = 1, dil_w = 1, groups = 1;
};

namespace {

ty_emu::Storage StorageOf(cudnnDataType_t t) {
  return t == CUDNN_DATA_FLOAT      ? ty_emu::Storage::kF32
         : t == CUDNN_DATA_BFLOAT16 ? ty_emu::Storage::kBF16
                                    : ty_emu::Storage::kF16;
}
float Load(cudnnDataType_t t, const void* p, int64_t i) {
  return ty_emu::LoadElement(StorageOf(t), p, i);
}
void Store(cudnnDataType_t t, void* p, int64_t i, float v) {
  ty_emu::StoreElement(StorageOf(t), p, i, v);
}

bool Supported(cudnnDataType_t t) {
  return t == CUDNN_DATA_FLOAT || t == CUDNN_DATA_BFLOAT16 || t == CUDNN_DATA_HALF;
}

int OutDim(int in, int pad, int k, int dil, int stride) {
  return (in + 2 * pad - ((k - 1) * dil + 1)) / stride + 1;
}

// Whether x, w and y agree with the convolution; cuDNN answers BAD_PARAM otherwise.
bool Agree(const cudnnTensorStruct& x, const cudnnFilterStruct& w, const cudnnConvolutionStruct& cv,
           const cudnnTensorStruct& y) {
  return x.type == w.type && y.type == x.type && w.c * cv.groups == x.c && w.k % cv.groups == 0 &&
         y.n == x.n && y.c == w.k && y.h == OutDim(x.h, cv.pad_h, w.r, cv.dil_h, cv.stride_h) &&
         y.w == OutDim(x.w, cv.pad_w, w.s, cv.dil_w, cv.stride_w);
}

// Calls f(x index, w index, y index) for every product term of the convolution.
template <typename F>
void ForEachTerm(const cudnnTensorStruct& x, const cudnnFilterStruct& w,
                 const cudnnConvolutionStruct& cv, const cudnnTensorStruct& y, const F& f) {
  const int k_per_group = w.k / cv.groups;
  for (int n = 0; n < y.n; ++n) {
    for (int k = 0; k < w.k; ++k) {
      const int g = k / k_per_group;
      for (int oh = 0; oh < y.h; ++oh) {
        for (int ow = 0; ow < y.w; ++ow) {
          const int64_t yi = ((int64_t{n} * y.c + k) * y.h + oh) * y.w + ow;
          for (int c = 0; c < w.c; ++c) {
            for (int r = 0; r < w.r; ++r) {
              const int ih = oh * cv.stride_h - cv.pad_h + r * cv.dil_h;
              if (ih < 0 || ih >= x.h) continue;
              for (int s = 0; s < w.s; ++s) {
                const int iw = ow * cv.stride_w - cv.pad_w + s * cv.dil_w;
                if (iw < 0 || iw >= x.w) continue;
                const int64_t xi = ((int64_t{n} * x.c + g * w.c + c) * x.h + ih) * x.w + iw;
                const int64_t wi = ((int64_t{k} * w.c + c) * w.r + r) * w.s + s;
                f(xi, wi, yi);
              }
            }
          }
        }
      }
    }
  }
}

// A scaling factor: a host float, read when the call is made.
float Scalar(const void* p) {
  float v;
  std::memcpy(&v, p, sizeof(float));
  return v;
}

// out[i] = a acc[i] + b out[i] (out not read when b is 0).
void Blend(cudnnDataType_t t, float a, const std::vector<float>& acc, float b, void* out) {
  for (size_t i = 0; i < acc.size(); ++i) {
    const float old = b != 0 ? b * Load(t, out, static_cast<int64_t>(i)) : 0.0f;
    Store(t, out, static_cast<int64_t>(i), a * acc[i] + old);
  }
}

int64_t Count(const cudnnTensorStruct& t) { return int64_t{t.n} * t.c * t.h * t.w; }

}  // namespace

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
  *handle = new cudnnContext();
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
  handle->stream = stream;
  return CUDNN_STATUS_SUCCESS;
}

const char* cudnnGetErrorString(cudnnStatus_t status) {
  return status == CUDNN_STATUS_SUCCESS ? "success" : "emulated cuDNN error";
}

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* d) {
  *d = new cudnnTensorStruct();
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d) {
  delete d;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t format,
                                         cudnnDataType_t type, int n, int c, int h, int w) {
  if (format != CUDNN_TENSOR_NCHW || !Supported(type)) return CUDNN_STATUS_NOT_SUPPORTED;
  if (n <= 0 || c <= 0 || h <= 0 || w <= 0) return CUDNN_STATUS_BAD_PARAM;
  *d = cudnnTensorStruct{type, n, c, h, w};
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t* d) {
  *d = new cudnnFilterStruct();
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d) {
  delete d;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t type,
                                         cudnnTensorFormat_t format, int k, int c, int r, int s) {
  if (format != CUDNN_TENSOR_NCHW || !Supported(type)) return CUDNN_STATUS_NOT_SUPPORTED;
  if (k <= 0 || c <= 0 || r <= 0 || s <= 0) return CUDNN_STATUS_BAD_PARAM;
  *d = cudnnFilterStruct{type, k, c, r, s};
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t* d) {
  *d = new cudnnConvolutionStruct();
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d) {
  delete d;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int pad_h, int pad_w,
                                              int u, int v, int dil_h, int dil_w,
                                              cudnnConvolutionMode_t mode,
                                              cudnnDataType_t compute) {
  if (mode != CUDNN_CROSS_CORRELATION || compute != CUDNN_DATA_FLOAT) {
    return CUDNN_STATUS_NOT_SUPPORTED;
  }
  if (pad_h < 0 || pad_w < 0 || u <= 0 || v <= 0 || dil_h <= 0 || dil_w <= 0) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  d->pad_h = pad_h, d->pad_w = pad_w, d->stride_h = u, d->stride_w = v;
  d->dil_h = dil_h, d->dil_w = dil_w;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t d, int groups) {
  if (groups < 1) return CUDNN_STATUS_BAD_PARAM;
  d->groups = groups;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t, cudnnMathType_t) {
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(const cudnnConvolutionDescriptor_t cv,
                                                    const cudnnTensorDescriptor_t x,
                                                    const cudnnFilterDescriptor_t w, int* n, int* c,
                                                    int* h, int* wo) {
  if (w->c * cv->groups != x->c) return CUDNN_STATUS_BAD_PARAM;
  *n = x->n, *c = w->k;
  *h = OutDim(x->h, cv->pad_h, w->r, cv->dil_h, cv->stride_h);
  *wo = OutDim(x->w, cv->pad_w, w->s, cv->dil_w, cv->stride_w);
  return *h >= 1 && *wo >= 1 ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
}

// One algorithm, needing no workspace.
template <typename Perf>
cudnnStatus_t OneAlgorithm(bool agree, int requested, int* returned, Perf* perf) {
  *returned = 0;
  if (!agree) return CUDNN_STATUS_BAD_PARAM;
  if (requested < 1) return CUDNN_STATUS_BAD_PARAM;
  perf[0] = Perf{};
  perf[0].status = CUDNN_STATUS_SUCCESS;
  perf[0].mathType = CUDNN_DEFAULT_MATH;
  *returned = 1;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t, const cudnnTensorDescriptor_t x,
                                                     const cudnnFilterDescriptor_t w,
                                                     const cudnnConvolutionDescriptor_t cv,
                                                     const cudnnTensorDescriptor_t y,
                                                     const int requested, int* returned,
                                                     cudnnConvolutionFwdAlgoPerf_t* perf) {
  return OneAlgorithm(Agree(*x, *w, *cv, *y), requested, returned, perf);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(
    cudnnHandle_t, const cudnnFilterDescriptor_t w, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t cv, const cudnnTensorDescriptor_t dx, const int requested,
    int* returned, cudnnConvolutionBwdDataAlgoPerf_t* perf) {
  return OneAlgorithm(Agree(*dx, *w, *cv, *dy), requested, returned, perf);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(
    cudnnHandle_t, const cudnnTensorDescriptor_t x, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t cv, const cudnnFilterDescriptor_t dw, const int requested,
    int* returned, cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
  return OneAlgorithm(Agree(*x, *dw, *cv, *dy), requested, returned, perf);
}

cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t, const cudnnTensorDescriptor_t,
                                                      const cudnnFilterDescriptor_t,
                                                      const cudnnConvolutionDescriptor_t,
                                                      const cudnnTensorDescriptor_t,
                                                      cudnnConvolutionFwdAlgo_t, size_t* bytes) {
  *bytes = 0;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(
    cudnnHandle_t, const cudnnFilterDescriptor_t, const cudnnTensorDescriptor_t,
    const cudnnConvolutionDescriptor_t, const cudnnTensorDescriptor_t,
    cudnnConvolutionBwdDataAlgo_t, size_t* bytes) {
  *bytes = 0;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(
    cudnnHandle_t, const cudnnTensorDescriptor_t, const cudnnTensorDescriptor_t,
    const cudnnConvolutionDescriptor_t, const cudnnFilterDescriptor_t,
    cudnnConvolutionBwdFilterAlgo_t, size_t* bytes) {
  *bytes = 0;
  return CUDNN_STATUS_SUCCESS;
}

// The calls below check their arguments when made, and compute on the handle's stream, after
// they return (as cuDNN's kernels run), from copies of their descriptors.

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t h, const void* alpha,
                                      const cudnnTensorDescriptor_t xd, const void* x,
                                      const cudnnFilterDescriptor_t wd, const void* w,
                                      const cudnnConvolutionDescriptor_t cv,
                                      cudnnConvolutionFwdAlgo_t, void*, size_t, const void* beta,
                                      const cudnnTensorDescriptor_t yd, void* y) {
  if (!Agree(*xd, *wd, *cv, *yd)) return CUDNN_STATUS_BAD_PARAM;
  ty_emu::OnStream(h->stream, [x, w, y, xs = *xd, ws = *wd, cs = *cv, ys = *yd, a = Scalar(alpha),
                               b = Scalar(beta)] {
    std::vector<float> acc(static_cast<size_t>(Count(ys)), 0.0f);
    ForEachTerm(xs, ws, cs, ys, [&](int64_t xi, int64_t wi, int64_t yi) {
      acc[yi] += Load(xs.type, x, xi) * Load(ws.type, w, wi);
    });
    Blend(ys.type, a, acc, b, y);
  });
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t h, const void* alpha,
                                           const cudnnFilterDescriptor_t wd, const void* w,
                                           const cudnnTensorDescriptor_t dyd, const void* dy,
                                           const cudnnConvolutionDescriptor_t cv,
                                           cudnnConvolutionBwdDataAlgo_t, void*, size_t,
                                           const void* beta, const cudnnTensorDescriptor_t dxd,
                                           void* dx) {
  if (!Agree(*dxd, *wd, *cv, *dyd)) return CUDNN_STATUS_BAD_PARAM;
  ty_emu::OnStream(h->stream, [w, dy, dx, ws = *wd, dys = *dyd, cs = *cv, dxs = *dxd,
                               a = Scalar(alpha), b = Scalar(beta)] {
    std::vector<float> acc(static_cast<size_t>(Count(dxs)), 0.0f);
    ForEachTerm(dxs, ws, cs, dys, [&](int64_t xi, int64_t wi, int64_t yi) {
      acc[xi] += Load(dys.type, dy, yi) * Load(ws.type, w, wi);
    });
    Blend(dxs.type, a, acc, b, dx);
  });
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t h, const void* alpha,
                                             const cudnnTensorDescriptor_t xd, const void* x,
                                             const cudnnTensorDescriptor_t dyd, const void* dy,
                                             const cudnnConvolutionDescriptor_t cv,
                                             cudnnConvolutionBwdFilterAlgo_t, void*, size_t,
                                             const void* beta, const cudnnFilterDescriptor_t dwd,
                                             void* dw) {
  if (!Agree(*xd, *dwd, *cv, *dyd)) return CUDNN_STATUS_BAD_PARAM;
  ty_emu::OnStream(h->stream, [x, dy, dw, xs = *xd, dys = *dyd, cs = *cv, dws = *dwd,
                               a = Scalar(alpha), b = Scalar(beta)] {
    std::vector<float> acc(static_cast<size_t>(int64_t{dws.k} * dws.c * dws.r * dws.s), 0.0f);
    ForEachTerm(xs, dws, cs, dys, [&](int64_t xi, int64_t wi, int64_t yi) {
      acc[wi] += Load(dys.type, dy, yi) * Load(xs.type, x, xi);
    });
    Blend(dws.type, a, acc, b, dw);
  });
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDeriveBNTensorDescriptor(cudnnTensorDescriptor_t derived,
                                            const cudnnTensorDescriptor_t x,
                                            cudnnBatchNormMode_t mode) {
  if (mode != CUDNN_BATCHNORM_SPATIAL) return CUDNN_STATUS_NOT_SUPPORTED;
  *derived = cudnnTensorStruct{CUDNN_DATA_FLOAT, 1, x->c, 1, 1};
  return CUDNN_STATUS_SUCCESS;
}

namespace {

// Channel ch's values of x (n, c, h, w): f(index).
template <typename F>
void ForChannel(const cudnnTensorStruct& x, int ch, const F& f) {
  const int64_t plane = int64_t{x.h} * x.w;
  for (int n = 0; n < x.n; ++n) {
    const int64_t base = (int64_t{n} * x.c + ch) * plane;
    for (int64_t i = 0; i < plane; ++i) f(base + i);
  }
}

bool BatchNormArgsOk(const cudnnTensorStruct& x, const cudnnTensorStruct& channel, double eps) {
  return x.type == CUDNN_DATA_FLOAT && channel.n == 1 && channel.c == x.c && channel.h == 1 &&
         channel.w == 1 && eps >= CUDNN_BN_MIN_EPSILON;
}

}  // namespace

cudnnStatus_t cudnnBatchNormalizationForwardTraining(
    cudnnHandle_t h, cudnnBatchNormMode_t mode, const void* alpha, const void* beta,
    const cudnnTensorDescriptor_t xd, const void* x, const cudnnTensorDescriptor_t yd, void* y,
    const cudnnTensorDescriptor_t cd, const void* scale, const void* bias, double factor,
    void* running_mean, void* running_var, double eps, void* save_mean, void* save_invstd) {
  if (mode != CUDNN_BATCHNORM_SPATIAL) return CUDNN_STATUS_NOT_SUPPORTED;
  if (!BatchNormArgsOk(*xd, *cd, eps) || Count(*xd) != Count(*yd)) return CUDNN_STATUS_BAD_PARAM;
  if ((running_mean == nullptr) != (running_var == nullptr)) return CUDNN_STATUS_BAD_PARAM;
  ty_emu::OnStream(h->stream, [=, xs_d = *xd, a = Scalar(alpha), b = Scalar(beta)] {
    const cudnnTensorStruct* xd = &xs_d;
    const auto* xs = static_cast<const float*>(x);
    const int64_t m = Count(*xd) / xd->c;
    std::vector<float> out(static_cast<size_t>(Count(*xd)));
    for (int ch = 0; ch < xd->c; ++ch) {
      double sum = 0, sq = 0;
      ForChannel(*xd, ch, [&](int64_t i) { sum += xs[i]; });
      const double mean = sum / m;
      ForChannel(*xd, ch, [&](int64_t i) { sq += (xs[i] - mean) * (xs[i] - mean); });
      const double var = sq / m, invstd = 1.0 / std::sqrt(var + eps);
      const double g = static_cast<const float*>(scale)[ch],
                   bi = static_cast<const float*>(bias)[ch];
      ForChannel(*xd, ch,
                 [&](int64_t i) { out[i] = static_cast<float>((xs[i] - mean) * invstd * g + bi); });
      if (running_mean != nullptr) {
        float& rm = static_cast<float*>(running_mean)[ch];
        float& rv = static_cast<float*>(running_var)[ch];
        const double unbiased = m > 1 ? sq / (m - 1) : var;
        rm = static_cast<float>((1 - factor) * rm + factor * mean);
        rv = static_cast<float>((1 - factor) * rv + factor * unbiased);
      }
      if (save_mean != nullptr) static_cast<float*>(save_mean)[ch] = static_cast<float>(mean);
      if (save_invstd != nullptr) {
        static_cast<float*>(save_invstd)[ch] = static_cast<float>(invstd);
      }
    }
    Blend(CUDNN_DATA_FLOAT, a, out, b, y);
  });
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBatchNormalizationBackward(cudnnHandle_t h, cudnnBatchNormMode_t mode,
                                              const void* alpha_data, const void* beta_data,
                                              const void* alpha_param, const void* beta_param,
                                              const cudnnTensorDescriptor_t xd, const void* x,
                                              const cudnnTensorDescriptor_t dyd, const void* dy,
                                              const cudnnTensorDescriptor_t dxd, void* dx,
                                              const cudnnTensorDescriptor_t cd, const void* scale,
                                              void* dscale, void* dbias, double eps,
                                              const void* saved_mean, const void* saved_invstd) {
  if (mode != CUDNN_BATCHNORM_SPATIAL) return CUDNN_STATUS_NOT_SUPPORTED;
  if (!BatchNormArgsOk(*xd, *cd, eps) || Count(*xd) != Count(*dyd) || Count(*xd) != Count(*dxd) ||
      (saved_mean == nullptr) != (saved_invstd == nullptr)) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  ty_emu::OnStream(h->stream, [=, xs_d = *xd, ad = Scalar(alpha_data), bd = Scalar(beta_data),
                               ap = Scalar(alpha_param), bp = Scalar(beta_param)] {
    const cudnnTensorStruct* xd = &xs_d;
    const auto* xs = static_cast<const float*>(x);
    const auto* gy = static_cast<const float*>(dy);
    const int64_t m = Count(*xd) / xd->c;
    std::vector<float> gx(static_cast<size_t>(Count(*xd))), gscale(xd->c), gbias(xd->c);
    for (int ch = 0; ch < xd->c; ++ch) {
      double mean, invstd;
      if (saved_mean != nullptr) {
        mean = static_cast<const float*>(saved_mean)[ch];
        invstd = static_cast<const float*>(saved_invstd)[ch];
      } else {
        double sum = 0, sq = 0;
        ForChannel(*xd, ch, [&](int64_t i) { sum += xs[i]; });
        mean = sum / m;
        ForChannel(*xd, ch, [&](int64_t i) { sq += (xs[i] - mean) * (xs[i] - mean); });
        invstd = 1.0 / std::sqrt(sq / m + eps);
      }
      double sum_dy = 0, sum_dy_xhat = 0;
      ForChannel(*xd, ch, [&](int64_t i) {
        sum_dy += gy[i];
        sum_dy_xhat += gy[i] * (xs[i] - mean) * invstd;
      });
      const double g = static_cast<const float*>(scale)[ch];
      ForChannel(*xd, ch, [&](int64_t i) {
        const double xhat = (xs[i] - mean) * invstd;
        gx[i] = static_cast<float>(g * invstd / m * (m * gy[i] - sum_dy - xhat * sum_dy_xhat));
      });
      gscale[ch] = static_cast<float>(sum_dy_xhat);
      gbias[ch] = static_cast<float>(sum_dy);
    }
    Blend(CUDNN_DATA_FLOAT, ad, gx, bd, dx);
    Blend(CUDNN_DATA_FLOAT, ap, gscale, bp, dscale);
    Blend(CUDNN_DATA_FLOAT, ap, gbias, bp, dbias);
  });
  return CUDNN_STATUS_SUCCESS;
}
