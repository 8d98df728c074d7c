// Stands in for the toolkit's cuda_runtime.h in the host build of the kernel files
// (tests/testing/cuda_emu/emu.h): the runtime API's types and declarations, whose functions
// emu.cc defines over host memory, and the C++ templates of the real header that the kernel
// files use.
#pragma once

#include "tests/testing/cuda_emu/emu.h"

template <typename T>
cudaError_t cudaFuncSetAttribute(T*, cudaFuncAttribute, int) {
  return cudaSuccess;
}

template <typename... Params, typename... Args>
cudaError_t cudaLaunchKernelEx(const cudaLaunchConfig_t* config, void (*kernel)(Params...),
                               Args&&... args) {
  ty_emu::Launch(
      "cudaLaunchKernelEx",
      ty_emu::Config(config->gridDim, config->blockDim, config->dynamicSmemBytes, config->stream),
      [kernel, a = std::make_tuple(std::forward<Args>(args)...)]() mutable {
        std::apply(kernel, a);
      });
  return cudaSuccess;
}
