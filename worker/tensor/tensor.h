// Tensor: a handle to a TensorImpl (storage, offset, sizes, strides, dtype, autograd fields).
// Copying a Tensor copies the handle, not the data. Views share storage.
//
// This layer knows nothing of differentiation rules: differentiable ops (including the
// differentiable forms of views) live in worker/ops; the engine in worker/autograd. The raw
// view functions here (namespace `views`) never record a grad_fn.
#pragma once

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "worker/tensor/dtype.h"
#include "worker/tensor/shape.h"
#include "worker/tensor/storage.h"

namespace trainyard {

namespace autograd {
class Node;
}

class Tensor;
struct TensorImpl;

// A hook on a tensor's gradient. Returning a defined tensor replaces the gradient.
using TensorHook = std::function<Tensor(const Tensor& grad)>;
// Runs after a leaf's .grad has been accumulated; receives the leaf.
using PostAccumulateGradHook = std::function<void(const Tensor& leaf)>;

// Autograd fields that most tensors never need; allocated on first use.
struct AutogradMeta {
  std::shared_ptr<TensorImpl> grad;
  bool retains_grad = false;
  std::vector<TensorHook> hooks;  // leaves only; a non-leaf's hooks sit on its grad_fn
  std::vector<PostAccumulateGradHook> post_accumulate_hooks;
  std::weak_ptr<autograd::Node> grad_accumulator;  // leaves: their AccumulateGrad node
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in elements
  Shape sizes;
  Shape strides;  // in elements
  DType dtype = DType::kFloat32;
  bool requires_grad = false;  // leaves: set by the user; non-leaves: has a grad_fn
  uint32_t output_nr = 0;      // which output of grad_fn this is
  std::shared_ptr<autograd::Node> grad_fn;
  std::unique_ptr<AutogradMeta> meta;

  AutogradMeta& mutable_meta() {
    if (!meta) meta = std::make_unique<AutogradMeta>();
    return *meta;
  }
};

struct TensorOptions {
  DType dtype = DType::kFloat32;
  Device device = Device::Cpu();
  bool requires_grad = false;

  TensorOptions& set_dtype(DType d) { return dtype = d, *this; }
  TensorOptions& set_device(Device d) { return device = d, *this; }
  TensorOptions& set_requires_grad(bool r) { return requires_grad = r, *this; }
};
inline TensorOptions Options(DType d) { return TensorOptions().set_dtype(d); }

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

  // Shape and layout.
  const Shape& shape() const { return impl_->sizes; }
  const Shape& strides() const { return impl_->strides; }
  int64_t dim() const { return impl_->sizes.size(); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t stride(int64_t d) const;
  int64_t numel() const { return impl_->sizes.numel(); }
  int64_t offset() const { return impl_->offset; }
  DType dtype() const { return impl_->dtype; }
  Device device() const { return impl_->storage->device(); }
  const std::shared_ptr<Storage>& storage() const { return impl_->storage; }
  bool is_contiguous() const;
  TensorOptions options() const { return TensorOptions().set_dtype(dtype()).set_device(device()); }

  // Data access: host pointers for CPU tensors, device pointers for CUDA ones (read them only
  // in kernels on the device's compute stream). data<T>() checks that T matches the dtype.
  void* raw_data() const {
    return static_cast<char*>(impl_->storage->data()) + impl_->offset * ElementSize(dtype());
  }
  template <typename T>
  T* data() const {
    TY_CHECK(DTypeOf<T>::value == dtype()) << "data<" << DTypeName(DTypeOf<T>::value) << ">() on a "
                                           << DTypeName(dtype()) << " tensor";
    return static_cast<T*>(raw_data());
  }
  // The value of a one-element tensor, converted to double.
  double item() const;

  // Version of the underlying storage (bumped by every in-place write).
  uint32_t version() const { return impl_->storage->version(); }
  void BumpVersion() const { impl_->storage->BumpVersion(); }

  // Autograd state. set_requires_grad works on leaves of floating dtype only.
  bool requires_grad() const { return impl_->requires_grad; }
  Tensor& set_requires_grad(bool r);
  bool is_leaf() const { return impl_->grad_fn == nullptr; }
  const std::shared_ptr<autograd::Node>& grad_fn() const { return impl_->grad_fn; }
  uint32_t output_nr() const { return impl_->output_nr; }
  // The accumulated gradient (undefined until a backward reaches this tensor).
  Tensor grad() const;
  void set_grad(const Tensor& g) const;
  bool retains_grad() const { return impl_->meta && impl_->meta->retains_grad; }

  // A tensor sharing this one's storage, outside any graph, not requiring grad.
  Tensor detach() const;

  std::string ToString() const;

 private:
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Allocates an uninitialised tensor with contiguous strides.
Tensor Empty(const Shape& shape, TensorOptions options = {});
Tensor EmptyLike(const Tensor& t);  // same shape, dtype and device; contiguous

// A new tensor viewing `storage` (no copy, no grad).
Tensor MakeView(const Tensor& base, const Shape& sizes, const Shape& strides, int64_t offset);

// Writes src (broadcast to dst's shape, converted to dst's dtype) into dst, in place; src and
// dst may be on different devices (one of them the CPU). Not recorded by autograd; bumps dst's
// version. A copy to the CPU returns when the data is there; other copies are queued on the
// CUDA device's compute stream.
void CopyInto(const Tensor& dst, const Tensor& src);
// Moves t's data (and its .grad's) to `device` in place: every handle to t sees the move, views
// of its old storage do not. For parameters and buffers (Module::To).
void MoveToDevice(const Tensor& t, Device device);
// A contiguous copy of t on `device` (no grad).
Tensor CopyToDevice(const Tensor& t, Device device);
// A contiguous copy converted to `dtype` (no grad). Returns `t` itself when nothing changes
// and `force_copy` is false.
Tensor ConvertTo(const Tensor& t, DType dtype, bool force_copy = false);
// `t` if contiguous, else a contiguous copy (no grad).
Tensor ContiguousData(const Tensor& t);

// The values of a tensor as a vector of T, converted and in row-major order.
template <typename T>
std::vector<T> ToVector(const Tensor& t);

}  // namespace trainyard
