// CudaBackendImpl's multi-tensor optimizer kernels: AdamMulti (kernels/cpu/optim.h AdamUpdate,
// bit-exact: Note [Bit-exact ports] in backend_impl.h) and the loss scaler's UnscaleCheck.
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
constexpr int kTensorsPerLaunch = 32;   // multi-tensor kernels: tensors per by-value batch
constexpr int64_t kTensorChunk = 4096;  // multi-tensor kernels: elements per block

// ---- Multi-tensor kernels: a by-value batch of up to kTensorsPerLaunch tensors per launch;
// tensor k owns blocks [first_block[k], first_block[k + 1]), kTensorChunk elements each ----
struct BlockMap {
  int64_t first_block[kTensorsPerLaunch + 1];
  int count;
  // The tensor of this block and the block's first element in it.
  __device__ int Find(int64_t* begin) const {
    const int64_t b = blockIdx.x;
    int k = 0;
    while (k + 1 < count && first_block[k + 1] <= b) ++k;
    *begin = (b - first_block[k]) * kTensorChunk;
    return k;
  }
};

struct AdamBatch {
  AdamTensor t[kTensorsPerLaunch];
  BlockMap map;
};

// The hyperparameters of one step rounded to f32 where AdamUpdate<float> rounds them.
struct AdamScalars {
  float decay, l2, lerp_coef, beta2, one_minus_beta2, bias_correction2_sqrt, eps, neg_step_size;
  bool use_l2, lerp_small;
};

AdamScalars MakeAdamScalars(int64_t step, double lr, double beta1, double beta2, double eps,
                            double weight_decay, bool decoupled) {
  AdamScalars s;
  const bool decay = weight_decay != 0;
  s.decay = decay && decoupled ? static_cast<float>(1 - lr * weight_decay) : 1.0f;
  s.use_l2 = decay && !decoupled;
  s.l2 = static_cast<float>(weight_decay);
  const float w = static_cast<float>(1 - beta1);
  s.lerp_small = std::fabs(w) < 0.5f;
  s.lerp_coef = s.lerp_small ? w : w - 1.0f;
  s.beta2 = static_cast<float>(beta2);
  s.one_minus_beta2 = static_cast<float>(1 - beta2);
  const double t = static_cast<double>(step);
  const double bias_correction1 = 1 - std::pow(beta1, t);
  s.bias_correction2_sqrt = static_cast<float>(std::pow(1 - std::pow(beta2, t), 0.5));
  s.eps = static_cast<float>(eps);
  s.neg_step_size = static_cast<float>(-(lr / bias_correction1));
  return s;
}

// AdamUpdate<float> (kernels/cpu/optim.cc) per element, every rounding spelled out.
__global__ void __launch_bounds__(kThreads)
    AdamKernel(const __grid_constant__ AdamBatch batch, const AdamScalars s,
               const float* found_inf) {
  if (found_inf != nullptr && *found_inf != 0.0f) return;
  int64_t begin = 0;
  const int k = batch.map.Find(&begin);
  float* param = batch.t[k].param;
  const float* grad = batch.t[k].grad;
  float* m = batch.t[k].exp_avg;
  float* v = batch.t[k].exp_avg_sq;
  const int64_t end = Min64(batch.t[k].n, begin + kTensorChunk);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    float p = param[i];
    const float g = s.use_l2 ? __fmaf_rn(s.l2, p, grad[i]) : grad[i];
    const float mi = m[i];
    const float mn = __fmaf_rn(s.lerp_coef, __fsub_rn(g, mi), s.lerp_small ? mi : g);
    const float vn = __fmaf_rn(__fmul_rn(s.one_minus_beta2, g), g, __fmul_rn(v[i], s.beta2));
    p = __fmul_rn(p, s.decay);
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vn), s.bias_correction2_sqrt), s.eps);
    param[i] = __fadd_rn(p, __fdiv_rn(__fmul_rn(s.neg_step_size, mn), denom));
    m[i] = mn;
    v[i] = vn;
  }
}

struct ScaleBatch {
  float* t[kTensorsPerLaunch];
  int64_t n[kTensorsPerLaunch];
  BlockMap map;
};

// x *= scale; *found_inf = 1 when an x (before scaling) is inf or NaN.
__global__ void __launch_bounds__(kThreads)
    UnscaleKernel(const __grid_constant__ ScaleBatch batch, float scale, float* found_inf) {
  int64_t begin = 0;
  const int k = batch.map.Find(&begin);
  float* x = batch.t[k];
  const int64_t end = Min64(batch.n[k], begin + kTensorChunk);
  bool bad = false;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const float v = x[i];
    bad = bad || (__float_as_uint(v) & 0x7f800000u) == 0x7f800000u;
    x[i] = __fmul_rn(v, scale);
  }
  if (bad && found_inf != nullptr) *found_inf = 1.0f;
}

// Adds a tensor of n elements to the batch being built; launches it when full (flush: now).
template <typename Batch, typename Launch>
void AddToBatch(Batch* b, int64_t n, bool flush, const Launch& launch) {
  BlockMap& m = b->map;
  if (n > 0) {
    if (m.count == 0) m.first_block[0] = 0;
    m.first_block[m.count + 1] = m.first_block[m.count] + CeilDiv(n, kTensorChunk);
    ++m.count;
  }
  if (m.count == 0 || (!flush && m.count < kTensorsPerLaunch)) return;
  TY_CHECK(m.first_block[m.count] < (int64_t{1} << 31)) << m.first_block[m.count] << " blocks";
  launch(static_cast<unsigned>(m.first_block[m.count]));
  m.count = 0;
}

}  // namespace

void CudaBackendImpl::AdamMulti(const AdamTensor* tensors, int count, int64_t step, double lr,
                                double beta1, double beta2, double eps, double weight_decay,
                                bool decoupled, const float* found_inf, Stream stream) {
  TY_CHECK(step >= 1) << "AdamMulti: step " << step << " (the first update is step 1)";
  const AdamScalars s = MakeAdamScalars(step, lr, beta1, beta2, eps, weight_decay, decoupled);
  AdamBatch batch{};
  auto launch = [&](unsigned blocks) {
    AdamKernel<<<blocks, kThreads, 0, AsStream(stream)>>>(batch, s, found_inf);
    CheckLaunch("adam");
  };
  for (int k = 0; k < count; ++k) {
    if (tensors[k].n > 0) batch.t[batch.map.count] = tensors[k];
    AddToBatch(&batch, tensors[k].n, k + 1 == count, launch);
  }
}

void CudaBackendImpl::UnscaleCheck(float* const* tensors, const int64_t* sizes, int count,
                                   float scale, float* found_inf, Stream stream) {
  ScaleBatch batch{};
  auto launch = [&](unsigned blocks) {
    UnscaleKernel<<<blocks, kThreads, 0, AsStream(stream)>>>(batch, scale, found_inf);
    CheckLaunch("unscale");
  };
  for (int k = 0; k < count; ++k) {
    if (sizes[k] > 0) batch.t[batch.map.count] = tensors[k], batch.n[batch.map.count] = sizes[k];
    AddToBatch(&batch, sizes[k], k + 1 == count, launch);
  }
}

}  // namespace trainyard::kernels::cuda
