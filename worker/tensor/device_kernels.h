// Kernels on a tensor's device: each function runs the CPU kernel (kernels/cpu) for CPU tensors
// and the CUDA backend's (kernels/cuda/backend.h) for CUDA ones, on the device's compute
// stream. The op layer calls these instead of either backend, so an op is written once.
//
// Callers allocate outputs and check shapes; every tensor of one call is on one device and
// contiguous unless a StridedIter describes it (built over the tensors in the order given).
// Dtypes: CPU computes in f32 and f64; CUDA in f32 for f32, bf16 and f16 storage. Where a CUDA
// kernel keeps statistics or losses in f32 (cross-entropy, layer norm), the caller allocates
// those in StatsDType(device, dtype).
#pragma once

#include <cstdint>
#include <string>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/indexing.h"
#include "kernels/cpu/iter.h"
#include "kernels/cpu/pool.h"
#include "worker/tensor/tensor.h"

namespace trainyard::device {

using kernels::cpu::BinaryOp;
using kernels::cpu::CompareOp;
using kernels::cpu::IndexCheck;
using kernels::cpu::Pool2dShape;
using kernels::cpu::StridedIter;
using kernels::cpu::UnaryOp;

// The dtype of statistics and per-row losses for inputs of `dtype` on `device`: f32 on CUDA,
// the input's own dtype on the CPU.
DType StatsDType(Device device, DType dtype);

// Whether ops compute in `dtype` on `device` (CPU: f32, f64; CUDA: f32, bf16, f16).
bool ComputesIn(Device device, DType dtype);

// ---- Elementwise ----
void Fill(const Tensor& out, double value);  // any dtype
void Unary(UnaryOp op, const StridedIter& it, const Tensor& out, const Tensor& x, double alpha,
           double beta);
// y may be undefined for ops whose derivative reads only x.
void UnaryBackward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& g, const Tensor& gx,
                   double alpha, double beta);
void Binary(BinaryOp op, const StridedIter& it, const Tensor& out, const Tensor& x, const Tensor& y,
            double alpha);
// Binary on a CUDA device with x and y of two different types among f32, bf16 and f16; out f32.
void BinaryMixed(BinaryOp op, const StridedIter& it, const Tensor& out, const Tensor& x,
                 const Tensor& y, double alpha);
void Compare(CompareOp op, const StridedIter& it, const Tensor& out, const Tensor& x,
             const Tensor& y);  // any dtype but f16/bf16 on the CPU
void Where(const StridedIter& it, const Tensor& out, const Tensor& cond, const Tensor& x,
           const Tensor& y);

// ---- Random (Philox; equal draws on both devices for the same seed and offset) ----
void FillUniform(const Tensor& out, uint64_t seed, uint64_t offset, double lo, double hi);
void FillNormal(const Tensor& out, uint64_t seed, uint64_t offset, double mean, double std);
void FillBernoulli(const Tensor& mask, uint64_t seed, uint64_t offset, double p_keep);  // u8

// ---- Reductions over [outer, k, inner] ----
void ReduceSum(const Tensor& x, const Tensor& out, int64_t outer, int64_t k, int64_t inner,
               double scale);
// idx (int64) may be undefined.
void ReduceMaxMin(bool is_max, const Tensor& x, const Tensor& out, const Tensor& idx, int64_t outer,
                  int64_t k, int64_t inner);
// out[index] (a f64 tensor on x's device) = sum |x|^p, or max |x| for p = inf; many norms can
// be written into one tensor and read with one copy.
void NormPowInto(const Tensor& x, double p, const Tensor& out, int64_t index);

// ---- Softmax, cross-entropy, layer norm ----
void SoftmaxForward(const Tensor& x, const Tensor& y, int64_t rows, int64_t n, bool log);
void SoftmaxBackward(const Tensor& y, const Tensor& gy, const Tensor& gx, int64_t rows, int64_t n,
                     bool log);
