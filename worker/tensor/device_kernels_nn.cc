// device_kernels.h: softmax, cross-entropy, normalisation, indexing, pooling.
#include <sstream>

#include "kernels/cpu/indexing.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/softmax.h"
#include "worker/tensor/cuda_backend.h"
#include "worker/tensor/device_kernels.h"
#include "worker/tensor/device_kernels_internal.h"

namespace trainyard::device {

namespace kc = kernels::cpu;
using internal::B;
using internal::DataOrNull;
using internal::Ptr;
using internal::S;
using internal::T;

namespace {

// The row stride of a (rows, c) matrix with unit column stride: its rows may lie apart.
int64_t RowStride(const Tensor& m) {
  TY_CHECK(m.dim() == 2 && (m.size(1) <= 1 || m.stride(1) == 1))
      << "expected a matrix with unit column stride, got " << m.shape() << " strides "
      << m.strides();
  return m.size(0) > 1 ? m.stride(0) : m.size(1);
}

}  // namespace

void SoftmaxForward(const Tensor& x, const Tensor& y, int64_t rows, int64_t n, bool log) {
  if (x.device().is_cuda()) {
    B().SoftmaxForward(T(x), x.raw_data(), y.raw_data(), rows, n, log, S(x));
    return;
  }
  TY_DISPATCH_FLOATING(x.dtype(), "softmax", [&] {
    kc::SoftmaxForward<scalar_t>(x.data<scalar_t>(), y.data<scalar_t>(), rows, n, log);
  });
}

void SoftmaxBackward(const Tensor& y, const Tensor& gy, const Tensor& gx, int64_t rows, int64_t n,
                     bool log) {
  if (y.device().is_cuda()) {
    B().SoftmaxBackward(T(y), y.raw_data(), gy.raw_data(), gx.raw_data(), rows, n, log, S(y));
    return;
  }
  TY_DISPATCH_FLOATING(y.dtype(), "softmax backward", [&] {
    kc::SoftmaxBackward<scalar_t>(y.data<scalar_t>(), gy.data<scalar_t>(), gx.data<scalar_t>(),
                                  rows, n, log);
  });
}

void CrossEntropyForward(const Tensor& logits, const Tensor& target, const Tensor& loss,
                         const Tensor& lse, int64_t rows, int64_t c, int64_t ignore_index,
                         double smoothing) {
  if (logits.device().is_cuda()) {
    B().CrossEntropyForward(T(logits), logits.raw_data(), RowStride(logits), target.data<int64_t>(),
                            loss.data<float>(), lse.data<float>(), rows, c, ignore_index, smoothing,
                            S(logits));
    return;
  }
  TY_CHECK(logits.is_contiguous()) << "cross_entropy: logits must be contiguous on the CPU";
  TY_DISPATCH_FLOATING(logits.dtype(), "cross_entropy", [&] {
    kc::CrossEntropyForward<scalar_t>(logits.data<scalar_t>(), target.data<int64_t>(),
                                      loss.data<scalar_t>(), lse.data<scalar_t>(), rows, c,
                                      ignore_index, static_cast<scalar_t>(smoothing));
  });
}

void CrossEntropyBackward(const Tensor& logits, const Tensor& target, const Tensor& lse,
                          const Tensor& gloss, const Tensor& grad, int64_t rows, int64_t c,
                          int64_t ignore_index, double smoothing) {
  if (logits.device().is_cuda()) {
    TY_CHECK(RowStride(grad) == RowStride(logits)) << "cross_entropy backward: row strides differ";
    B().CrossEntropyBackward(T(logits), logits.raw_data(), RowStride(logits),
                             target.data<int64_t>(), lse.data<float>(), gloss.data<float>(),
                             grad.raw_data(), rows, c, ignore_index, smoothing, S(logits));
    return;
  }
  TY_CHECK(logits.is_contiguous() && grad.is_contiguous())
      << "cross_entropy backward: logits and grad must be contiguous on the CPU";
  TY_DISPATCH_FLOATING(logits.dtype(), "cross_entropy backward", [&] {
    kc::CrossEntropyBackward<scalar_t>(logits.data<scalar_t>(), target.data<int64_t>(),
                                       lse.data<scalar_t>(), gloss.data<scalar_t>(),
                                       grad.data<scalar_t>(), rows, c, ignore_index,
                                       static_cast<scalar_t>(smoothing));
  });
}

void LayerNormForward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y,
                      const Tensor& mean, const Tensor& rstd, int64_t rows, int64_t n, double eps) {
  if (x.device().is_cuda()) {
    const cuda::ScalarType pt = weight.defined() ? T(weight) : T(x);
    B().LayerNormForward(T(x), pt, x.raw_data(), Ptr(weight), Ptr(bias), y.raw_data(),
                         mean.data<float>(), rstd.data<float>(), rows, n, eps, S(x));
    return;
  }
  TY_DISPATCH_FLOATING(x.dtype(), "layer_norm", [&] {
    kc::LayerNormForward<scalar_t>(x.data<scalar_t>(), DataOrNull<scalar_t>(weight),
                                   DataOrNull<scalar_t>(bias), y.data<scalar_t>(),
                                   mean.data<scalar_t>(), rstd.data<scalar_t>(), rows, n,
                                   static_cast<scalar_t>(eps));
  });
}

