// CudaBackendImpl's indexing: IndexRows, IndexAddRows and CheckIndices, with the semantics of
// kernels/cpu/indexing.h. IndexAddRows adds with atomics, so its order of additions is not fixed
// (backend.h says so); everything else here is bit-exact with the CPU.
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

// out[i, :] = x[index[i], :] (B: the element's bits); blockDim.y index entries per block.
template <typename B>
__global__ void IndexRowsKernel(const B* x, int64_t row, const int64_t* index, int64_t n, B* out) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    const B* src = x + index[i] * row;
    for (int64_t j = threadIdx.x; j < row; j += blockDim.x) out[i * row + j] = src[j];
  }
}

// kernels/cpu/indexing.h CheckIndices; a rejected value goes to *fault, host memory the kernel
// writes through unified addressing. Plain stores, the op last: a launch sees the op of an
// earlier launch's fault and keeps it; threads of one launch write the same check and any of
// their rejected values.
__global__ void CheckIndicesKernel(const int64_t* index, int64_t n, IndexCheck check, int64_t* out,
                                   IndexFault* fault) {
  for (int64_t i = GlobalThread(); i < n; i += GridThreads()) {
    const int64_t v = index[i];
    const bool valid = (v >= 0 && v < check.size) || (check.has_ignore && v == check.ignore_index);
    out[i] = valid ? v : check.has_ignore ? check.ignore_index : 0;
    if (valid) continue;
    volatile IndexFault* f = fault;
    if (f->check.op != nullptr) continue;
    f->value = v;
    f->check.dim = check.dim;
    f->check.size = check.size;
    f->check.has_ignore = check.has_ignore;
    f->check.ignore_index = check.ignore_index;
    __threadfence_system();
    f->check.op = check.op;
  }
}

__device__ __forceinline__ void AtomicAdd(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void AtomicAdd(double* p, double v) { atomicAdd(p, v); }
__device__ __forceinline__ void AtomicAdd(int32_t* p, int32_t v) { atomicAdd(p, v); }
__device__ __forceinline__ void AtomicAdd(int64_t* p, int64_t v) {  // two's complement wraps
  atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
}

// out[index[i], :] += src[i, :] with atomics.
template <typename T>
__global__ void IndexAddRowsKernel(T* out, int64_t row, const int64_t* index, int64_t n,
                                   const T* src) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    T* dst = out + index[i] * row;
    for (int64_t j = threadIdx.x; j < row; j += blockDim.x) AtomicAdd(dst + j, src[i * row + j]);
  }
}

}  // namespace

void CudaBackendImpl::IndexRows(ScalarType type, const void* x, int64_t row, const int64_t* index,
                                int64_t n, void* out, Stream stream) {
  if (n <= 0 || row <= 0) return;
  const dim3 block = RowBlock(row);
  auto launch = [&](auto tag) {
    using B = typename decltype(tag)::type;
    IndexRowsKernel<<<RowGrid(n, block), block, 0, AsStream(stream)>>>(
        static_cast<const B*>(x), row, index, n, static_cast<B*>(out));
  };
  switch (type) {
    case ScalarType::kF64:
    case ScalarType::kI64:
      launch(Tag<uint64_t>{});
      break;
    case ScalarType::kF32:
    case ScalarType::kI32:
      launch(Tag<uint32_t>{});
      break;
    case ScalarType::kBF16:
    case ScalarType::kF16:
      launch(Tag<uint16_t>{});
      break;
    case ScalarType::kU8:
    case ScalarType::kBool:
      launch(Tag<uint8_t>{});
      break;
  }
  CheckLaunch("index_select");
}

void CudaBackendImpl::CheckIndices(const int64_t* index, int64_t n, const IndexCheck& check,
                                   int64_t* out, IndexFault* fault, Stream stream) {
  if (n <= 0) return;
  CheckIndicesKernel<<<BlocksFor(n), kThreads, 0, AsStream(stream)>>>(index, n, check, out, fault);
  CheckLaunch("index check");
}

void CudaBackendImpl::IndexAddRows(ScalarType type, void* out, int64_t row, const int64_t* index,
                                   int64_t n, const void* src, Stream stream) {
  TY_CHECK(type != ScalarType::kBF16 && type != ScalarType::kF16)
      << "index_add on 16-bit floats would round the sums at every add; sum in f32";
  if (n <= 0 || row <= 0) return;
  const dim3 block = RowBlock(row);
  DispatchDtype<DtypeSet::kFloatF64Int>(type, "index_add", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (sizeof(T) >= 4) {
      IndexAddRowsKernel<<<RowGrid(n, block), block, 0, AsStream(stream)>>>(
          static_cast<T*>(out), row, index, n, static_cast<const T*>(src));
    }
  });
  CheckLaunch("index_add");
}

}  // namespace trainyard::kernels::cuda
