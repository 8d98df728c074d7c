// Autocast: mixed-precision compute for the ops called on this thread, as torch.autocast.
// A thread-local dtype says what the matrix products run in: kBFloat16 or kFloat16 when
// autocast is on, kFloat32 when it is off (the default). Parameters and their gradients stay
// float32 (master weights); only the ops' compute dtype changes.
//
//   {
//     AutocastGuard autocast(DType::kBFloat16);
//     Tensor loss = ops::CrossEntropy(model.Forward(x), y);  // matmuls in bf16, the loss in f32
//   }
//   autograd::Backward(loss);  // backward runs with autocast off, whatever the caller's state
//
// Note [Autocast policy]: with autocast on, each op reads AutocastDType() and computes as follows.
//  - Low precision (inputs cast to the autocast dtype): matmul, linear, bmm, conv, attention
//    (scaled dot-product). On CUDA they compute in the autocast dtype and return it; on the CPU
//    they are emulated: the inputs are rounded to the autocast dtype and the product is computed
//    and returned in float32.
//  - Float32 (low-precision inputs cast up to float32): softmax, log-softmax, cross-entropy and
//    every other loss, layer norm, batch norm, the reductions (sum, mean, var, norm), exp, log,
//    pow. On CUDA, cross-entropy reads 16-bit logits without the cast: its kernels work in
//    float32 and return a float32 loss, with the same results bit for bit.
//  - Everything else (add, mul, activations, views, ...): no cast of its own; inputs of different
//    floating dtypes promote to the widest of them, as without autocast (on CUDA, add promotes
//    inside its kernel: a residual add of a 16-bit branch makes no f32 copy of it).
// float64 tensors are never cast (gradient checks stay exact), nor are integer tensors. The casts
// are recorded like any other op, so a gradient reaches a float32 parameter as float32, having
// passed through the autocast dtype on the way back (in float16 it can overflow: hence the
// loss scaler, worker/optim/grad_scaler.h).
//
// Backward: the engine runs every backward call, node and hook with autocast off, as PyTorch
// does: a backward formula computes in the dtypes its forward saved, not in whatever the thread
// has on when it calls Backward. Activation checkpointing recomputes its segment under the
// autocast dtype its forward ran with (worker/autograd/checkpoint.h).
#pragma once

#include "worker/tensor/dtype.h"

namespace trainyard::autograd {

// This thread's autocast dtype: kBFloat16 or kFloat16 when on, kFloat32 when off.
DType AutocastDType();
// AutocastDType() != kFloat32.
bool AutocastEnabled();

// Sets this thread's autocast dtype for its scope and restores the previous one on exit, so
// guards nest. kBFloat16 or kFloat16 enables autocast; kFloat32 disables it (for a region that
// must compute in full precision inside an autocast one). Any other dtype is a bug (TY_CHECK).
class AutocastGuard {
 public:
  explicit AutocastGuard(DType dtype);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  DType prev_;
};

}  // namespace trainyard::autograd

namespace trainyard {
using autograd::AutocastGuard;
}
