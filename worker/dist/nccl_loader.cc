// LoadNcclProcessGroup (nccl_loader.h). No CUDA headers here: this is compiled into every build.
#include "worker/dist/nccl_loader.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace trainyard::dist {
namespace {

namespace fs = std::filesystem;

// Where to look, in order (nccl_loader.h). A bare name means "the dynamic loader's path".
std::vector<std::string> Candidates() {
  const char* env = std::getenv(kNcclLibraryEnv);
  if (env != nullptr && *env != '\0') return {env};
  std::vector<std::string> out;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    out.push_back((exe.parent_path() / kNcclLibraryName).string());
    out.push_back((exe.parent_path().parent_path() / "lib" / kNcclLibraryName).string());
  }
  out.push_back(kNcclLibraryName);
  return out;
}

std::string DlError() {
  const char* e = ::dlerror();
  return e != nullptr ? e : "unknown dlopen error";
}

Status NotFound(const std::vector<std::string>& tried, const std::string& last_error) {
  const std::string what = std::string("the nccl backend needs ") + kNcclLibraryName +
                           ", built when CUDA is found (TY_WITH_CUDA); ";
  const char* env = std::getenv(kNcclLibraryEnv);
  if (env != nullptr && *env != '\0') {
    return UnimplementedError(what + kNcclLibraryEnv + " is " + env + ", which does not exist");
  }
  std::string where;
  for (size_t i = 0; i < tried.size(); ++i) {
    const bool bare = tried[i].find('/') == std::string::npos;
    where += (i == 0 ? "" : (i + 1 == tried.size() ? " or " : ", "));
    where += bare ? "the loader's path" : tried[i];
  }
  return UnimplementedError(what + "not found in " + where + " (" + last_error + "); set " +
                            kNcclLibraryEnv + " to its path, or use \"gloo\" for CPU tensors");
}

// dlopen()s the first candidate that exists and returns its entry point.
StatusOr<NcclCreateFn> FindEntryPoint() {
  const std::vector<std::string> tried = Candidates();
  std::string last_error;
  for (const std::string& path : tried) {
    const bool bare = path.find('/') == std::string::npos;
    std::error_code ec;
    if (!bare && !fs::exists(path, ec)) {
      last_error = path + ": no such file";
      continue;
    }
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);  // never dlclose()d
    if (handle == nullptr) {
      last_error = DlError();
      // dlerror names the file it could not open: ours (not found), or a library ours needs.
      if (bare && last_error.rfind(path + ":", 0) == 0) continue;
      return FailedPreconditionError(std::string("the nccl backend: ") + path +
                                     " was found but could not be loaded: " + last_error +
                                     "; are the CUDA runtime and NCCL installed here?");
    }
    void* symbol = ::dlsym(handle, kNcclEntryPoint);
    if (symbol == nullptr) {
      return FailedPreconditionError(std::string("the nccl backend: ") + path + " has no " +
                                     kNcclEntryPoint +
                                     "; it is not trainyard's nccl library or is from another "
                                     "build");
    }
    return reinterpret_cast<NcclCreateFn>(symbol);
  }
  return NotFound(tried, last_error);
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
