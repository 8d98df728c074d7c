// Stands in for the toolkit's cuda_pipeline.h in the host build of the kernel files
// (tests/testing/cuda_emu/emu.h): an asynchronous copy completes at once. A device requires both
// addresses aligned to the copy's size (4, 8 or 16 bytes); a copy that is not aborts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

inline void __pipeline_memcpy_async(void* dst, const void* src, size_t bytes) {
  if ((bytes != 4 && bytes != 8 && bytes != 16) || reinterpret_cast<uintptr_t>(dst) % bytes != 0 ||
      reinterpret_cast<uintptr_t>(src) % bytes != 0) {
    std::fprintf(stderr, "cuda emulation: cp.async of %zu bytes from %p to %p is misaligned\n",
                 bytes, src, dst);
    std::abort();
  }
  std::memcpy(dst, src, bytes);
}
inline void __pipeline_commit() {}
inline void __pipeline_wait_prior(size_t) {}
