// FindLibrarySymbol: dlopen()s one of trainyard's optional shared libraries (the CUDA backend,
// the NCCL process group) and returns one of its symbols, so binaries that never need them
// never load CUDA.
//
// Where `spec.file` is looked for, in order:
//   1. $<spec.env>, a path to the file; when set, nowhere else
//   2. the directory of the running binary (/proc/self/exe), then that directory's ../lib
//      (the build puts the libraries in <build>/lib, next to <build>/bin)
//   3. the dynamic loader's path (LD_LIBRARY_PATH, the binary's RUNPATH, ld.so.cache)
// Libraries are never unloaded: what they create runs their code.
#pragma once

#include <string>

#include "common/status.h"

namespace trainyard {

struct LibrarySpec {
  std::string file;     // "libtrainyard_cuda.so"
  std::string env;      // "TRAINYARD_CUDA_LIB"
  std::string symbol;   // the entry point
  std::string what;     // for messages: "the CUDA backend"
  std::string built;    // when it is built: "built when CUDA is found (TY_WITH_CUDA)"
  std::string instead;  // what to do without it: "use device \"cpu\""
};

// Unimplemented naming the places searched when the file is not found; FailedPrecondition
// when it is found but cannot be loaded (a library it needs is missing) or lacks the symbol.
StatusOr<void*> FindLibrarySymbol(const LibrarySpec& spec);

}  // namespace trainyard
