// Live state transfer: the tensors of a training run (weights, buffers, optimizer state) sent
// from one rank to the others over the process group, for an elastic job's regroup (Note
// [Elastic training] in trainer.h): a rank that joins, or one whose last step was abandoned,
// takes its state from the most advanced live member instead of from a checkpoint.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "worker/dist/process_group.h"
#include "worker/tensor/tensor.h"

namespace trainyard::trainer {

using NamedTensorList = std::vector<std::pair<std::string, Tensor>>;

// Serialises `tensors` (CPU, any dtype and shape) into one byte string and back. Parse
// returns contiguous CPU tensors; DataLoss naming the offset on a malformed string.
std::string PackTensors(const NamedTensorList& tensors);
StatusOr<NamedTensorList> UnpackTensors(const std::string& bytes);

// Every rank gets `root`'s `*tensors` (the others' are replaced): two broadcasts, the byte
// count and the bytes, through a copy on `via` when that is a CUDA device (NCCL broadcasts
// device memory only). A collective: every rank of `group` calls it with the same root. A
// rank other than the root that passes null `tensors` takes part without unpacking them.
Status BroadcastTensors(dist::ProcessGroup& group, int root, NamedTensorList* tensors,
                        Device via = Device());

// The member of `group` whose state the others take: the one with the most steps applied
// (`applied_step`), the lowest rank among equals. One all-reduce of one int64.
struct StateSource {
  int rank = 0;
  int64_t step = 0;
};
StatusOr<StateSource> ChooseStateSource(dist::ProcessGroup& group, int64_t applied_step);

}  // namespace trainyard::trainer
