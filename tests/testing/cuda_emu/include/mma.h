// Stands in for the toolkit's mma.h in the host build of the kernel files
// (tests/testing/cuda_emu/emu.h): nvcuda::wmma's 16x16x16 fragments. Every lane holds the whole
// tile (x[] row-major, num_elements 256), so element-wise code that reads a fragment's layout
// from a loaded fragment, as the kernels do (attention_tc.cu RowsOf), works unchanged. A store
// writes a 32nd of the tile per lane (the elements i with i % 32 == lane), so a lane that reads
// another lane's part before a __syncwarp reads stale memory, as it may on a device.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdlib>

#include "tests/testing/cuda_emu/emu.h"

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the kernels use 16x16x16 tiles");
  static constexpr int num_elements = 256;
  T x[256];
};

namespace internal {
inline float ToFloat(float v) { return v; }
inline float ToFloat(__half v) { return __half2float(v); }
inline float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
}  // namespace internal

// A or B: a 16x16 tile of p, ldm elements between rows (row_major) or columns (col_major).
template <typename Use, typename T, typename Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const T* p, unsigned ldm) {
  constexpr bool kRow = std::is_same_v<Layout, row_major>;
  for (int r = 0; r < 16; ++r) {
    for (int c = 0; c < 16; ++c) f.x[r * 16 + c] = kRow ? p[r * ldm + c] : p[c * ldm + r];
  }
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p,
                             unsigned ldm, layout_t layout) {
  for (int r = 0; r < 16; ++r) {
    for (int c = 0; c < 16; ++c) {
      f.x[r * 16 + c] = layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r];
    }
  }
}

inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f,
                              unsigned ldm, layout_t layout) {
  for (int i = ty_emu::Lane(); i < 256; i += 32) {
    const int r = i / 16, c = i % 16;
    (layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r]) = f.x[i];
  }
}

template <typename Use, typename T, typename Layout, typename V>
void fill_fragment(fragment<Use, 16, 16, 16, T, Layout>& f, V value) {
  for (T& v : f.x) v = static_cast<T>(value);
}

// d = a b + c, products and sums in f32 (the tensor cores' accumulation).
template <typename T, typename LayoutA, typename LayoutB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d,
              const fragment<matrix_a, 16, 16, 16, T, LayoutA>& a,
              const fragment<matrix_b, 16, 16, 16, T, LayoutB>& b,
              const fragment<accumulator, 16, 16, 16, float>& c) {
  float out[256];
  for (int r = 0; r < 16; ++r) {
    for (int col = 0; col < 16; ++col) {
      float acc = c.x[r * 16 + col];
      for (int k = 0; k < 16; ++k) {
        acc += internal::ToFloat(a.x[r * 16 + k]) * internal::ToFloat(b.x[k * 16 + col]);
      }
      out[r * 16 + col] = acc;
    }
  }
  for (int i = 0; i < 256; ++i) d.x[i] = out[i];
}

}  // namespace nvcuda::wmma
