// HostBackend: pooling, batch norm, fused attention, GEMM and convolution.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/conv.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/pool.h"
#include "tests/testing/host_backend.h"
#include "tests/testing/host_backend_internal.h"

namespace trainyard::testing {

using namespace host_internal;  // NOLINT: H, F32, CheckFloat
namespace cuda = kernels::cuda;

// ---- Pooling ----

namespace {
int64_t InPlane(const kc::Pool2dShape& s) { return s.planes * s.height * s.width; }
int64_t OutPlane(const kc::Pool2dShape& s) { return s.planes * s.out_h * s.out_w; }
}  // namespace

void HostBackend::MaxPool2dForward(ScalarType type, const Pool2dShape& s, const void* x, void* y,
                                   int64_t* argmax, Stream stream) {
  CheckStream(stream);
  CheckFloat(type, "MaxPool2dForward");
  Count("MaxPool2dForward");
  F32 xs(type, H(x), InPlane(s)), ys(type, H(y), OutPlane(s), false);
  kc::MaxPool2dForward<float>(s, xs.data(), ys.data(), H(argmax));
  ys.Store();
}

void HostBackend::MaxPool2dBackward(ScalarType type, const Pool2dShape& s, const void* gy,
                                    const int64_t* argmax, void* gx, Stream stream) {
  CheckStream(stream);
  CheckFloat(type, "MaxPool2dBackward");
  Count("MaxPool2dBackward");
  F32 gys(type, H(gy), OutPlane(s)), gxs(type, H(gx), InPlane(s), false);
  kc::MaxPool2dBackward<float>(s, gys.data(), H(argmax), gxs.data());
  gxs.Store();
}

void HostBackend::AvgPool2dForward(ScalarType type, const Pool2dShape& s, bool count_include_pad,
                                   const void* x, void* y, Stream stream) {
  CheckStream(stream);
  CheckFloat(type, "AvgPool2dForward");
  Count("AvgPool2dForward");
  F32 xs(type, H(x), InPlane(s)), ys(type, H(y), OutPlane(s), false);
  kc::AvgPool2dForward<float>(s, count_include_pad, xs.data(), ys.data());
  ys.Store();
}

void HostBackend::AvgPool2dBackward(ScalarType type, const Pool2dShape& s, bool count_include_pad,
                                    const void* gy, void* gx, Stream stream) {
  CheckStream(stream);
  CheckFloat(type, "AvgPool2dBackward");
  Count("AvgPool2dBackward");
  F32 gys(type, H(gy), OutPlane(s)), gxs(type, H(gx), InPlane(s), false);
  kc::AvgPool2dBackward<float>(s, count_include_pad, gys.data(), gxs.data());
  gxs.Store();
}

void HostBackend::AdaptiveAvgPool2dForward(ScalarType type, const Pool2dShape& s, const void* x,
                                           void* y, Stream stream) {
  CheckStream(stream);
  CheckFloat(type, "AdaptiveAvgPool2dForward");
  Count("AdaptiveAvgPool2dForward");
  F32 xs(type, H(x), InPlane(s)), ys(type, H(y), OutPlane(s), false);
  kc::AdaptiveAvgPool2dForward<float>(s, xs.data(), ys.data());
  ys.Store();
}

void HostBackend::AdaptiveAvgPool2dBackward(ScalarType type, const Pool2dShape& s, const void* gy,
                                            void* gx, Stream stream) {
  CheckStream(stream);
  CheckFloat(type, "AdaptiveAvgPool2dBackward");
  Count("AdaptiveAvgPool2dBackward");
  F32 gys(type, H(gy), OutPlane(s)), gxs(type, H(gx), InPlane(s), false);
  kc::AdaptiveAvgPool2dBackward<float>(s, gys.data(), gxs.data());
  gxs.Store();
}

// ---- Batch norm (f32) ----

void HostBackend::BatchNormTrainingForward(const float* x, const float* weight, const float* bias,
                                           float* y, float* running_mean, float* running_var,
                                           double momentum, double eps, float* mean, float* invstd,
                                           int64_t outer, int64_t c, int64_t inner, Stream stream) {
  CheckStream(stream);
  Count("BatchNormTrainingForward");
  kc::BatchNormTrainingForward<float>(H(x), H(weight), H(bias), H(y), H(running_mean),
                                      H(running_var), momentum, eps, H(mean), H(invstd), outer, c,
                                      inner);
}

void HostBackend::BatchNormForward(const float* x, const float* mean, const float* invstd,
                                   const float* weight, const float* bias, float* y, int64_t outer,
                                   int64_t c, int64_t inner, Stream stream) {
  CheckStream(stream);
  Count("BatchNormForward");
  kc::BatchNormForward<float>(H(x), H(mean), H(invstd), H(weight), H(bias), H(y), outer, c, inner);
}

void HostBackend::BatchNormBackward(const float* x, const float* gy, const float* mean,
                                    const float* invstd, const float* weight, float* gx,
                                    float* gweight, float* gbias, int64_t outer, int64_t c,
                                    int64_t inner, bool training, double /*eps*/, Stream stream) {
  CheckStream(stream);
  Count("BatchNormBackward");
  kc::BatchNormBackward<float>(H(x), H(gy), H(mean), H(invstd), H(weight), H(gx), H(gweight),
                               H(gbias), outer, c, inner, training);
}

// ---- Fused attention: the plain reference, accumulated in double ----

namespace {

double Dot(const float* a, const float* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// Keys query i may see.
int64_t Visible(bool causal, int64_t i, int64_t s) { return causal ? std::min(s, i + 1) : s; }

// Element offset of row r of item b of `t` (backend.h AttentionTensor).
int64_t RowOffset(const cuda::AttentionTensor& t, const cuda::AttentionArgs& a, int64_t b,
                  int64_t r) {
  return b / a.heads * t.outer + b % a.heads * t.inner + r * t.row;
}

// Operand `t` with `rows` rows per item as f32 (batch, rows, e), contiguous.
std::vector<float> Gather(const cuda::AttentionTensor& t, const cuda::AttentionArgs& a,
                          int64_t rows) {
  std::vector<float> out(a.batch * rows * a.e);
  DispatchAll(a.type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* base = static_cast<const T*>(H(t.data));
    for (int64_t b = 0; b < a.batch; ++b) {
      for (int64_t r = 0; r < rows; ++r) {
        const T* src = base + RowOffset(t, a, b, r);
        for (int64_t c = 0; c < a.e; ++c) out[(b * rows + r) * a.e + c] = kc::Cast<float>(src[c]);
      }
    }
  });
  return out;
}

// Writes `values` (batch, rows, e) into operand `t`, rounded to the call's type.
template <typename V>
void Scatter(const std::vector<V>& values, const cuda::AttentionTensor& t,
             const cuda::AttentionArgs& a, int64_t rows) {
  DispatchAll(a.type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* base = static_cast<T*>(H(t.data));
    for (int64_t b = 0; b < a.batch; ++b) {
      for (int64_t r = 0; r < rows; ++r) {
        T* dst = base + RowOffset(t, a, b, r);
        for (int64_t c = 0; c < a.e; ++c) {
          dst[c] = kc::Cast<T>(static_cast<float>(values[(b * rows + r) * a.e + c]));
        }
      }
    }
  });
}

}  // namespace

