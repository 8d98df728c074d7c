// PipelineStage: what the Trainer adds when it is one stage of a pipeline
// (spec.parallelism.pipeline_stages P > 1; docs/design/010-zero-and-pipeline.md).
//
// Note [Pipeline stages]
// Rank s x D + d is stage s of data-parallel replica d (dist::PipelineGroups). Every rank
// builds the whole GPT from the seed, so all start alike, and then trains only its stage's part:
// stage 0 the embeddings and its blocks, stage P-1 its blocks, the last norm and the head (whose
// weight is the token embedding's, Note [Tied embedding] in gpt.h), the others their blocks.
// Each step every rank of replica d reads the same micro-batches (stage 0 uses the tokens,
// the last stage the targets) and dist::RunPipelineStep carries activations and their gradients
// between neighbours. Then:
//   - each stage's D ranks average their gradients (the Trainer's DataParallel over the
//     stage's data group and parameters());
//   - the first and last stages sum the tied embedding's gradient over their pair
//     (SumTiedGradients), so both apply the same update to their copies, as Megatron does;
//   - the gradient norm is the whole model's, the tied embedding counted once
//     (ClipGradients), and each stage's optimizer updates its own parameters.
// Once every rank holds the same weights (rank 0's, or a checkpoint's), Release frees the rest
// of each rank's copy: a rank keeps its stage's weights only (the other parameters point at an
// empty storage, as a released ZeRO-3 unit's do). For an evaluation, a checkpoint and the end
// of the run, Gather sends each stage's weights from its replica 0 to rank 0, which then holds
// the whole model until the next Release; it writes checkpoints of the whole model, with the
// optimizer state gathered from every stage (GatherOptimizerState). So checkpoints do not
// depend on the pipeline: a run resumes with other stages, or none.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/spec/job_spec.h"
#include "common/status.h"
#include "worker/dist/pipeline.h"
#include "worker/nn/containers.h"
#include "worker/nn/gpt.h"
#include "worker/optim/optimizer.h"

namespace trainyard::trainer {

// How many of the blocks (`block_params`: each one's parameter count) each of `stages` stages
// takes, in order, each at least one: the split whose heaviest stage is lightest, counting
// `first_extra` parameters on the first stage (the embeddings) and `last_extra` on the last
// (the last norm and the head's tied weight). Needs stages <= block_params.size().
std::vector<int64_t> BalanceStages(const std::vector<int64_t>& block_params, int64_t first_extra,
                                   int64_t last_extra, int stages);

class PipelineStage {
 public:
  // `model` must be an nn::Gpt; `world` is every rank of the job. The groups must match the
  // spec (InvalidArgument otherwise). The stages' blocks: spec.parallelism.pipeline_balance,
  // or else BalanceStages over the model's parameter counts.
  static StatusOr<std::unique_ptr<PipelineStage>> Create(const spec::JobSpec& spec,
                                                         dist::PipelineGroups groups,
                                                         std::shared_ptr<dist::ProcessGroup> world,
                                                         nn::Module& model);

  const dist::PipelineGroups& groups() const { return groups_; }
  bool first() const { return groups_.stage == 0; }
  bool last() const { return groups_.stage == groups_.stages - 1; }
  int64_t begin_block() const { return begin_; }
  int64_t end_block() const { return end_; }
  // This stage's parameters, named as in the model (the tied embedding on the first and last
  // stages): for its optimizer and its data-parallel group.
  nn::Module& parameters() { return *parameters_; }

  // This stage's part of the forward: `idx` (B, T) token ids on the first stage, else `input`,
  // the previous stage's activation (B, T, C); returns the next activation, or on the last
  // stage the logits (B, T, vocab_size).
  Tensor Forward(const Tensor& idx, const Tensor& input);

  // After the step's backward (and its data-parallel average): the tied embedding's
  // gradient summed between the first and last stages.
  Status SumTiedGradients();
  // The whole model's gradient norm (a collective over every rank); when max_norm > 0 the
  // stage's gradients are then scaled by min(max_norm / (norm + 1e-6), 1).
  StatusOr<double> ClipGradients(double max_norm);
  // The step's loss averaged over the replicas (the last stage's `loss`, the others' ignored)
  // and whether any rank was asked to stop: one all-reduce over every rank.
  struct Agreement {
    double loss = 0;
    bool stop = false;
  };
  StatusOr<Agreement> AgreeOnStep(double loss, bool stop);

  // Frees the weights of the other stages (their parameters keep their shapes; their storage
  // is empty): on every rank once all hold the same weights, and on rank 0 after each Gather.
  void Release();
  // Every rank together: rank 0's model becomes whole, each stage's weights coming from its
  // replica 0 (the others only send; their copies stay as they are).
  Status Gather();
  // Bytes of weights this rank keeps between Gathers: its stage's.
  int64_t weight_bytes() const;
  // Whether this rank's copy of the model holds every weight (before the first Release, and
  // on rank 0 after a Gather).
  bool whole() const { return whole_; }
  Device device() const;  // where the stage's parameters are
  // Every rank together, with its optimizer's state dict: on rank 0, its own entries and every
  // other stage's entries for that stage's parameters (hyperparameters are rank 0's);
  // nothing elsewhere.
  StatusOr<std::vector<optim::NamedTensor>> GatherOptimizerState(
      std::vector<optim::NamedTensor> own);
  // The entries of a whole model's optimizer state dict that belong to this stage.
  std::vector<optim::NamedTensor> OwnOptimizerState(std::vector<optim::NamedTensor> all) const;

 private:
  PipelineStage() = default;
  // The stage of the model's parameter `name` (the tied embedding's: 0).
  int StageOf(const std::string& name) const;
  // Whether this rank's stage trains parameter `name`.
  bool Owns(const std::string& name) const;

  dist::PipelineGroups groups_;
  std::shared_ptr<dist::ProcessGroup> world_;
  nn::Gpt* gpt_ = nullptr;
  nn::NamedTensors model_params_;  // every parameter of the model, tied ones once
  std::string tied_;               // the tied embedding's name
  std::vector<int64_t> stage_of_block_;
  int64_t begin_ = 0, end_ = 0;  // this stage's blocks
  std::shared_ptr<nn::ModuleDict> parameters_;
  std::shared_ptr<Storage> empty_;  // what released parameters point at
  bool whole_ = true;               // this rank's copy of the model holds every weight
};

}  // namespace trainyard::trainer
