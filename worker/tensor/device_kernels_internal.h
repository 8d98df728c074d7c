// Shared by device_kernels*.cc: the backend, stream and dtype of a CUDA call, and typed data
// pointers that may be null for undefined tensors.
#pragma once

#include "worker/tensor/cuda_backend.h"
#include "worker/tensor/tensor.h"

namespace trainyard::device::internal {

inline cuda::Backend& B() { return CudaBackend(); }
inline cuda::Stream S(const Tensor& t) { return ComputeStream(t.device()); }
inline cuda::ScalarType T(const Tensor& t) { return ToScalarType(t.dtype()); }
inline void* Ptr(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }
template <typename U>
U* DataOrNull(const Tensor& t) {
  return t.defined() ? t.data<U>() : nullptr;
}

}  // namespace trainyard::device::internal
