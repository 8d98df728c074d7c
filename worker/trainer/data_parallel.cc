#include "worker/trainer/data_parallel.h"

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
  options.release_buckets = spec.zero_stage == 2;
  ASSIGN_OR_RETURN(dp->reducer_,
                   dist::Reducer::Create(model.NamedParameters(), dp->group_, options));
  return dp;
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

Status DataParallel::AfterBackward() { return reducer_->Finish(); }

Status DataParallel::CheckSameStep(int64_t step) {
  Tensor t = Zeros(Shape{2}, Options(DType::kInt64));
  t.data<int64_t>()[0] = step;
  t.data<int64_t>()[1] = -step;
  RETURN_IF_ERROR(dist::AllReduceHost(*group_, t, dist::ReduceOp::kMax, Device()));
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
