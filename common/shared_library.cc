#include "common/shared_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

namespace trainyard {
namespace {

namespace fs = std::filesystem;

const char* EnvValue(const LibrarySpec& spec) {
  const char* v = std::getenv(spec.env.c_str());
  return v != nullptr && *v != '\0' ? v : nullptr;
}

// Where to look, in order (shared_library.h). A bare name means "the dynamic loader's path".
std::vector<std::string> Candidates(const LibrarySpec& spec) {
  if (const char* env = EnvValue(spec)) return {env};
  std::vector<std::string> out;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    out.push_back((exe.parent_path() / spec.file).string());
    out.push_back((exe.parent_path().parent_path() / "lib" / spec.file).string());
  }
  out.push_back(spec.file);
  return out;
}

std::string DlError() {
  const char* e = ::dlerror();
  return e != nullptr ? e : "unknown dlopen error";
}

Status NotFound(const LibrarySpec& spec, const std::vector<std::string>& tried,
                const std::string& last_error) {
  const std::string what = spec.what + " needs " + spec.file + ", " + spec.built + "; ";
  if (const char* env = EnvValue(spec)) {
    return UnimplementedError(what + spec.env + " is " + env + ", which does not exist");
  }
  std::string where;
  for (size_t i = 0; i < tried.size(); ++i) {
    const bool bare = tried[i].find('/') == std::string::npos;
    where += (i == 0 ? "" : (i + 1 == tried.size() ? " or " : ", "));
    where += bare ? "the loader's path" : tried[i];
  }
  return UnimplementedError(what + "not found in " + where + " (" + last_error + "); set " +
                            spec.env + " to its path, or " + spec.instead);
}

}  // namespace

StatusOr<void*> FindLibrarySymbol(const LibrarySpec& spec) {
  const std::vector<std::string> tried = Candidates(spec);
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
      return FailedPreconditionError(spec.what + ": " + path +
                                     " was found but could not be loaded: " + last_error +
                                     "; are the CUDA libraries it needs installed here?");
    }
    void* symbol = ::dlsym(handle, spec.symbol.c_str());
    if (symbol == nullptr) {
      return FailedPreconditionError(spec.what + ": " + path + " has no " + spec.symbol +
                                     "; it is not trainyard's library or is from another build");
    }
    return symbol;
  }
  return NotFound(spec, tried, last_error);
}

}  // namespace trainyard