void HostBackend::AttentionForward(const cuda::AttentionArgs& a, Stream stream) {
  CheckStream(stream);
  CheckFloat(a.type, "AttentionForward");
  TY_CHECK(a.e <= 128) << "AttentionForward: e " << a.e << ", l " << a.l << ", s " << a.s
                       << ", causal " << a.causal;
  Count("AttentionForward");
  const int64_t l = a.l, s = a.s, e = a.e;
  const std::vector<float> qs = Gather(a.q, a, l), ks = Gather(a.k, a, s), vs = Gather(a.v, a, s);
  std::vector<double> os(a.batch * l * e);
  float* lses = H(a.lse);
  std::vector<double> sc(s);
  for (int64_t b = 0; b < a.batch; ++b) {
    const float* qb = qs.data() + b * l * e;
    const float* kb = ks.data() + b * s * e;
    const float* vb = vs.data() + b * s * e;
    for (int64_t i = 0; i < l; ++i) {
      const int64_t n = Visible(a.causal, i, s);
      double m = -INFINITY;
      for (int64_t j = 0; j < n; ++j)
        m = std::max(m, sc[j] = a.scale * Dot(qb + i * e, kb + j * e, e));
      double sum = 0;
      for (int64_t j = 0; j < n; ++j) sum += std::exp(sc[j] - m);
      const double row_lse = m + std::log(sum);
      double* acc = os.data() + (b * l + i) * e;
      for (int64_t j = 0; j < n; ++j) {
        const double p = std::exp(sc[j] - row_lse);
        for (int64_t c = 0; c < e; ++c) acc[c] += p * vb[j * e + c];
      }
      lses[b * l + i] = static_cast<float>(row_lse);
    }
  }
  Scatter(os, a.out, a, l);
}

