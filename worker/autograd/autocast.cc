#include "worker/autograd/autocast.h"

#include "common/check.h"

namespace trainyard::autograd {
namespace {
thread_local DType tl_autocast_dtype = DType::kFloat32;
}

DType AutocastDType() { return tl_autocast_dtype; }
bool AutocastEnabled() { return tl_autocast_dtype != DType::kFloat32; }

AutocastGuard::AutocastGuard(DType dtype) : prev_(tl_autocast_dtype) {
  TY_CHECK(dtype == DType::kBFloat16 || dtype == DType::kFloat16 || dtype == DType::kFloat32)
      << "AutocastGuard takes bfloat16, float16 or float32 (off), not " << DTypeName(dtype);
  tl_autocast_dtype = dtype;
}

AutocastGuard::~AutocastGuard() { tl_autocast_dtype = prev_; }

}  // namespace trainyard::autograd