// logits, grad: (rows, c), contiguous on the CPU; on CUDA rows may lie apart (unit column
// stride; grad with the logits' strides). loss and lse in StatsDType; target int64.
void CrossEntropyForward(const Tensor& logits, const Tensor& target, const Tensor& loss,
                         const Tensor& lse, int64_t rows, int64_t c, int64_t ignore_index,
                         double smoothing);
void CrossEntropyBackward(const Tensor& logits, const Tensor& target, const Tensor& lse,
                          const Tensor& gloss, const Tensor& grad, int64_t rows, int64_t c,
                          int64_t ignore_index, double smoothing);
// weight, bias and the gradients may be undefined; mean, rstd in StatsDType.
void LayerNormForward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y,
                      const Tensor& mean, const Tensor& rstd, int64_t rows, int64_t n, double eps);
void LayerNormBackward(const Tensor& x, const Tensor& gy, const Tensor& mean, const Tensor& rstd,
                       const Tensor& weight, const Tensor& gx, const Tensor& gweight,
                       const Tensor& gbias, int64_t rows, int64_t n);
// Batch norm (CUDA: f32 only). Contiguous x (outer, c, inner); weight, bias and the running
// statistics (both or neither, updated in place) may be undefined.
void BatchNormTrainingForward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                              const Tensor& y, const Tensor& running_mean,
                              const Tensor& running_var, double momentum, double eps,
                              const Tensor& mean, const Tensor& invstd, int64_t outer, int64_t c,
                              int64_t inner);
void BatchNormForward(const Tensor& x, const Tensor& mean, const Tensor& invstd,
                      const Tensor& weight, const Tensor& bias, const Tensor& y, int64_t outer,
                      int64_t c, int64_t inner);
void BatchNormBackward(const Tensor& x, const Tensor& gy, const Tensor& mean, const Tensor& invstd,
                       const Tensor& weight, const Tensor& gx, const Tensor& gweight,
                       const Tensor& gbias, int64_t outer, int64_t c, int64_t inner, bool training,
                       double eps);

// ---- Indexing (index int64, from CheckedIndices) ----
// The indices to give IndexRows, IndexAddRows or the cross-entropy kernels, checked against
// `check` (int64 is TY_CHECKed at once). On the CPU the check runs now (a TY_CHECK saying
// IndexCheckMessage) and the result is `index`, contiguous. On a CUDA device the host does not
// wait for it: the result is a copy in which each rejected value is replaced by one in bounds,
// and the device's next SynchronizeDevice reports the rejection (Note [Deferred index checks]).
Tensor CheckedIndices(const Tensor& index, const IndexCheck& check);
// What a rejected value means: "embedding: index 7 is out of range for dim 0 of size 5"; for
// class targets (dim -1) "cross_entropy: target 7 is out of range for 5 classes (...)".
std::string IndexCheckMessage(const IndexCheck& check, int64_t value);
void IndexRows(const Tensor& x, int64_t row, const Tensor& index, const Tensor& out);
void IndexAddRows(const Tensor& out, int64_t row, const Tensor& index, const Tensor& src);

// ---- Pooling ----
void MaxPool2dForward(const Pool2dShape& s, const Tensor& x, const Tensor& y, const Tensor& argmax);
void MaxPool2dBackward(const Pool2dShape& s, const Tensor& gy, const Tensor& argmax,
                       const Tensor& gx);
void AvgPool2dForward(const Pool2dShape& s, bool count_include_pad, const Tensor& x,
                      const Tensor& y);
void AvgPool2dBackward(const Pool2dShape& s, bool count_include_pad, const Tensor& gy,
                       const Tensor& gx);
void AdaptiveAvgPool2dForward(const Pool2dShape& s, const Tensor& x, const Tensor& y);
void AdaptiveAvgPool2dBackward(const Pool2dShape& s, const Tensor& gy, const Tensor& gx);

}  // namespace trainyard::device
