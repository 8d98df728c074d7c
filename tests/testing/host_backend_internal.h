// Shared by host_backend*.cc: device-pointer translation, dtype dispatch and f32 views of 16-bit
// storage. Not for use outside HostBackend.
#pragma once

#include <cstdint>
#include <vector>

#include "common/check.h"
#include "kernels/cpu/copy.h"
#include "tests/testing/host_backend.h"

namespace trainyard::testing::host_internal {

namespace kc = kernels::cpu;
using kernels::cuda::ScalarType;

template <typename T>
T* H(T* p) {
  return static_cast<T*>(HostBackend::Host(p));
}

template <typename T>
struct Tag {
  using type = T;
};

// Calls f(Tag<T>{}) with the C++ type of `t` (bool for kBool).
template <typename F>
void DispatchAll(ScalarType t, const F& f) {
  switch (t) {
    case ScalarType::kF32:
      return f(Tag<float>{});
    case ScalarType::kF64:
      return f(Tag<double>{});
    case ScalarType::kBF16:
      return f(Tag<BFloat16>{});
    case ScalarType::kF16:
      return f(Tag<Half>{});
    case ScalarType::kI64:
      return f(Tag<int64_t>{});
    case ScalarType::kI32:
      return f(Tag<int32_t>{});
    case ScalarType::kU8:
      return f(Tag<uint8_t>{});
    case ScalarType::kBool:
      return f(Tag<bool>{});
  }
  TY_CHECK(false) << "host backend: unknown scalar type " << static_cast<int>(t);
}

// The kernels' compute dtypes: f32 storage, or bf16/f16 computed in f32. Aborts otherwise, as
// the CUDA backend does for an unsupported dtype.
inline void CheckFloat(ScalarType t, const char* kernel) {
  TY_CHECK(t == ScalarType::kF32 || t == ScalarType::kBF16 || t == ScalarType::kF16)
      << "host backend " << kernel << ": scalar type " << static_cast<int>(t)
      << " is not supported (f32, bf16, f16)";
}

// n contiguous values of `t` at host address p, seen as f32: p itself for f32, else a converted
// copy that Store() rounds back. A null p gives a null data().
class F32 {
 public:
  F32(ScalarType t, const void* p, int64_t n, bool load = true) : t_(t), p_(const_cast<void*>(p)) {
    if (p_ == nullptr || t_ == ScalarType::kF32) return;
    buf_.resize(n);
    if (!load) return;
    DispatchAll(t_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* src = static_cast<const T*>(p_);
      for (int64_t i = 0; i < n; ++i) buf_[i] = kc::Cast<float>(src[i]);
    });
  }
  float* data() {
    if (p_ == nullptr) return nullptr;
    return t_ == ScalarType::kF32 ? static_cast<float*>(p_) : buf_.data();
  }
  void Store() {
    if (p_ == nullptr || t_ == ScalarType::kF32) return;
    DispatchAll(t_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* dst = static_cast<T*>(p_);
      for (size_t i = 0; i < buf_.size(); ++i) dst[i] = kc::Cast<T>(buf_[i]);
    });
  }

 private:
  ScalarType t_;
  void* p_;
  std::vector<float> buf_;
};

// An iterator over it's shape whose operand 0 is contiguous and operand 1 is it's operand op:
// copying through it gathers operand op in iteration order (or scatters, swapped).
inline kc::StridedIter GatherIter(const kc::StridedIter& it, int op, bool scatter) {
  kc::StridedIter g;
  g.ndim = it.ndim;
  g.nops = 2;
  int64_t stride = 1;
  for (int d = it.ndim - 1; d >= 0; --d) {
    g.sizes[d] = it.sizes[d];
    g.strides[scatter ? 1 : 0][d] = stride;
    g.strides[scatter ? 0 : 1][d] = it.strides[op][d];
    stride *= it.sizes[d];
  }
  return g;
}

// Operand op of `it` (type t at host address p) as contiguous D values in iteration order.
template <typename D>
std::vector<D> Gather(ScalarType t, const kc::StridedIter& it, int op, const void* p) {
  std::vector<D> out(it.numel());
  DispatchAll(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    kc::CopyCast(GatherIter(it, op, false), out.data(), static_cast<const T*>(p));
  });
  return out;
}

// Writes contiguous D values (iteration order) into operand op of `it` (type t at p).
template <typename D>
void Scatter(ScalarType t, const kc::StridedIter& it, int op, const std::vector<D>& v, void* p) {
  DispatchAll(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    kc::CopyCast(GatherIter(it, op, true), static_cast<T*>(p), v.data());
  });
}

// A contiguous iterator over n elements for nops operands.
inline kc::StridedIter FlatIter(int64_t n, int nops) {
  kc::StridedIter it;
  it.ndim = 1;
  it.nops = nops;
  it.sizes[0] = n;
  for (int op = 0; op < nops; ++op) it.strides[op][0] = 1;
  return it;
}

}  // namespace trainyard::testing::host_internal