void HostBackend::AttentionBackward(const cuda::AttentionArgs& a, Stream stream) {
  CheckStream(stream);
  CheckFloat(a.type, "AttentionBackward");
  Count("AttentionBackward");
  const int64_t l = a.l, s = a.s, e = a.e;
  const std::vector<float> qs = Gather(a.q, a, l), ks = Gather(a.k, a, s), vs = Gather(a.v, a, s);
  const std::vector<float> os = Gather(a.out, a, l), gos = Gather(a.gout, a, l);
  const float* lses = H(a.lse);
  std::vector<double> dq(qs.size(), 0), dk(ks.size(), 0), dv(ks.size(), 0);
  for (int64_t b = 0; b < a.batch; ++b) {
    const int64_t qo = b * l * e, ko = b * s * e;
    for (int64_t i = 0; i < l; ++i) {
      const float* qi = qs.data() + qo + i * e;
      const float* gi = gos.data() + qo + i * e;
      const double d = Dot(gi, os.data() + qo + i * e, e);  // sum_j p_ij dp_ij
      for (int64_t j = 0; j < Visible(a.causal, i, s); ++j) {
        const float* kj = ks.data() + ko + j * e;
        const double p = std::exp(a.scale * Dot(qi, kj, e) - lses[b * l + i]);
        const double ds = p * (Dot(gi, vs.data() + ko + j * e, e) - d);
        for (int64_t c = 0; c < e; ++c) {
          dv[ko + j * e + c] += p * gi[c];
          dq[qo + i * e + c] += a.scale * ds * kj[c];
          dk[ko + j * e + c] += a.scale * ds * qi[c];
        }
      }
    }
  }
  Scatter(dq, a.gq, a, l);
  Scatter(dk, a.gk, a, s);
  Scatter(dv, a.gv, a, s);
}

// ---- GEMM ----

namespace {

// Elements a stored rows x cols matrix with row stride ld spans.
int64_t Span(int64_t rows, int64_t cols, int64_t ld) {
  return rows == 0 || cols == 0 ? 0 : (rows - 1) * ld + cols;
}

// C (m x n, ldc) += bias per column, then tanh GELU (keeping the pre-activation when asked).
void Epilogue(const cuda::GemmArgs& g, ScalarType out_type, float* c) {
  const cuda::GemmEpilogue& ep = g.epilogue;
  if (ep.bias != nullptr) {
    F32 bias(out_type, H(ep.bias), g.n);
    for (int64_t i = 0; i < g.m; ++i)
      for (int64_t j = 0; j < g.n; ++j) c[i * g.ldc + j] += bias.data()[j];
  }
  if (!ep.gelu) return;
  F32 pre(out_type, H(ep.gelu_input), g.m * g.n, false);  // batch 1 (checked)
  for (int64_t i = 0; i < g.m; ++i) {
    float* row = c + i * g.ldc;
    if (pre.data() != nullptr) std::copy(row, row + g.n, pre.data() + i * g.n);
    kc::Unary<float>(kc::UnaryOp::kGeluTanh, FlatIter(g.n, 2), row, row, 0, 0);
  }
  pre.Store();
}

size_t Bytes(ScalarType t) { return t == ScalarType::kF32 ? 4 : 2; }

}  // namespace

bool HostBackend::AttentionFits(int device, ScalarType, int64_t e) {
  CheckDevice(device);
  return e >= 1 && e <= options_.attention_max_head;
}

