#include "worker/dist/fsdp.h"

#include <algorithm>

#include "worker/autograd/grad_mode.h"
#include "worker/autograd/hooks.h"
#include "worker/tensor/factories.h"

namespace trainyard::dist {

StatusOr<std::unique_ptr<ShardedUnits>> ShardedUnits::Create(std::vector<NamedTensor> params,
                                                             std::vector<std::vector<size_t>> units,
                                                             std::shared_ptr<ProcessGroup> group) {
  if (!group) return InvalidArgumentError("zero-3: no process group");
  if (units.empty()) return InvalidArgumentError("zero-3: no units");
  std::vector<int> seen(params.size(), 0);
  for (const std::vector<size_t>& u : units) {
    for (size_t k : u) {
      if (k >= params.size() || seen[k]++) {
        return InvalidArgumentError("zero-3: parameter index " + std::to_string(k) +
                                    " is out of range or in two units");
      }
    }
  }
  for (size_t k = 0; k < params.size(); ++k) {
    if (!seen[k])
      return InvalidArgumentError("zero-3: parameter " + params[k].first + " is in no unit");
    if (!params[k].second.is_contiguous()) {
      return InvalidArgumentError("zero-3: parameter " + params[k].first + " is not contiguous");
    }
  }
  std::unique_ptr<ShardedUnits> s(new ShardedUnits(std::move(params), std::move(group)));
  const int rank = s->group_->rank(), world = s->group_->size();
  const Tensor& first = s->params_.front().second;
  s->empty_ = std::make_shared<Storage>(0, first.device());
  for (std::vector<size_t>& members : units) {
    Unit unit;
    int64_t numel = 0;
    for (size_t k : members) {
      unit.offsets.push_back(numel);
      numel += s->params_[k].second.numel();
    }
    unit.params = std::move(members);
    unit.padded = (numel + world - 1) / world * world;
    // This rank's chunk of the flat weights, laid out as a bucket would be.
    Tensor flat = Zeros(Shape{unit.padded}, first.options());
    for (size_t i = 0; i < unit.params.size(); ++i) {
      const Tensor& p = s->params_[unit.params[i]].second;
      CopyInto(MakeView(flat, p.shape(), ContiguousStrides(p.shape()), unit.offsets[i]), p);
    }
    const int64_t chunk = unit.padded / world;
    unit.shard = ConvertTo(MakeView(flat, Shape{chunk}, Shape{1}, rank * chunk), flat.dtype(),
                           /*force_copy=*/true);
    s->units_.push_back(std::move(unit));
    s->Release(s->units_.size() - 1);
  }
  return s;
}

void ShardedUnits::PointInto(size_t u, const Tensor& flat) {
  Unit& unit = units_[u];
  for (size_t i = 0; i < unit.params.size(); ++i) {
    TensorImpl* impl = params_[unit.params[i]].second.impl();
    impl->storage = flat.defined() ? flat.storage() : empty_;
    impl->offset = flat.defined() ? flat.offset() + unit.offsets[i] : 0;
  }
}

void ShardedUnits::Prefetch(size_t u) {
  Unit& unit = units_[u];
  if (unsharded_ || unit.full.defined()) return;  // gathered, or on its way
  unit.full = Empty(Shape{unit.padded}, unit.shard.options());
  unit.pending = group_->AllGather(unit.full, unit.shard);
  held_bytes_ += BytesOf(unit.full);
  peak_bytes_ = std::max(peak_bytes_, held_bytes_);
}

Status ShardedUnits::Gather(size_t u) {
  Prefetch(u);
  Unit& unit = units_[u];
  if (unit.pending) {
    std::shared_ptr<Work> work = std::move(unit.pending);
    // On failure the step computes on whatever the buffer holds and fails at its end.
    Status s = WaitFor(*group_, *work);
    if (!s.ok() && error_.ok()) error_ = s;
    PointInto(u, unit.full);
    return s;
  }
  return OkStatus();
}

void ShardedUnits::Release(size_t u) {
  Unit& unit = units_[u];
  if (unsharded_ || unit.pending) return;  // a prefetch in flight is kept for its Gather
  held_bytes_ -= BytesOf(unit.full);       // 0 when not gathered
  unit.full = Tensor();
  PointInto(u, Tensor());
}

Status ShardedUnits::Unshard() {
  for (size_t u = 0; u < units_.size() && !unsharded_; ++u) {
    RETURN_IF_ERROR(Gather(u));
    for (size_t k : units_[u].params) {
      const Tensor& p = params_[k].second;
      const Tensor own = ConvertTo(p.detach(), p.dtype(), /*force_copy=*/true);
      p.impl()->storage = own.storage();
      p.impl()->offset = own.offset();
    }
    // The flat buffer goes; the parameters have their own storage now.
    held_bytes_ -= BytesOf(units_[u].full);
    units_[u].full = Tensor();
  }
  unsharded_ = true;
  return OkStatus();
}

Status ShardedUnits::TakeError() {
  Status s = error_;
  error_ = OkStatus();
  return s;
}

Tensor ShardedUnits::RunUnit(size_t u, const Tensor& x, const Computation& forward) {
  (void)Gather(u);  // a failure is kept in error_
  if (u + 1 < units_.size()) Prefetch(u + 1);
  Tensor y = forward(x);
  if (autograd::GradMode::IsEnabled() && y.requires_grad()) {
    // Backward order: the root first (its output is the model's), then the last unit down.
    const size_t next = u == 0 ? units_.size() - 1 : u - 1;
    autograd::RegisterHook(y, [this, u, next](const Tensor&) {
      (void)Gather(u);
      if (next > 0 && next != u) Prefetch(next);
      return Tensor();
    });
  }
  Release(u);
  return y;
}

}  // namespace trainyard::dist
