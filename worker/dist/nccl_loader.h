// LoadNcclProcessGroup: the way in to the nccl backend from code that must not depend on CUDA.
//
// NcclProcessGroup lives in its own shared library, libtrainyard_nccl.so, built only when CUDA
// and NCCL are found (TY_WITH_CUDA). This file (always compiled, no CUDA headers) dlopen()s it
// on first use, so CPU-only binaries never load CUDA libraries and run where none exist.
//
// The library is looked for as common/shared_library.h says ($TRAINYARD_NCCL_LIB, next to the
// binary, ../lib, the loader's path) and never unloaded: the groups it creates run its code.
//
// Note [The nccl entry point]
// The library exports one C symbol, TyCreateNcclProcessGroup, taking NcclCreateArgs and filling
// NcclCreateResult. The structs carry C++ objects by pointer (the store, the options) and the
// result is a ProcessGroup* the caller owns, so both sides must be built from the same sources
// with the same compiler; abi_version and the sizes guard against a library from another
// build, which reports FailedPrecondition instead of misreading the structs.
#pragma once

#include <cstddef>
#include <memory>

#include "common/status.h"
#include "worker/dist/process_group.h"
#include "worker/dist/store.h"

namespace trainyard::dist {

// Creates NcclProcessGroup::Create(store, rank, size, options) from libtrainyard_nccl.so.
// Unimplemented naming the places searched when the library is not found; FailedPrecondition
// when it is found but cannot be loaded (a CUDA or NCCL library missing) or is from another
// build; otherwise whatever creating the group returns (FailedPrecondition "no CUDA device"
// on a machine without a GPU).
StatusOr<std::unique_ptr<ProcessGroup>> LoadNcclProcessGroup(std::shared_ptr<Store> store, int rank,
                                                             int size,
                                                             const ProcessGroupOptions& options);

// ---- The contract with libtrainyard_nccl.so (Note [The nccl entry point]) ----

inline constexpr char kNcclLibraryName[] = "libtrainyard_nccl.so";
inline constexpr char kNcclLibraryEnv[] = "TRAINYARD_NCCL_LIB";
inline constexpr char kNcclEntryPoint[] = "TyCreateNcclProcessGroup";
// Bump when NcclCreateArgs or NcclCreateResult change.
inline constexpr int kNcclAbiVersion = 1;

struct NcclCreateArgs {
  int abi_version = kNcclAbiVersion;
  size_t options_size = sizeof(ProcessGroupOptions);
  size_t work_size = sizeof(Work);
  const std::shared_ptr<Store>* store = nullptr;  // not null
  int rank = 0;
  int size = 1;
  const ProcessGroupOptions* options = nullptr;  // not null
};

struct NcclCreateResult {
  ProcessGroup* group = nullptr;  // on success: a new group, owned by the caller
  int code = 0;                   // a StatusCode; 0 (kOk) exactly when `group` is set
  char message[1024] = {0};       // the error, NUL-terminated (cut to fit)
};

using NcclCreateFn = void (*)(const NcclCreateArgs* args, NcclCreateResult* result);

}  // namespace trainyard::dist

// Defined in libtrainyard_nccl.so only; found with dlsym(kNcclEntryPoint).
extern "C" void TyCreateNcclProcessGroup(const trainyard::dist::NcclCreateArgs* args,
                                         trainyard::dist::NcclCreateResult* result);
