#include "worker/ops/common.h"

#include "worker/autograd/autocast.h"
#include "worker/ops/reduction.h"
#include "worker/ops/views.h"
#include "worker/tensor/device_kernels.h"

namespace trainyard::ops {

Shape BroadcastStrides(const Tensor& t, const Shape& shape) {
  TY_CHECK(t.dim() <= shape.size()) << "cannot broadcast shape " << t.shape() << " to " << shape;
  Shape st;
  st.resize(shape.size());
  const int64_t lead = shape.size() - t.dim();
  for (int64_t i = lead < 0 ? 0 : lead; i < shape.size(); ++i) {
    int64_t ti = i - lead;
    st[i] = (t.shape()[ti] == 1 && shape[i] != 1) ? 0 : t.strides()[ti];
  }
  return st;
}

kernels::cpu::StridedIter IterFor(const Shape& shape, std::initializer_list<const Tensor*> ops) {
  // Fast path: every operand contiguous with the iteration shape is one flat run.
  bool flat = true;
  for (const Tensor* t : ops) flat = flat && t->shape() == shape && t->is_contiguous();
  if (flat) {
    kernels::cpu::StridedIter it;
    it.nops = static_cast<int>(ops.size());
    it.ndim = 1;
    it.sizes[0] = shape.numel();
    for (int i = 0; i < it.nops; ++i) it.strides[i][0] = 1;
    return it;
  }
  Shape strides[kernels::cpu::kMaxOperands];
  const int64_t* ptrs[kernels::cpu::kMaxOperands];
  int n = 0;
  for (const Tensor* t : ops) {
    strides[n] = t->shape() == shape ? t->strides() : BroadcastStrides(*t, shape);
    ptrs[n] = strides[n].data();
    ++n;
  }
  return kernels::cpu::MakeIter(static_cast<int>(shape.size()), shape.data(), n, ptrs);
}

Tensor SumToShape(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  std::vector<int64_t> dims;
  const int64_t lead = grad.dim() - shape.size();
  for (int64_t i = 0; i < grad.dim(); ++i) {
    if (i < lead || (shape[i - lead] == 1 && grad.shape()[i] != 1)) dims.push_back(i);
  }
  Tensor s = dims.empty() ? grad : Sum(grad, dims, /*keepdim=*/true);
  return Reshape(s, shape);
}

void CheckFloating(const Tensor& a, const char* op_name) {
  TY_CHECK(a.defined()) << op_name << ": undefined tensor";
  TY_CHECK(device::ComputesIn(a.device(), a.dtype()))
      << op_name << ": dtype " << DTypeName(a.dtype()) << " is not supported on "
      << a.device().ToString() << "; use "
      << (a.device().is_cpu() ? "float32 or float64" : "float32, bfloat16 or float16");
}

DType PromoteTypes(DType a, DType b) {
  if (a == b || !IsFloating(a) || !IsFloating(b)) return a;
  if (a == DType::kFloat64 || b == DType::kFloat64) return DType::kFloat64;
  return DType::kFloat32;  // f32 with a 16-bit type, or bf16 with f16
}

Tensor PromoteTo(const Tensor& x, const Tensor& other) {
  return To(x, PromoteTypes(x.dtype(), other.dtype()));
}

Tensor AutocastLow(const Tensor& x) {
  if (!x.defined() || !autograd::AutocastEnabled()) return x;
  const DType d = x.dtype();
  if (!IsFloating(d) || d == DType::kFloat64) return x;
  const DType low = autograd::AutocastDType();
  if (x.device().is_cuda()) return To(x, low);
  return d == DType::kFloat32 ? To(To(x, low), DType::kFloat32) : To(x, DType::kFloat32);
}

Tensor AutocastF32(const Tensor& x) {
  if (!x.defined() || !autograd::AutocastEnabled()) return x;
  const DType d = x.dtype();
  return d == DType::kBFloat16 || d == DType::kFloat16 ? To(x, DType::kFloat32) : x;
}

void CheckSameDevice(const Tensor& a, const Tensor& b, const char* op_name) {
  TY_CHECK(a.device() == b.device())
      << op_name << ": tensors are on different devices (" << a.device().ToString() << " and "
      << b.device().ToString() << "); move one with To(device)";
}

void CheckSameFloating(const Tensor& a, const Tensor& b, const char* op_name) {
  CheckFloating(a, op_name);
  CheckFloating(b, op_name);
  CheckSameDevice(a, b, op_name);
  TY_CHECK(a.dtype() == b.dtype()) << op_name << ": dtypes differ (" << DTypeName(a.dtype())
                                   << " and " << DTypeName(b.dtype()) << "); convert one with To()";
}

}  // namespace trainyard::ops
