#include "worker/trainer/data_parallel.h"

#include <map>

#include "worker/tensor/factories.h"

namespace trainyard::trainer {

std::optional<DType> CompressionDType(const std::string& name) {
  if (name == "bf16") return DType::kBFloat16;
  if (name == "fp16") return DType::kFloat16;
  return std::nullopt;
}

StatusOr<std::unique_ptr<DataParallel>> DataParallel::Create(
    std::shared_ptr<dist::ProcessGroup> group, const spec::ParallelismSpec& spec,
    nn::Module& model) {
  // An elastic job's group has any size in [min_world_size, max_world_size].
  if (!spec::IsElastic(spec) && group->size() != spec.world_size) {
    return InvalidArgumentError("parallelism.world_size is " + std::to_string(spec.world_size) +
                                " but the process group has " + std::to_string(group->size()) +
                                " ranks");
  }
  std::unique_ptr<DataParallel> dp(new DataParallel());
  dp->group_ = std::move(group);

  dist::ReducerOptions options;
  options.bucket_bytes = static_cast<int64_t>(spec.bucket_size_mb * (1 << 20));
  options.first_bucket_bytes = static_cast<int64_t>(spec.first_bucket_size_mb * (1 << 20));
  options.find_unused_parameters = spec.find_unused_parameters;
  options.compression = CompressionDType(spec.grad_compression);
  options.shard_gradients = spec.zero_stage >= 1;
  options.release_buckets = spec.zero_stage >= 2;
  if (spec.zero_stage == 3) RETURN_IF_ERROR(dp->Shard(model, &options));
  ASSIGN_OR_RETURN(dp->reducer_,
                   dist::Reducer::Create(model.NamedParameters(), dp->group_, options));
  return dp;
}

DataParallel::~DataParallel() {
  for (nn::Module* m : wrapped_) m->set_forward_wrapper(nullptr);
}

namespace {

Tensor Copy(const Tensor& t) { return ConvertTo(t.detach(), t.dtype(), /*force_copy=*/true); }

// ZeRO-3's units (Note [Unit wrappers]): the root (unit 0, run by the model itself: what no
// other unit holds), then each GPT block, or each MLP layer but the last (the root's), in
// forward order. Other models are one root unit.
struct UnitLayout {
  std::vector<std::vector<size_t>> units;  // indices into the model's NamedParameters()
  std::vector<nn::Module*> modules;
};

UnitLayout UnitsOf(nn::Module& model) {
  std::vector<std::pair<std::string, nn::Module*>> prefixes;  // (parameter prefix, module)
  for (const auto& [name, child] : model.named_children()) {
    if (model.type_name() == "GPT" && name == "transformer") {
      for (const auto& [list, blocks] : child->named_children()) {
        if (list != "h") continue;
        for (const auto& [i, block] : blocks->named_children())
          prefixes.emplace_back("transformer.h." + i + ".", block.get());
      }
    }
    if (model.type_name() == "MLP" && name.rfind("fc", 0) == 0)
      prefixes.emplace_back(name + ".", child.get());
  }
  if (model.type_name() == "MLP" && !prefixes.empty()) prefixes.pop_back();
  UnitLayout layout;
  layout.units.resize(prefixes.size() + 1);
  layout.modules.push_back(&model);
  for (const auto& [prefix, module] : prefixes) layout.modules.push_back(module);
  const nn::NamedTensors params = model.NamedParameters();
  for (size_t k = 0; k < params.size(); ++k) {
    size_t unit = 0;
    for (size_t i = 0; i < prefixes.size() && unit == 0; ++i) {
      if (params[k].first.rfind(prefixes[i].first, 0) == 0) unit = i + 1;
    }
    layout.units[unit].push_back(k);
  }
  return layout;
}

}  // namespace

Status DataParallel::Shard(nn::Module& model, dist::ReducerOptions* options) {
  UnitLayout layout = UnitsOf(model);
  for (size_t u = 0; u < layout.units.size(); ++u) {
    if (layout.units[u].empty()) {
      return InvalidArgumentError("zero_stage 3: unit " + std::to_string(u) +
                                  " of the model has no parameters");
    }
  }
  // The reducer's buckets are the units, the last first: backward's order.
  options->plan.assign(layout.units.rbegin(), layout.units.rend());
  ASSIGN_OR_RETURN(
      fsdp_, dist::ShardedUnits::Create(model.NamedParameters(), std::move(layout.units), group_));
  dist::ShardedUnits* fsdp = fsdp_.get();
  const size_t n = fsdp->size();
  options->on_launch = [fsdp, n](size_t bucket) { fsdp->Release(n - 1 - bucket); };
  for (size_t u = 0; u < n; ++u) {
    layout.modules[u]->set_forward_wrapper(
        [fsdp, u](const Tensor& x, const nn::Module::Computation& forward) {
          return fsdp->RunUnit(u, x, forward);
        });
    wrapped_.push_back(layout.modules[u]);
  }
  return OkStatus();
}

std::vector<Tensor> DataParallel::WeightShards() const {
  std::vector<Tensor> shards;
  if (!fsdp_) return shards;
  for (size_t b = 0; b < fsdp_->size(); ++b) shards.push_back(fsdp_->shard(fsdp_->size() - 1 - b));
  return shards;
}

Status DataParallel::Unshard() {
  if (!fsdp_) return OkStatus();
  Status s = fsdp_->Unshard();
  if (!s.ok()) return s.WithContext("gathering the sharded weights at the end");
  return OkStatus();
}

Status DataParallel::TakeGatherError() {
  if (!fsdp_) return OkStatus();
  Status s = fsdp_->TakeError();
  if (!s.ok()) return s.WithContext("gathering a unit's weights");
  return OkStatus();
}

StatusOr<nn::NamedTensors> DataParallel::GatheredCopy(const nn::NamedTensors& state, bool keep) {
  std::map<const TensorImpl*, size_t> unit_of;  // the sharded parameters' units
  const std::vector<dist::NamedTensor>& params = reducer_->params();
  for (size_t u = 0; u < fsdp_->size(); ++u) {
    for (size_t k : fsdp_->unit(u)) unit_of[params[k].second.impl()] = u;
  }
  nn::NamedTensors copy(state.size());
  for (size_t i = 0; i < state.size() && keep; ++i) {
    if (!unit_of.count(state[i].second.impl())) copy[i] = {state[i].first, Copy(state[i].second)};
  }
  for (size_t u = 0; u < fsdp_->size(); ++u) {
    Status s = fsdp_->Gather(u);
    for (size_t i = 0; i < state.size() && keep && s.ok(); ++i) {
      auto it = unit_of.find(state[i].second.impl());
      if (it != unit_of.end() && it->second == u) copy[i] = {state[i].first, Copy(state[i].second)};
    }
    fsdp_->Release(u);
    if (!s.ok()) return s.WithContext("gathering the sharded weights for a checkpoint");
  }
  return keep ? copy : nn::NamedTensors();
}

int64_t DataParallel::weight_bytes() const {
  int64_t bytes = 0;
  if (!fsdp_) {
    for (const auto& [name, p] : reducer_->params()) bytes += dist::BytesOf(p);
    return bytes;
  }
  for (size_t u = 0; u < fsdp_->size(); ++u) bytes += dist::BytesOf(fsdp_->shard(u));
  return bytes + fsdp_->peak_gathered_bytes();
}

Status BroadcastWeightsFromRank0(dist::ProcessGroup& group, nn::Module& model) {
  nn::NamedTensors all = model.NamedParameters();
  for (auto& b : model.NamedBuffers()) all.push_back(b);
  Status s = dist::BroadcastFromRank0(group, all);
  if (!s.ok()) return s.WithContext("broadcasting the initial weights from rank 0");
  return OkStatus();
}

Device DataParallel::Device() const { return reducer_->params().front().second.device(); }

void DataParallel::BeforeBackward(bool sync) {
  reducer_->set_sync(sync);
  reducer_->Prepare();
}

Status DataParallel::AfterBackward() {
  Status s = reducer_->Finish();
  Status gathered = TakeGatherError();
  return s.ok() ? gathered : s;
}

Status DataParallel::CheckSameStep(int64_t step) {
  return trainer::CheckSameStep(*group_, step, Device());
}

Status CheckSameStep(dist::ProcessGroup& group, int64_t step, trainyard::Device device) {
  Tensor t = Zeros(Shape{2}, Options(DType::kInt64));
  t.data<int64_t>()[0] = step;
  t.data<int64_t>()[1] = -step;
  RETURN_IF_ERROR(dist::AllReduceHost(group, t, dist::ReduceOp::kMax, device));
  const int64_t high = t.data<int64_t>()[0], low = -t.data<int64_t>()[1];
  if (high == low) return OkStatus();
  return FailedPreconditionError("the ranks start at different steps (" + std::to_string(low) +
                                 " to " + std::to_string(high) +
                                 "): they resumed different checkpoints; every rank must see the "
                                 "same checkpoint.dir (a shared filesystem)");
}

StatusOr<DataParallel::Agreement> DataParallel::AgreeOnStep(double loss, bool stop, bool regroup) {
  Tensor t = Zeros(Shape{3}, Options(DType::kFloat64));
  t.data<double>()[0] = loss;
  t.data<double>()[1] = stop ? 1 : 0;
  t.data<double>()[2] = regroup ? 1 : 0;
  RETURN_IF_ERROR(dist::AllReduceHost(*group_, t, dist::ReduceOp::kSum, Device()));
  const double sum = t.data<double>()[0];
  return Agreement{sum / group_->size(), sum, t.data<double>()[1] > 0, t.data<double>()[2] > 0};
}

}  // namespace trainyard::trainer