void LayerNormBackward(const Tensor& x, const Tensor& gy, const Tensor& mean, const Tensor& rstd,
                       const Tensor& weight, const Tensor& gx, const Tensor& gweight,
                       const Tensor& gbias, int64_t rows, int64_t n) {
  if (x.device().is_cuda()) {
    const cuda::ScalarType pt = weight.defined() ? T(weight) : T(x);
    B().LayerNormBackward(T(x), pt, x.raw_data(), gy.raw_data(), mean.data<float>(),
                          rstd.data<float>(), Ptr(weight), Ptr(gx), Ptr(gweight), Ptr(gbias), rows,
                          n, S(x));
    return;
  }
  TY_DISPATCH_FLOATING(x.dtype(), "layer_norm backward", [&] {
    kc::LayerNormBackward<scalar_t>(x.data<scalar_t>(), gy.data<scalar_t>(), mean.data<scalar_t>(),
                                    rstd.data<scalar_t>(), DataOrNull<scalar_t>(weight),
                                    DataOrNull<scalar_t>(gx), DataOrNull<scalar_t>(gweight),
                                    DataOrNull<scalar_t>(gbias), rows, n);
  });
}

namespace {
void CheckF32OnCuda(const Tensor& x, const char* name) {
  TY_CHECK(x.device().is_cpu() || x.dtype() == DType::kFloat32)
      << name << " on CUDA computes in float32, got " << DTypeName(x.dtype());
}
}  // namespace

void BatchNormTrainingForward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                              const Tensor& y, const Tensor& running_mean,
                              const Tensor& running_var, double momentum, double eps,
                              const Tensor& mean, const Tensor& invstd, int64_t outer, int64_t c,
                              int64_t inner) {
  CheckF32OnCuda(x, "batch_norm");
  if (x.device().is_cuda()) {
    B().BatchNormTrainingForward(
        x.data<float>(), DataOrNull<float>(weight), DataOrNull<float>(bias), y.data<float>(),
        DataOrNull<float>(running_mean), DataOrNull<float>(running_var), momentum, eps,
        mean.data<float>(), invstd.data<float>(), outer, c, inner, S(x));
    return;
  }
  TY_DISPATCH_FLOATING(x.dtype(), "batch_norm", [&] {
    kc::BatchNormTrainingForward<scalar_t>(
        x.data<scalar_t>(), DataOrNull<scalar_t>(weight), DataOrNull<scalar_t>(bias),
        y.data<scalar_t>(), DataOrNull<scalar_t>(running_mean), DataOrNull<scalar_t>(running_var),
        momentum, eps, mean.data<scalar_t>(), invstd.data<scalar_t>(), outer, c, inner);
  });
}

void BatchNormForward(const Tensor& x, const Tensor& mean, const Tensor& invstd,
                      const Tensor& weight, const Tensor& bias, const Tensor& y, int64_t outer,
                      int64_t c, int64_t inner) {
  CheckF32OnCuda(x, "batch_norm");
  if (x.device().is_cuda()) {
    B().BatchNormForward(x.data<float>(), mean.data<float>(), invstd.data<float>(),
                         DataOrNull<float>(weight), DataOrNull<float>(bias), y.data<float>(), outer,
                         c, inner, S(x));
    return;
  }
  TY_DISPATCH_FLOATING(x.dtype(), "batch_norm", [&] {
    kc::BatchNormForward<scalar_t>(x.data<scalar_t>(), mean.data<scalar_t>(),
                                   invstd.data<scalar_t>(), DataOrNull<scalar_t>(weight),
                                   DataOrNull<scalar_t>(bias), y.data<scalar_t>(), outer, c, inner);
  });
}

