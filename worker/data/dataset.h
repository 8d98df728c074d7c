// Datasets a DataLoader draws from. `BatchSource` is the interface: a size and a batched
// gather. `Dataset` is the in-memory one: every sample's input is a row of one tensor
// (N, ...) and its target a row of another (N, ...), usually int64 class labels (N).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "worker/tensor/tensor.h"

namespace trainyard::data {

// One batch: input (B, ...) and target (B, ...), row b being the sample at indices[b].
struct Batch {
  Tensor input;
  Tensor target;
};

// Anything indexable by sample number in [0, size()). Fetch is const and must be safe to call
// from several threads at once (the DataLoader's workers do).
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual int64_t size() const = 0;
  // Gathers the samples at `indices` (each in [0, size()); an index outside is a bug). May
  // fail for sources that read lazily; in-memory sources never do.
  virtual StatusOr<Batch> Fetch(const std::vector<int64_t>& indices) const = 0;
};

// Inputs and targets held in memory as two contiguous tensors with the same first dimension.
// Immutable after construction; Get and Fetch are thread-safe.
class Dataset final : public BatchSource {
 public:
  // inputs: (N, ...) of any dtype; targets: (N, ...) of any dtype (int64 (N) for labels).
  // Non-contiguous tensors are copied; contiguous ones are shared, not copied.
  Dataset(Tensor inputs, Tensor targets);

  int64_t size() const override { return inputs_.size(0); }
  const Tensor& inputs() const { return inputs_; }
  const Tensor& targets() const { return targets_; }

  // input (B, ...), target (B, ...): one memcpy per sample for each of the two tensors.
  Batch Get(const std::vector<int64_t>& indices) const;
  StatusOr<Batch> Fetch(const std::vector<int64_t>& indices) const override { return Get(indices); }
  // A new dataset holding copies of the samples at `indices`, in that order.
  Dataset Select(const std::vector<int64_t>& indices) const;

 private:
  Tensor inputs_;
  Tensor targets_;
};

// The samples of `base` at `indices` (e.g. one side of SplitIndices), without copying them.
// Sample i of the subset is sample indices[i] of `base`.
class Subset final : public BatchSource {
 public:
  Subset(std::shared_ptr<const BatchSource> base, std::vector<int64_t> indices);

  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  const std::vector<int64_t>& indices() const { return indices_; }
  StatusOr<Batch> Fetch(const std::vector<int64_t>& indices) const override;

 private:
  std::shared_ptr<const BatchSource> base_;
  std::vector<int64_t> indices_;
};

// Copies rows `rows` of the contiguous tensor `src` (N, ...) into a new tensor (B, ...), one
// memcpy per row. Every row must be in [0, N).
Tensor GatherRows(const Tensor& src, const std::vector<int64_t>& rows);

}  // namespace trainyard::data
