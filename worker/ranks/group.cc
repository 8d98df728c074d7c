#include "worker/ranks/group.h"

#include <chrono>
#include <cmath>
#include <cstdlib>

namespace trainyard::ranks {

dist::ProcessGroupOptions GroupOptionsFor(const spec::JobSpec& spec, const std::string& hostname) {
  dist::ProcessGroupOptions options;
  options.timeout =
      std::chrono::milliseconds(std::llround(spec.parallelism.collective_timeout_seconds * 1000));
  options.algorithm = spec.parallelism.all_reduce_algorithm;
  options.hostname = hostname;
  if (spec::ResolvedBackend(spec) == "nccl" && std::getenv("NCCL_ALGO") == nullptr) {
    options.nccl_algo = "Ring";
  }
  return options;
}

StatusOr<std::shared_ptr<dist::ProcessGroup>> JoinGroup(const spec::JobSpec& spec,
                                                        std::shared_ptr<dist::Store> store,
                                                        int rank, int world_size,
                                                        const std::string& hostname) {
  ASSIGN_OR_RETURN(std::unique_ptr<dist::ProcessGroup> group,
                   dist::CreateProcessGroup(spec::ResolvedBackend(spec), std::move(store), rank,
                                            world_size, GroupOptionsFor(spec, hostname)));
  return std::shared_ptr<dist::ProcessGroup>(std::move(group));
}

}  // namespace trainyard::ranks
