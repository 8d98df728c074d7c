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
                                                        const std::string& hostname,
                                                        dist::PipelineGroups* pipeline) {
  dist::ProcessGroupOptions options = GroupOptionsFor(spec, hostname);
  options.device_rank = rank;  // every group of this rank on its GPU
  auto join = [&](const std::string& prefix, int group_rank,
                  int size) -> StatusOr<std::shared_ptr<dist::ProcessGroup>> {
    ASSIGN_OR_RETURN(
        std::unique_ptr<dist::ProcessGroup> group,
        dist::CreateProcessGroup(
            spec::ResolvedBackend(spec),
            prefix.empty() ? store : std::make_shared<dist::PrefixStore>(prefix, store), group_rank,
            size, options));
    return std::shared_ptr<dist::ProcessGroup>(std::move(group));
  };
  ASSIGN_OR_RETURN(std::shared_ptr<dist::ProcessGroup> world, join("", rank, world_size));
  const int stages = spec.parallelism.pipeline_stages;
  if (pipeline == nullptr || stages <= 1) return world;
  dist::PipelineGroups& g = *pipeline;
  g.stages = stages;
  g.replicas = world_size / stages;
  g.stage = rank / g.replicas;
  g.replica = rank % g.replicas;
  const std::string s = std::to_string(g.stage), d = std::to_string(g.replica);
  auto joined = [&](const char* what, const Status& status) {
    return Status(status.code(), "pipeline stage " + s + " of replica " + d + ": joining its " +
                                     what + ": " + std::string(status.message()));
  };
  auto into = [&](std::shared_ptr<dist::ProcessGroup>* out, const char* what,
                  const std::string& prefix, int group_rank, int size) -> Status {
    StatusOr<std::shared_ptr<dist::ProcessGroup>> group = join(prefix, group_rank, size);
    if (!group.ok()) return joined(what, group.status());
    *out = *std::move(group);
    return OkStatus();
  };
  if (g.replicas > 1) {
    RETURN_IF_ERROR(into(&g.data, "stage's data-parallel group", "pipeline/data/" + s + "/",
                         g.replica, g.replicas));
  }
  if (g.stage > 0) {
    RETURN_IF_ERROR(into(&g.prev, "pair with the previous stage",
                         "pipeline/pair/" + std::to_string(g.stage - 1) + "/" + d + "/", 1, 2));
  }
  if (g.stage < stages - 1) {
    RETURN_IF_ERROR(
        into(&g.next, "pair with the next stage", "pipeline/pair/" + s + "/" + d + "/", 0, 2));
  }
  if (stages == 2) {
    g.tied = g.stage == 0 ? g.next : g.prev;
  } else if (g.stage == 0 || g.stage == stages - 1) {
    RETURN_IF_ERROR(
        into(&g.tied, "tied-embedding pair", "pipeline/tied/" + d + "/", g.stage == 0 ? 0 : 1, 2));
  }
  return world;
}

}  // namespace trainyard::ranks
