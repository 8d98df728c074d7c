#include "worker/ranks/group.h"

#include <chrono>
#include <cmath>
#include <cstdlib>

namespace trainyard::ranks {
namespace {

// The job's name as it may appear in a shared-memory segment's name: [a-z0-9-], at most 32.
std::string ShmTagFor(const std::string& name) {
  std::string tag;
  for (char c : name) {
    if (tag.size() == 32) break;
    const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
    tag += ok ? c : (c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : '-');
  }
  return tag.empty() ? "job" : tag;
}

}  // namespace

dist::ProcessGroupOptions GroupOptionsFor(const spec::JobSpec& spec, const std::string& hostname) {
  dist::ProcessGroupOptions options;
  options.timeout =
      std::chrono::milliseconds(std::llround(spec.parallelism.collective_timeout_seconds * 1000));
  options.algorithm = spec.parallelism.all_reduce_algorithm;
  options.hostname = hostname;
  options.shm_tag = ShmTagFor(spec.name);
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