void BatchNormBackward(const Tensor& x, const Tensor& gy, const Tensor& mean, const Tensor& invstd,
                       const Tensor& weight, const Tensor& gx, const Tensor& gweight,
                       const Tensor& gbias, int64_t outer, int64_t c, int64_t inner, bool training,
                       double eps) {
  CheckF32OnCuda(x, "batch_norm");
  if (x.device().is_cuda()) {
    B().BatchNormBackward(x.data<float>(), gy.data<float>(), mean.data<float>(),
                          invstd.data<float>(), DataOrNull<float>(weight), DataOrNull<float>(gx),
                          DataOrNull<float>(gweight), DataOrNull<float>(gbias), outer, c, inner,
                          training, eps, S(x));
    return;
  }
  TY_DISPATCH_FLOATING(x.dtype(), "batch_norm backward", [&] {
    kc::BatchNormBackward<scalar_t>(x.data<scalar_t>(), gy.data<scalar_t>(), mean.data<scalar_t>(),
                                    invstd.data<scalar_t>(), DataOrNull<scalar_t>(weight),
                                    DataOrNull<scalar_t>(gx), DataOrNull<scalar_t>(gweight),
                                    DataOrNull<scalar_t>(gbias), outer, c, inner, training);
  });
}

// Note [Deferred index checks]
// An embedding's token ids and a loss's targets live on the device, so checking them on the
// host would make it wait for the device twice a step, stalling the queue of launches behind
// the check. On a CUDA device the check is a kernel instead (Backend::CheckIndices), as
// PyTorch's device-side asserts are: it writes a copy of the indices in which every rejected
// value is replaced by one in bounds (0, or ignore_index for targets), so the kernels that take
// the copy never read or write out of bounds, and records a rejected value (any one of the
// first launch that rejects some) with the check that rejected it, in a page-locked record of
// the device (IndexFaultRecord). Every host wait for the compute stream goes through
// SynchronizeDevice, which reads the record and fails with the message the CPU gives for that
// value, so a bad id stops the job at the next wait: in training, at the latest the step's
// read of its loss, before anything reaches a checkpoint.
Tensor CheckedIndices(const Tensor& index, const IndexCheck& check) {
  TY_CHECK(index.dtype() == DType::kInt64)
      << check.op << ": indices must be int64, got " << DTypeName(index.dtype());
  Tensor idx = ContiguousData(index);
  const int64_t n = idx.numel();
  if (idx.device().is_cpu()) {
    const int64_t bad = kc::CheckIndices(idx.data<int64_t>(), n, check, nullptr);
    TY_CHECK(bad < 0) << IndexCheckMessage(check, idx.data<int64_t>()[bad]);
    return idx;
  }
  TY_CHECK(n == 0 || check.size > 0 || check.has_ignore)
      << check.op << ": dim " << check.dim << " has size 0, so none of " << n
      << " indices is in range";
  Tensor out = Empty(idx.shape(), idx.options());
  B().CheckIndices(idx.data<int64_t>(), n, check, out.data<int64_t>(),
                   IndexFaultRecord(idx.device()), S(idx));
  return out;
}

std::string IndexCheckMessage(const IndexCheck& check, int64_t value) {
  std::ostringstream m;
  if (check.dim >= 0) {
    m << check.op << ": index " << value << " is out of range for dim " << check.dim << " of size "
      << check.size;
  } else {
    m << check.op << ": target " << value << " is out of range for " << check.size
      << " classes (expected 0 to " << check.size - 1;
    if (check.has_ignore) m << ", or ignore_index " << check.ignore_index;
    m << ")";
  }
  return m.str();
}

void IndexRows(const Tensor& x, int64_t row, const Tensor& index, const Tensor& out) {
  if (x.device().is_cuda()) {
    B().IndexRows(T(x), x.raw_data(), row, index.data<int64_t>(), index.numel(), out.raw_data(),
                  S(x));
    return;
  }
  TY_DISPATCH_FLOATING(x.dtype(), "index_select", [&] {
    kc::IndexRows<scalar_t>(x.data<scalar_t>(), row, index.data<int64_t>(), index.numel(),
                            out.data<scalar_t>());
  });
}

