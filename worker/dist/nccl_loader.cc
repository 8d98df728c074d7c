// LoadNcclProcessGroup (nccl_loader.h). No CUDA headers here: this is compiled into every build.
#include "worker/dist/nccl_loader.h"

#include <string>

#include "common/shared_library.h"

namespace trainyard::dist {
namespace {

StatusOr<NcclCreateFn> FindEntryPoint() {
  const LibrarySpec spec{kNcclLibraryName,
                         kNcclLibraryEnv,
                         kNcclEntryPoint,
                         "the nccl backend",
                         "built when CUDA is found (TY_WITH_CUDA)",
                         "use \"gloo\" for CPU tensors"};
  ASSIGN_OR_RETURN(void* symbol, FindLibrarySymbol(spec));
  return reinterpret_cast<NcclCreateFn>(symbol);
}

Status ResultStatus(const NcclCreateResult& result) {
  const std::string message(result.message);
  if (result.code <= 0 || result.code > static_cast<int>(StatusCode::kDataLoss)) {
    return InternalError("the nccl backend returned status code " + std::to_string(result.code) +
                         " without a group: " + message);
  }
  return Status(static_cast<StatusCode>(result.code), message);
}

}  // namespace

StatusOr<std::unique_ptr<ProcessGroup>> LoadNcclProcessGroup(std::shared_ptr<Store> store, int rank,
                                                             int size,
                                                             const ProcessGroupOptions& options) {
  if (store == nullptr) return InvalidArgumentError("nccl: the store is null");
  ASSIGN_OR_RETURN(NcclCreateFn create, FindEntryPoint());
  NcclCreateArgs args;
  args.store = &store;
  args.rank = rank;
  args.size = size;
  args.options = &options;
  NcclCreateResult result;
  create(&args, &result);
  if (result.code == 0 && result.group != nullptr) {
    return std::unique_ptr<ProcessGroup>(result.group);
  }
  TY_CHECK(result.group == nullptr) << "the nccl backend returned a group and an error";
  return ResultStatus(result);
}

}  // namespace trainyard::dist