void HostBackend::Gemm(const cuda::GemmArgs& g, Stream stream) {
  CheckStream(stream);
  CheckFloat(g.in, "Gemm");
  CheckFloat(g.out, "Gemm");
  TY_CHECK(g.out == g.in || g.out == ScalarType::kF32)
      << "Gemm: output type " << static_cast<int>(g.out) << " for input " << static_cast<int>(g.in);
  TY_CHECK(!g.epilogue.gelu || g.epilogue.gelu_input == nullptr || g.batch == 1)
      << "Gemm: a gelu_input for a batch of " << g.batch;
  Count("Gemm");
  if (g.in == ScalarType::kBF16) Count("Gemm.bf16");
  if (g.in == ScalarType::kF16) Count("Gemm.f16");
  const int64_t a_span = g.trans_a ? Span(g.k, g.m, g.lda) : Span(g.m, g.k, g.lda);
  const int64_t b_span = g.trans_b ? Span(g.n, g.k, g.ldb) : Span(g.k, g.n, g.ldb);
  const int64_t c_span = Span(g.m, g.n, g.ldc);
  for (int64_t item = 0; item < g.batch; ++item) {
    const char* a = static_cast<const char*>(H(g.a)) + item * g.stride_a * Bytes(g.in);
    const char* b = static_cast<const char*>(H(g.b)) + item * g.stride_b * Bytes(g.in);
    char* c = static_cast<char*>(H(g.c)) + item * g.stride_c * Bytes(g.out);
    // C is loaded even for beta 0: Store() writes its whole span back, gaps between rows too.
    F32 as(g.in, a, a_span), bs(g.in, b, b_span), cs(g.out, c, c_span);
    if (g.m > 0 && g.n > 0) {
      kc::Gemm<float>(g.trans_a, g.trans_b, g.m, g.n, g.k, g.alpha, as.data(), g.lda, bs.data(),
                      g.ldb, g.beta, cs.data(), g.ldc);
      Epilogue(g, g.out, cs.data());
    }
    cs.Store();
  }
}

// ---- Convolution ----

namespace {
kc::Conv2dShape ShapeOf(const cuda::ConvDims& d) {
  kc::Conv2dShape s;
  s.batch = d.n, s.in_channels = d.c, s.height = d.h, s.width = d.w;
  s.out_channels = d.k, s.groups = d.groups, s.kernel_h = d.r, s.kernel_w = d.s;
  s.stride_h = d.stride_h, s.stride_w = d.stride_w, s.pad_h = d.pad_h, s.pad_w = d.pad_w;
  s.dilation_h = d.dil_h, s.dilation_w = d.dil_w, s.out_h = d.out_h, s.out_w = d.out_w;
  return s;
}
int64_t XSize(const cuda::ConvDims& d) { return d.n * d.c * d.h * d.w; }
int64_t WSize(const cuda::ConvDims& d) { return d.k * (d.c / d.groups) * d.r * d.s; }
int64_t YSize(const cuda::ConvDims& d) { return d.n * d.k * d.out_h * d.out_w; }
}  // namespace

void HostBackend::ConvForward(ScalarType type, const cuda::ConvDims& d, const void* x,
                              const void* w, void* y, Stream stream) {
  CheckStream(stream);
  CheckFloat(type, "ConvForward");
  Count("ConvForward");
  F32 xs(type, H(x), XSize(d)), ws(type, H(w), WSize(d)), ys(type, H(y), YSize(d), false);
  kc::Conv2dForward<float>(ShapeOf(d), xs.data(), ws.data(), nullptr, ys.data());
  ys.Store();
}

void HostBackend::ConvBackwardData(ScalarType type, const cuda::ConvDims& d, const void* w,
                                   const void* gy, void* gx, Stream stream) {
  CheckStream(stream);
  CheckFloat(type, "ConvBackwardData");
  Count("ConvBackwardData");
  F32 ws(type, H(w), WSize(d)), gys(type, H(gy), YSize(d)), gxs(type, H(gx), XSize(d), false);
  kc::Conv2dBackwardInput<float>(ShapeOf(d), gys.data(), ws.data(), gxs.data());
  gxs.Store();
}

void HostBackend::ConvBackwardFilter(ScalarType type, const cuda::ConvDims& d, const void* x,
                                     const void* gy, void* gw, Stream stream) {
  CheckStream(stream);
  CheckFloat(type, "ConvBackwardFilter");
  Count("ConvBackwardFilter");
  F32 xs(type, H(x), XSize(d)), gys(type, H(gy), YSize(d)), gws(type, H(gw), WSize(d), false);
  kc::Conv2dBackwardWeight<float>(ShapeOf(d), gys.data(), xs.data(), gws.data());
  gws.Store();
}

}  // namespace trainyard::testing
