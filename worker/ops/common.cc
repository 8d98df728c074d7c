#include "worker/ops/common.h"

#include "worker/ops/reduction.h"
#include "worker/ops/views.h"

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
  TY_CHECK(a.dtype() == DType::kFloat32 || a.dtype() == DType::kFloat64)
      << op_name << ": dtype " << DTypeName(a.dtype())
      << " is not supported; use float32 or float64";
}

void CheckSameFloating(const Tensor& a, const Tensor& b, const char* op_name) {
  CheckFloating(a, op_name);
  CheckFloating(b, op_name);
  TY_CHECK(a.dtype() == b.dtype()) << op_name << ": dtypes differ (" << DTypeName(a.dtype())
                                   << " and " << DTypeName(b.dtype()) << "); convert one with To()";
}

}  // namespace trainyard::ops
