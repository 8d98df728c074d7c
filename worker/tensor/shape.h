// Shape: a short list of sizes (or strides) held inline, at most kMaxDims entries, so that
// creating a tensor never allocates for its shape.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "common/check.h"
#include "kernels/cpu/iter.h"

namespace trainyard {

constexpr int kMaxDims = kernels::cpu::kMaxDims;

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) { Assign(dims.begin(), dims.size()); }
  explicit Shape(const std::vector<int64_t>& dims) { Assign(dims.data(), dims.size()); }
  Shape(const int64_t* dims, size_t n) { Assign(dims, n); }

  int64_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  int64_t operator[](int64_t i) const { return d_[i]; }
  int64_t& operator[](int64_t i) { return d_[i]; }
  const int64_t* data() const { return d_; }
  const int64_t* begin() const { return d_; }
  const int64_t* end() const { return d_ + n_; }
  int64_t back() const { return d_[n_ - 1]; }

  void push_back(int64_t v) {
    TY_CHECK(n_ < kMaxDims) << "a tensor has at most " << kMaxDims << " dimensions";
    d_[n_++] = v;
  }
  void insert(int64_t pos, int64_t v);
  void erase(int64_t pos);
  void resize(int64_t n, int64_t fill = 0) {
    TY_CHECK(n >= 0 && n <= kMaxDims) << "a tensor has at most " << kMaxDims << " dimensions";
    for (int64_t i = n_; i < n; ++i) d_[i] = fill;
    n_ = static_cast<int>(n);
  }

  // Product of the entries (1 for a scalar's empty shape).
  int64_t numel() const {
    int64_t p = 1;
    for (int i = 0; i < n_; ++i) p *= d_[i];
    return p;
  }
  std::vector<int64_t> vec() const { return std::vector<int64_t>(d_, d_ + n_); }
  std::string ToString() const;  // "[2, 3]"

  friend bool operator==(const Shape& a, const Shape& b) {
    if (a.n_ != b.n_) return false;
    for (int i = 0; i < a.n_; ++i)
      if (a.d_[i] != b.d_[i]) return false;
    return true;
  }
  friend bool operator!=(const Shape& a, const Shape& b) { return !(a == b); }

 private:
  void Assign(const int64_t* p, size_t n) {
    TY_CHECK(n <= static_cast<size_t>(kMaxDims))
        << "a tensor has at most " << kMaxDims << " dimensions, got " << n;
    n_ = static_cast<int>(n);
    for (size_t i = 0; i < n; ++i) d_[i] = p[i];
  }
  int n_ = 0;
  int64_t d_[kMaxDims] = {};
};

std::ostream& operator<<(std::ostream& os, const Shape& s);

// Row-major (C-contiguous) strides for `sizes`.
Shape ContiguousStrides(const Shape& sizes);

// NumPy broadcasting of two shapes; TY_CHECK-fails naming both shapes when incompatible.
Shape BroadcastShapes(const Shape& a, const Shape& b, const char* op_name);

// Wraps a possibly negative dim into [0, ndim); TY_CHECK-fails with the allowed range.
int64_t WrapDim(int64_t dim, int64_t ndim, const char* op_name);

}  // namespace trainyard
