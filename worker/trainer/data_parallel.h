// DataParallel: what the Trainer adds when it is one rank of several (spec.parallelism).
//
//   Create     builds the Reducer (bucket sizes, compression, unused parameters from the spec;
//              for zero_stage 1, 2 and 3 it reduce-scatters (2 and 3: releasing each bucket's
//              buffer once reduced; 3: its buckets are the units whose parameters it shards
//              and gathers, Note [Unit wrappers]), for the ZeroOptimizer that update_step.h
//              builds over it), once every rank holds the same weights: rank 0's, from
//              BroadcastWeightsFromRank0 (or, elastic, the live state: trainer_elastic.cc).
//   per step   Prepare/Finish around each backward (only the last micro-batch of a step
//              synchronises); AgreeOnStep averages the loss over ranks and makes every rank stop
//              at the same step when any of them was asked to (one 16-byte all-reduce).
//
// Every rank trains the same model on its shard of the data (DistributedSampler), so after the
// averaged gradients are applied the weights are identical everywhere; only rank 0 writes
// checkpoints and evaluates.
#pragma once

#include <memory>
#include <optional>

#include "common/spec/job_spec.h"
#include "common/status.h"
#include "worker/dist/fsdp.h"
#include "worker/dist/reducer.h"
#include "worker/nn/module.h"

namespace trainyard::trainer {

class DataParallel {
 public:
  static StatusOr<std::unique_ptr<DataParallel>> Create(std::shared_ptr<dist::ProcessGroup> group,
                                                        const spec::ParallelismSpec& spec,
                                                        nn::Module& model);

  int rank() const { return group_->rank(); }
  int world_size() const { return group_->size(); }
  dist::ProcessGroup& group() { return *group_; }
  // Where the model's parameters are (what the group's collectives reduce).
  trainyard::Device Device() const;
  dist::Reducer& reducer() { return *reducer_; }
  ~DataParallel();

  // ZeRO-3 (zero_stage 3): the model's parameters are sharded by unit (worker/dist/fsdp.h).
  bool sharded() const { return fsdp_ != nullptr; }
  // Per reducer bucket, this rank's chunk of the weights (ZeroOptimizer's, for ZeRO-3); empty
  // otherwise.
  std::vector<Tensor> WeightShards() const;
  // ZeRO-3, every rank together at the end of training: the model's weights whole again
  // (ShardedUnits::Unshard); otherwise nothing.
  Status Unshard();
  // A ZeRO-3 unit's failed gather since the last call (OK otherwise; clears it).
  Status TakeGatherError();
  // ZeRO-3, every rank together: `state` (the model's tensors) with every parameter gathered a
  // unit at a time; copies when `keep` (rank 0, which writes them), else empty.
  StatusOr<nn::NamedTensors> GatheredCopy(const nn::NamedTensors& state, bool keep);
  // Bytes of weights this rank holds: all of them; ZeRO-3: its shards and the most units
  // gathered at once in training.
  int64_t weight_bytes() const;

  // Around one backward; `sync` is false for all but a step's last micro-batch.
  void BeforeBackward(bool sync);
  Status AfterBackward();

  // FailedPrecondition unless every rank starts at `step` (they resumed the same checkpoint).
  Status CheckSameStep(int64_t step);

  struct Agreement {
    double mean_loss = 0;  // over ranks
    double loss_sum = 0;   // over ranks
    bool stop = false;     // some rank was asked to stop
    bool regroup = false;  // some rank was asked to regroup (elastic jobs)
  };
  StatusOr<Agreement> AgreeOnStep(double loss, bool stop, bool regroup = false);

 private:
  DataParallel() = default;
  Status Shard(nn::Module& model, dist::ReducerOptions* options);  // ZeRO-3

  std::shared_ptr<dist::ProcessGroup> group_;
  std::unique_ptr<dist::ShardedUnits> fsdp_;  // before reducer_, whose on_launch uses it
  std::vector<nn::Module*> wrapped_;          // modules given forward wrappers, cleared at the end
  std::unique_ptr<dist::Reducer> reducer_;
};

// FailedPrecondition unless every rank of `group` starts at `step` (they resumed the same
// checkpoint); `device`: where the group's collectives run.
Status CheckSameStep(dist::ProcessGroup& group, int64_t step, trainyard::Device device);

// Every rank's parameters and buffers (batch-norm statistics) become rank 0's.
Status BroadcastWeightsFromRank0(dist::ProcessGroup& group, nn::Module& model);

// The compression dtype named by parallelism.grad_compression ("bf16", "fp16"; "none": nullopt).
std::optional<DType> CompressionDType(const std::string& name);

}  // namespace trainyard::trainer
