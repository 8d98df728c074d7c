// SmallVector<T, N>: a vector that keeps up to N elements inline and moves to the heap beyond.
// For short lists on hot paths (gradient lists, edges) where a heap allocation per list would
// dominate. T must be default-constructible and movable.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <utility>
#include <vector>

namespace trainyard {

template <typename T, size_t N>
class SmallVector {
 public:
  SmallVector() = default;
  explicit SmallVector(size_t n) { resize(n); }
  SmallVector(std::initializer_list<T> init) {
    for (const T& v : init) push_back(v);
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T* data() { return heap_.empty() ? inline_ : heap_.data(); }
  const T* data() const { return heap_.empty() ? inline_ : heap_.data(); }
  T& operator[](size_t i) { return data()[i]; }
  const T& operator[](size_t i) const { return data()[i]; }
  T* begin() { return data(); }
  T* end() { return data() + size_; }
  const T* begin() const { return data(); }
  const T* end() const { return data() + size_; }
  T& back() { return data()[size_ - 1]; }

  void push_back(T v) {
    if (heap_.empty() && size_ < N) {
      inline_[size_++] = std::move(v);
      return;
    }
    SpillToHeap();
    heap_.push_back(std::move(v));
    ++size_;
  }
  template <typename... Args>
  void emplace_back(Args&&... args) {
    push_back(T(std::forward<Args>(args)...));
  }
  void resize(size_t n) {
    if (heap_.empty() && n <= N) {
      for (size_t i = n; i < size_; ++i) inline_[i] = T();
      size_ = n;
      return;
    }
    SpillToHeap();
    heap_.resize(n);
    size_ = n;
  }
  void clear() {
    for (size_t i = 0; i < size_ && i < N; ++i) inline_[i] = T();
    heap_.clear();
    size_ = 0;
  }

 private:
  void SpillToHeap() {
    if (!heap_.empty() || size_ == 0) {
      if (heap_.empty()) heap_.reserve(N * 2);
      return;
    }
    heap_.reserve(N * 2);
    for (size_t i = 0; i < size_; ++i) {
      heap_.push_back(std::move(inline_[i]));
      inline_[i] = T();
    }
  }

  T inline_[N] = {};
  std::vector<T> heap_;
  size_t size_ = 0;
};

}  // namespace trainyard
