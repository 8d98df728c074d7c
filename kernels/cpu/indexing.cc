#include "kernels/cpu/indexing.h"

#include <cstring>

#include "kernels/cpu/parallel.h"

namespace trainyard::kernels::cpu {
namespace {

// Calls fn(linear position in index, offset in x computed with x's strides but the indexed
// coordinate along dim replaced by index value).
template <typename F>
void ForEachIndexed(ArrayRef xa, int dim, const int64_t* index, ArrayRef ia, bool parallel,
                    const F& fn) {
  int64_t total = 1;
  for (int d = 0; d < ia.ndim; ++d) total *= ia.sizes[d];
  auto body = [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      int64_t rem = i, off = 0;
      for (int d = ia.ndim - 1; d >= 0; --d) {
        int64_t c = rem % ia.sizes[d];
        rem /= ia.sizes[d];
        off += (d == dim ? index[i] : c) * xa.strides[d];
      }
      fn(i, off);
    }
  };
  if (parallel) {
    ParallelFor(total, GrainFor(8), body);
  } else {
    body(0, total);
  }
}

}  // namespace

int64_t CheckIndices(const int64_t* index, int64_t n, const IndexCheck& check, int64_t* out) {
  int64_t first = -1;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = index[i];
    const bool valid = (v >= 0 && v < check.size) || (check.has_ignore && v == check.ignore_index);
    if (!valid && first < 0) first = i;
    if (out != nullptr) out[i] = valid ? v : check.has_ignore ? check.ignore_index : 0;
  }
  return first;
}

template <typename T>
void Gather(const T* x, ArrayRef xa, int dim, const int64_t* index, ArrayRef ia, T* out) {
  ForEachIndexed(xa, dim, index, ia, true, [&](int64_t i, int64_t off) { out[i] = x[off]; });
}

template <typename T>
void ScatterAdd(T* out, ArrayRef oa, int dim, const int64_t* index, ArrayRef ia, const T* src) {
  ForEachIndexed(oa, dim, index, ia, false, [&](int64_t i, int64_t off) { out[off] += src[i]; });
}

template <typename T>
void IndexRows(const T* x, int64_t row, const int64_t* index, int64_t n, T* out) {
  ParallelFor(n, GrainFor(row), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      std::memcpy(out + i * row, x + index[i] * row, static_cast<size_t>(row) * sizeof(T));
  });
}

template <typename T>
void IndexAddRows(T* out, int64_t row, const int64_t* index, int64_t n, const T* src) {
  // Rows split across threads by column block: every thread walks all indices in order.
  ParallelFor(row, GrainFor(n), [&](int64_t b, int64_t e) {
    for (int64_t i = 0; i < n; ++i) {
      T* o = out + index[i] * row;
      const T* s = src + i * row;
      for (int64_t j = b; j < e; ++j) o[j] += s[j];
    }
  });
}

#define TY_INSTANTIATE(T)                                                             \
  template void Gather<T>(const T*, ArrayRef, int, const int64_t*, ArrayRef, T*);     \
  template void ScatterAdd<T>(T*, ArrayRef, int, const int64_t*, ArrayRef, const T*); \
  template void IndexRows<T>(const T*, int64_t, const int64_t*, int64_t, T*);         \
  template void IndexAddRows<T>(T*, int64_t, const int64_t*, int64_t, const T*);
TY_INSTANTIATE(float)
TY_INSTANTIATE(double)
TY_INSTANTIATE(int64_t)
#undef TY_INSTANTIATE

}  // namespace trainyard::kernels::cpu