void IndexAddRows(const Tensor& out, int64_t row, const Tensor& index, const Tensor& src) {
  if (out.device().is_cuda()) {
    if (out.dtype() == DType::kBFloat16 || out.dtype() == DType::kFloat16) {
      // The kernel's atomics would round bf16/f16 sums at every add, so that a row gathered
      // often stops growing: sum in f32 and round once (the CPU computes 16-bit floats in f32
      // too, which HostBackend does for them).
      Tensor sum = ConvertTo(out, DType::kFloat32);
      IndexAddRows(sum, row, index, ConvertTo(src, DType::kFloat32));
      CopyInto(out, sum);
      return;
    }
    B().IndexAddRows(T(out), out.raw_data(), row, index.data<int64_t>(), index.numel(),
                     src.raw_data(), S(out));
    return;
  }
  TY_DISPATCH_FLOATING(out.dtype(), "index_add", [&] {
    kc::IndexAddRows<scalar_t>(out.data<scalar_t>(), row, index.data<int64_t>(), index.numel(),
                               src.data<scalar_t>());
  });
}

void MaxPool2dForward(const Pool2dShape& s, const Tensor& x, const Tensor& y,
                      const Tensor& argmax) {
  if (x.device().is_cuda()) {
    B().MaxPool2dForward(T(x), s, x.raw_data(), y.raw_data(), argmax.data<int64_t>(), S(x));
    return;
  }
  TY_DISPATCH_FLOATING(x.dtype(), "max_pool2d", [&] {
    kc::MaxPool2dForward<scalar_t>(s, x.data<scalar_t>(), y.data<scalar_t>(),
                                   argmax.data<int64_t>());
  });
}

void MaxPool2dBackward(const Pool2dShape& s, const Tensor& gy, const Tensor& argmax,
                       const Tensor& gx) {
  if (gy.device().is_cuda()) {
    B().MaxPool2dBackward(T(gy), s, gy.raw_data(), argmax.data<int64_t>(), gx.raw_data(), S(gy));
    return;
  }
  TY_DISPATCH_FLOATING(gy.dtype(), "max_pool2d backward", [&] {
    kc::MaxPool2dBackward<scalar_t>(s, gy.data<scalar_t>(), argmax.data<int64_t>(),
                                    gx.data<scalar_t>());
  });
}

void AvgPool2dForward(const Pool2dShape& s, bool count_include_pad, const Tensor& x,
                      const Tensor& y) {
  if (x.device().is_cuda()) {
    B().AvgPool2dForward(T(x), s, count_include_pad, x.raw_data(), y.raw_data(), S(x));
    return;
  }
  TY_DISPATCH_FLOATING(x.dtype(), "avg_pool2d", [&] {
    kc::AvgPool2dForward<scalar_t>(s, count_include_pad, x.data<scalar_t>(), y.data<scalar_t>());
  });
}

void AvgPool2dBackward(const Pool2dShape& s, bool count_include_pad, const Tensor& gy,
                       const Tensor& gx) {
  if (gy.device().is_cuda()) {
    B().AvgPool2dBackward(T(gy), s, count_include_pad, gy.raw_data(), gx.raw_data(), S(gy));
    return;
  }
  TY_DISPATCH_FLOATING(gy.dtype(), "avg_pool2d backward", [&] {
    kc::AvgPool2dBackward<scalar_t>(s, count_include_pad, gy.data<scalar_t>(), gx.data<scalar_t>());
  });
}

void AdaptiveAvgPool2dForward(const Pool2dShape& s, const Tensor& x, const Tensor& y) {
  if (x.device().is_cuda()) {
    B().AdaptiveAvgPool2dForward(T(x), s, x.raw_data(), y.raw_data(), S(x));
    return;
  }
  TY_DISPATCH_FLOATING(x.dtype(), "adaptive_avg_pool2d", [&] {
    kc::AdaptiveAvgPool2dForward<scalar_t>(s, x.data<scalar_t>(), y.data<scalar_t>());
  });
}

void AdaptiveAvgPool2dBackward(const Pool2dShape& s, const Tensor& gy, const Tensor& gx) {
  if (gy.device().is_cuda()) {
    B().AdaptiveAvgPool2dBackward(T(gy), s, gy.raw_data(), gx.raw_data(), S(gy));
    return;
  }
  TY_DISPATCH_FLOATING(gy.dtype(), "adaptive_avg_pool2d backward", [&] {
    kc::AdaptiveAvgPool2dBackward<scalar_t>(s, gy.data<scalar_t>(), gx.data<scalar_t>());
  });
}

}  // namespace trainyard::device
