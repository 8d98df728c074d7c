// A rank's process group, made from its job spec the same way under both launchers.
#pragma once

#include <memory>
#include <string>

#include "common/spec/job_spec.h"
#include "common/status.h"
#include "worker/dist/pipeline.h"
#include "worker/dist/process_group.h"
#include "worker/dist/store.h"

namespace trainyard::ranks {

// The spec's collective settings: parallelism.collective_timeout_seconds bounds every
// collective and the start-up; parallelism.all_reduce_algorithm picks Gloo's algorithm; for
// NCCL, "ring" pins NCCL_ALGO=Ring (the spec allows no other algorithm for nccl) unless the
// environment chose one (Tree, NVLS, ...). InfiniBand settings (NCCL_IB_HCA,
// NCCL_IB_DISABLE, ...) come from the environment, which ranks inherit. `hostname`: the
// address Gloo listens on (empty: ProcessGroupOptions' default).
dist::ProcessGroupOptions GroupOptionsFor(const spec::JobSpec& spec, const std::string& hostname);

// Joins the group of spec's resolved backend (spec::ResolvedBackend) through `store`. With
// parallelism.pipeline_stages > 1 and a `pipeline`, then joins this rank's pipeline groups
// (dist::PipelineGroups) into it, each through its own prefix of `store`, in an order every
// rank shares: its stage's data group, the pair with the previous stage, with the next, and
// the tied pair of the first and last stages.
StatusOr<std::shared_ptr<dist::ProcessGroup>> JoinGroup(const spec::JobSpec& spec,
                                                        std::shared_ptr<dist::Store> store,
                                                        int rank, int world_size,
                                                        const std::string& hostname,
                                                        dist::PipelineGroups* pipeline = nullptr);

}  // namespace trainyard::ranks
