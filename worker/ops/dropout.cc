#include "worker/ops/dropout.h"

#include "kernels/cpu/random.h"
#include "worker/ops/common.h"
#include "worker/ops/elementwise.h"
#include "worker/ops/record.h"
#include "worker/tensor/device_kernels.h"
#include "worker/tensor/factories.h"

namespace trainyard::ops {

namespace kc = kernels::cpu;
using autograd::SetHistory;
using autograd::ShouldRecord;

namespace {

// t * mask * scale, where mask is the uint8 keep mask (t's shape, contiguous).
Tensor ApplyMask(const Tensor& t, const Tensor& mask, double scale) {
  Tensor scaled = ConvertTo(mask, t.dtype(), /*force_copy=*/true);
  MulScalarInPlace(scaled, scale);
  return Mul(t, scaled);
}

}  // namespace

Tensor Dropout(const Tensor& x, double p, bool training, Generator* gen) {
  CheckFloating(x, "dropout");
  TY_CHECK(p >= 0 && p <= 1) << "dropout: probability " << p << " must lie in [0, 1]";
  if (p == 0 || !training) return x;
  if (gen == nullptr) gen = &DefaultGenerator();
  // Element i of x (in row-major order) is kept when mask[i] is 1.
  const TensorOptions u8 = Options(DType::kUInt8).set_device(x.device());
  Tensor mask = p < 1 ? Empty(x.shape(), u8) : Zeros(x.shape(), u8);
  if (p < 1) {
    const uint64_t offset = gen->Reserve(kc::CountersFor(mask.numel()));
    device::FillBernoulli(mask, gen->seed(), offset, 1 - p);
  }
  const double scale = p < 1 ? 1 / (1 - p) : 0;
  Tensor out;
  {
    autograd::NoGradGuard no_grad;
    out = ApplyMask(x, mask, scale);
  }
  if (ShouldRecord({&x})) {
    auto node = Record("NativeDropoutBackward0", {&x}, [scale](Node& n, GradList&& g) {
      return GradList{ApplyMask(g[0], n.saved(0), scale)};
    });
    node->Save(mask);
    SetHistory(out, node);
  }
  return out;
}

}  // namespace trainyard::ops
