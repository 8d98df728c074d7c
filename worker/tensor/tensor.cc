#include "worker/tensor/tensor.h"

#include <cmath>
#include <cstdio>
#include <sstream>

#include "kernels/cpu/copy.h"
#include "worker/tensor/cuda_backend.h"
#include "worker/tensor/views.h"

namespace trainyard {

int64_t Tensor::size(int64_t d) const { return impl_->sizes[WrapDim(d, dim(), "size")]; }
int64_t Tensor::stride(int64_t d) const { return impl_->strides[WrapDim(d, dim(), "stride")]; }

bool Tensor::is_contiguous() const {
  if (numel() == 0) return true;  // as in PyTorch: nothing to lay out
  int64_t expected = 1;
  for (int64_t i = dim() - 1; i >= 0; --i) {
    if (impl_->sizes[i] == 1) continue;
    if (impl_->strides[i] != expected) return false;
    expected *= impl_->sizes[i];
  }
  return true;
}

double Tensor::item() const {
  TY_CHECK(numel() == 1) << "item() needs a tensor with one element, got shape " << shape();
  if (!device().is_cpu()) return CopyToDevice(*this, Device::Cpu()).item();
  double v = 0;
  TY_DISPATCH_ALL(dtype(), "item", [&] {
    v = kernels::cpu::Cast<double>(*static_cast<const scalar_t*>(raw_data()));
  });
  return v;
}

Tensor& Tensor::set_requires_grad(bool r) {
  TY_CHECK(is_leaf()) << "requires_grad can only be changed on leaf tensors; use detach() "
                         "to get a leaf from a computed tensor";
  TY_CHECK(!r || IsFloating(dtype()))
      << "only floating-point tensors can require gradients, got " << DTypeName(dtype());
  impl_->requires_grad = r;
  return *this;
}

Tensor Tensor::grad() const {
  if (!impl_->meta || !impl_->meta->grad) return Tensor();
  return Tensor(impl_->meta->grad);
}

void Tensor::set_grad(const Tensor& g) const {
  if (g.defined()) {
    TY_CHECK(g.shape() == shape()) << "set_grad: gradient shape " << g.shape()
                                   << " does not match the tensor's shape " << shape();
    TY_CHECK(g.dtype() == dtype()) << "set_grad: gradient dtype " << DTypeName(g.dtype())
                                   << " does not match " << DTypeName(dtype());
  }
  impl_->mutable_meta().grad = g.impl_ptr();
}

Tensor Tensor::detach() const {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->offset = impl_->offset;
  impl->sizes = impl_->sizes;
  impl->strides = impl_->strides;
  impl->dtype = impl_->dtype;
  return Tensor(std::move(impl));
}

Tensor Empty(const Shape& shape, TensorOptions options) {
  for (int64_t d : shape) TY_CHECK(d >= 0) << "Empty: negative size " << d << " in shape " << shape;
  auto impl = std::make_shared<TensorImpl>();
  const size_t nbytes = static_cast<size_t>(shape.numel()) * ElementSize(options.dtype);
  impl->storage = std::make_shared<Storage>(nbytes, options.device);
  impl->sizes = shape;
  impl->strides = ContiguousStrides(shape);
  impl->dtype = options.dtype;
  Tensor t(std::move(impl));
  if (options.requires_grad) t.set_requires_grad(true);
  return t;
}

Tensor EmptyLike(const Tensor& t) { return Empty(t.shape(), t.options()); }

Tensor MakeView(const Tensor& base, const Shape& sizes, const Shape& strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage();
  impl->offset = offset;
  impl->sizes = sizes;
  impl->strides = strides;
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}

namespace {

// Strides of src broadcast to dst's shape.
Shape BroadcastSourceStrides(const Tensor& dst, const Tensor& src) {
  const Shape& ds = dst.shape();
  const Shape& ss = src.shape();
  TY_CHECK(ss.size() <= ds.size())
      << "copy: source shape " << ss << " cannot be broadcast to " << ds;
  Shape src_strides;
  src_strides.resize(ds.size());
  const int64_t lead = ds.size() - ss.size();
  for (int64_t i = 0; i < ds.size(); ++i) {
    int64_t si = i - lead;
    if (si < 0) continue;
    TY_CHECK(ss[si] == ds[i] || ss[si] == 1)
        << "copy: source shape " << ss << " cannot be broadcast to " << ds;
    src_strides[i] = ss[si] == 1 ? 0 : src.stride(si);
  }
  return src_strides;
}

// A copy between the CPU and a CUDA device: converted and made contiguous on the source's
// side, moved in one transfer on the CUDA side's compute stream, scattered into a strided
// destination on its own side. A copy to the CPU waits for the transfer.
void CopyAcrossDevices(const Tensor& dst, const Tensor& src) {
  TY_CHECK(dst.device().is_cpu() || src.device().is_cpu())
      << "copy from " << src.device().ToString() << " to " << dst.device().ToString()
      << ": copies between two CUDA devices go through the CPU";
  Tensor s =
      ConvertTo(src.shape() == dst.shape() ? src : views::Expand(src, dst.shape()), dst.dtype());
  Tensor d = dst.is_contiguous() ? dst : Empty(dst.shape(), dst.options());
  const Device gpu = dst.device().is_cpu() ? src.device() : dst.device();
  cuda::Stream stream = ComputeStream(gpu);
  CudaBackend().Memcpy(d.raw_data(), s.raw_data(), d.numel() * ElementSize(d.dtype()), stream);
  if (dst.device().is_cpu()) SynchronizeDevice(gpu);
  if (d.impl() != dst.impl()) CopyInto(dst, d);
}

}  // namespace

void CopyInto(const Tensor& dst, const Tensor& src) {
  if (dst.device() != src.device()) {
    CopyAcrossDevices(dst, src);
    dst.BumpVersion();
    return;
  }
  const Shape& ds = dst.shape();
  const Shape src_strides = BroadcastSourceStrides(dst, src);
  const int64_t* strides[2] = {dst.strides().data(), src_strides.data()};
  auto it = kernels::cpu::MakeIter(static_cast<int>(ds.size()), ds.data(), 2, strides);
  if (dst.device().is_cuda()) {
    CudaBackend().Copy(it, ToScalarType(dst.dtype()), dst.raw_data(), ToScalarType(src.dtype()),
                       src.raw_data(), ComputeStream(dst.device()));
    dst.BumpVersion();
    return;
  }
  TY_DISPATCH_ALL(dst.dtype(), "copy", [&] {
    using dst_t = scalar_t;
    TY_DISPATCH_ALL(src.dtype(), "copy", [&] {
      kernels::cpu::CopyCast(it, static_cast<dst_t*>(dst.raw_data()),
                             static_cast<const scalar_t*>(src.raw_data()));
    });
  });
  dst.BumpVersion();
}

void MoveToDevice(const Tensor& t, Device device) {
  if (t.device() == device) return;
  Tensor moved = CopyToDevice(t, device);
  TensorImpl* impl = t.impl();
  impl->storage = moved.storage();
  impl->offset = 0;
  impl->strides = moved.strides();
  if (impl->meta && impl->meta->grad) MoveToDevice(Tensor(impl->meta->grad), device);
}

Tensor CopyToDevice(const Tensor& t, Device device) {
  Tensor out = Empty(t.shape(), t.options().set_device(device));
  CopyInto(out, t);
  return out;
}

Tensor ConvertTo(const Tensor& t, DType dtype, bool force_copy) {
  if (!force_copy && dtype == t.dtype() && t.is_contiguous()) return t;
  Tensor out = Empty(t.shape(), t.options().set_dtype(dtype));
  CopyInto(out, t);
  return out;
}

Tensor ContiguousData(const Tensor& t) { return ConvertTo(t, t.dtype()); }

template <typename T>
std::vector<T> ToVector(const Tensor& t) {
  Tensor c = t.device().is_cpu() ? ConvertTo(t, DTypeOf<T>::value)
                                 : ConvertTo(CopyToDevice(t, Device::Cpu()), DTypeOf<T>::value);
  const T* p = c.data<T>();
  return std::vector<T>(p, p + c.numel());
}
template std::vector<float> ToVector<float>(const Tensor&);
template std::vector<double> ToVector<double>(const Tensor&);
template std::vector<int64_t> ToVector<int64_t>(const Tensor&);
template std::vector<int32_t> ToVector<int32_t>(const Tensor&);
template std::vector<uint8_t> ToVector<uint8_t>(const Tensor&);

namespace {

// Prints like PyTorch: tensor([[1.0000, 2.0000], ...]); at most 6 values per dim are shown
// (first and last 3) when the tensor has more than 1000 elements.
void PrintDim(std::ostream& os, const std::vector<double>& v, const Shape& shape, int64_t d,
              int64_t base, bool floating, bool summarize, int indent) {
  if (shape.size() == 0) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), floating ? "%.4f" : "%.0f", v[0]);
    os << buf;
    return;
  }
  int64_t stride = 1;
  for (int64_t i = d + 1; i < shape.size(); ++i) stride *= shape[i];
  os << "[";
  const int64_t n = shape[d];
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 6 && i == 3) {
      os << "...";
      i = n - 3;
      os << (d + 1 == shape.size() ? ", " : ",\n" + std::string(indent + 1, ' '));
    }
    if (d + 1 == shape.size()) {
      char buf[64];
      double x = v[base + i];
      if (!floating)
        std::snprintf(buf, sizeof(buf), "%.0f", x);
      else if (std::isfinite(x) && (std::fabs(x) >= 1e5 || (x != 0 && std::fabs(x) < 1e-4)))
        std::snprintf(buf, sizeof(buf), "%.4e", x);
      else
        std::snprintf(buf, sizeof(buf), "%.4f", x);
      os << buf;
    } else {
      PrintDim(os, v, shape, d + 1, base + i * stride, floating, summarize, indent + 1);
    }
    if (i + 1 < n) os << (d + 1 == shape.size() ? ", " : ",\n" + std::string(indent + 1, ' '));
  }
  os << "]";
}

}  // namespace

std::string Tensor::ToString() const {
  if (!defined()) return "tensor(undefined)";
  std::ostringstream os;
  os << "tensor(";
  std::vector<double> v = ToVector<double>(*this);
  PrintDim(os, v, shape(), 0, 0, IsFloating(dtype()), numel() > 1000, 7);
  if (dtype() != DType::kFloat32 && dtype() != DType::kInt64)
    os << ", dtype=" << DTypeName(dtype());
  if (!device().is_cpu()) os << ", device='" << device().ToString() << "'";
  if (requires_grad()) os << ", requires_grad=True";
  os << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.ToString(); }

}  // namespace trainyard
