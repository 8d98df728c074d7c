// CudaBackendImpl's reductions: sums and max/min over [outer, k, inner] (kernels/cpu/reduce.h)
// and NormPow (optim.h SumAbsPow / MaxAbs). Math is in f32 for f32/bf16/f16 storage (f64 for
// f64 sums and max/min, double for NormPow's sums).
//
// Note [Deterministic reductions]
// Launch shapes depend only on the problem's sizes (never on the GPU), every block combines
// in a fixed tree (warp shuffles, then warps in order), and when one output is split over
// several blocks each block writes a partial to scratch (cudaMallocAsync on the stream) that a
// second kernel combines in split order. Results are the same run to run and GPU to GPU; they
// differ from the CPU's only by the order of additions. Max/min pick NaN first, then the
// extreme, ties to the lowest index, which makes their result independent of any order.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/backend_impl.h"
#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/row_reduce.cuh"

namespace trainyard::kernels::cuda {
namespace {

// ---- [outer, k, inner] reductions (Note [Deterministic reductions]) ----
// A policy P says what is reduced: Identity(), Make(element pointer, j), a combine
// operator() and Write(output index, result).
template <typename T>
struct SumPolicy {
  using A = Acc<T>;
  T* out;
  A scale;
  __device__ A Identity() const { return A(0); }
  __device__ A Make(const T* p, int64_t) const { return LoadAcc(p); }
  __device__ A operator()(A a, A b) const { return a + b; }
  __device__ void Write(int64_t t, A v) const { out[t] = FromAcc<T>(v * scale); }
};

template <typename A>
struct ValIdx {
  A v;
  int64_t i;  // < 0: no element yet
};

template <typename T>
struct MaxMinPolicy {
  using A = ValIdx<Acc<T>>;
  T* out;
  int64_t* idx;
  bool is_max;
  __device__ A Identity() const { return {Acc<T>(0), -1}; }
  __device__ A Make(const T* p, int64_t j) const { return {LoadAcc(p), j}; }
  __device__ A operator()(A a, A b) const {
    if (a.i < 0 || b.i < 0) return a.i < 0 ? b : a;
    const bool an = a.v != a.v, bn = b.v != b.v;
    if (an != bn) return an ? a : b;
    if (an || a.v == b.v) return a.i < b.i ? a : b;
    return (is_max ? a.v > b.v : a.v < b.v) ? a : b;
  }
  __device__ void Write(int64_t t, A v) const {
    out[t] = FromAcc<T>(v.v);
    if (idx != nullptr) idx[t] = v.i;
  }
};

// sum |x|^p (p > 0) in double, or max |x| (NaN if any is NaN, 0 for none) when p == 0.
template <typename T>
struct NormPolicy {
  using A = double;
  double* out;
  double p;
  __device__ A Identity() const { return 0; }
  __device__ A Make(const T* ptr, int64_t) const {
    const double v = fabs(static_cast<double>(Load(ptr)));
    return p == 2 ? v * v : (p == 1 || p == 0 ? v : pow(v, p));
  }
  __device__ A operator()(A a, A b) const {
    if (p != 0) return a + b;
    return a != a ? a : (b != b ? b : fmax(a, b));
  }
  __device__ void Write(int64_t t, A v) const { out[t] = v; }
};

// x: (outer, k), a row per warp or block (PlanRows); split blockIdx.y takes the k indices
// [blockIdx.y * chunk, + chunk). partial (when not null): (outer, gridDim.y).
template <typename T, typename P>
__global__ void __launch_bounds__(512) ReduceRowsKernel(P p, const T* x, int64_t outer, int64_t k,
                                                        int64_t chunk, typename P::A* partial) {
  __shared__ typename P::A smem[32];
  const int64_t row = RowOf();
  const int64_t j0 = blockIdx.y * chunk, j1 = Min64(k, j0 + chunk);
  typename P::A acc = p.Identity();
  if (row < outer) {
    for (int64_t j = j0 + threadIdx.x; j < j1; j += blockDim.x)
      acc = p(acc, p.Make(x + row * k + j, j));
  }
  acc = RowAllReduce(acc, p, smem);
  if (row >= outer || threadIdx.x != 0) return;
  if (partial == nullptr) {
    p.Write(row, acc);
  } else {
    partial[row * gridDim.y + blockIdx.y] = acc;
  }
}

// x: (outer, k, inner); block (32, 8), grid.x = outer * ceil(inner / 32) column tiles, split
// blockIdx.y over k as above. Thread (tx, ty) sums column i over j = j0 + ty, + 8, ...
// partial (when not null): (outer * inner, gridDim.y).
template <typename T, typename P>
__global__ void __launch_bounds__(256) ReduceColsKernel(P p, const T* x, int64_t k, int64_t inner,
                                                        int64_t chunk, typename P::A* partial) {
  __shared__ typename P::A smem[8][32];
  const int64_t tiles = (inner + 31) / 32;
  const int64_t o = blockIdx.x / tiles, i = (blockIdx.x % tiles) * 32 + threadIdx.x;
  const int64_t j0 = blockIdx.y * chunk, j1 = Min64(k, j0 + chunk);
  typename P::A acc = p.Identity();
  if (i < inner) {
    for (int64_t j = j0 + threadIdx.y; j < j1; j += 8) {
      acc = p(acc, p.Make(x + (o * k + j) * inner + i, j));
    }
  }
  smem[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y != 0 || i >= inner) return;
  for (int r = 1; r < 8; ++r) acc = p(acc, smem[r][threadIdx.x]);
  const int64_t t = o * inner + i;
  if (partial == nullptr) {
    p.Write(t, acc);
  } else {
    partial[t * gridDim.y + blockIdx.y] = acc;
  }
}

// out[t] = the splits of output t combined in order.
template <typename P>
__global__ void FinishKernel(P p, const typename P::A* partial, int64_t count, int splits) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < count;
       t += stride) {
    typename P::A acc = partial[t * splits];
    for (int s = 1; s < splits; ++s) acc = p(acc, partial[t * splits + s]);
    p.Write(t, acc);
  }
}

template <typename T, typename P>
void LaunchReduce(const char* name, const P& p, const T* x, int64_t outer, int64_t k, int64_t inner,
                  cudaStream_t stream) {
  using A = typename P::A;
  const int64_t count = outer * inner;
  if (count == 0) return;
  dim3 grid, block;
  int64_t blocks = 0, min_chunk = 0;
  if (inner == 1) {
    const RowPlan plan = PlanRows(outer, k);
    grid = plan.grid, block = plan.block, blocks = grid.x;
    min_chunk = block.x == 32 ? k : 8192;  // warp rows are short: never split
  } else {
    blocks = outer * CeilDiv(inner, 32);
    TY_CHECK(blocks < (int64_t{1} << 31)) << name << ": " << outer << " x " << inner;
    grid = dim3(static_cast<unsigned>(blocks)), block = dim3(32, 8), min_chunk = 128;
  }
  int64_t splits = std::max<int64_t>(
      1, std::min(kTargetBlocks / blocks, CeilDiv(k, std::max<int64_t>(min_chunk, 1))));
  const int64_t chunk = k == 0 ? 0 : CeilDiv(k, splits);
  splits = k == 0 ? 1 : CeilDiv(k, chunk);
  grid.y = static_cast<unsigned>(splits);
  A* partial = nullptr;
  if (splits > 1) {
    partial = Scratch<A>(name, count * splits, stream);
  }
  if (inner == 1) {
    ReduceRowsKernel<<<grid, block, 0, stream>>>(p, x, outer, k, chunk, partial);
  } else {
    ReduceColsKernel<<<grid, block, 0, stream>>>(p, x, k, inner, chunk, partial);
  }
  CheckLaunch(name);
  if (partial == nullptr) return;
  FinishKernel<<<BlocksFor(count), 256, 0, stream>>>(p, partial, count, static_cast<int>(splits));
  CheckLaunch(name);
  TY_CUDA_CHECK(cudaFreeAsync(partial, stream));
}

}  // namespace

void CudaBackendImpl::ReduceSum(ScalarType type, const void* x, void* out, int64_t outer, int64_t k,
                                int64_t inner, double scale, Stream stream) {
  DispatchDtype<DtypeSet::kFloatF64>(type, "sum", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const SumPolicy<T> p{static_cast<T*>(out), static_cast<Acc<T>>(scale)};
    LaunchReduce("sum", p, static_cast<const T*>(x), outer, k, inner, AsStream(stream));
  });
}

void CudaBackendImpl::ReduceMaxMin(bool is_max, ScalarType type, const void* x, void* out,
                                   int64_t* idx, int64_t outer, int64_t k, int64_t inner,
                                   Stream stream) {
  const char* name = is_max ? "max" : "min";
  TY_CHECK(k > 0 || outer * inner == 0) << name << ": reducing an empty dim (k = 0)";
  DispatchDtype<DtypeSet::kFloatF64>(type, name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const MaxMinPolicy<T> p{static_cast<T*>(out), idx, is_max};
    LaunchReduce(name, p, static_cast<const T*>(x), outer, k, inner, AsStream(stream));
  });
}

void CudaBackendImpl::NormPow(ScalarType type, const void* x, int64_t n, double p, double* out,
                              Stream stream) {
  TY_CHECK(p >= 0) << "norm: p is " << p << "; it must be positive (0 for the max norm)";
  DispatchDtype<DtypeSet::kFloat>(type, "norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    LaunchReduce("norm", NormPolicy<T>{out, p}, static_cast<const T*>(x), 1, n, 1,
                 AsStream(stream));
  });
}

}  // namespace trainyard::kernels::cuda
