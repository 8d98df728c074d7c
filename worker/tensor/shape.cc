#include "worker/tensor/shape.h"

#include <ostream>

namespace trainyard {

void Shape::insert(int64_t pos, int64_t v) {
  TY_CHECK(n_ < kMaxDims) << "a tensor has at most " << kMaxDims << " dimensions";
  TY_CHECK(pos >= 0 && pos <= n_);
  for (int64_t i = n_; i > pos; --i) d_[i] = d_[i - 1];
  d_[pos] = v;
  ++n_;
}

void Shape::erase(int64_t pos) {
  TY_CHECK(pos >= 0 && pos < n_);
  for (int64_t i = pos; i + 1 < n_; ++i) d_[i] = d_[i + 1];
  --n_;
}

std::string Shape::ToString() const {
  std::string s = "[";
  for (int i = 0; i < n_; ++i) {
    if (i) s += ", ";
    s += std::to_string(d_[i]);
  }
  return s + "]";
}

std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << s.ToString(); }

Shape ContiguousStrides(const Shape& sizes) {
  Shape st;
  st.resize(sizes.size());
  int64_t acc = 1;
  for (int64_t i = sizes.size() - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= sizes[i] > 1 ? sizes[i] : 1;
  }
  return st;
}

Shape BroadcastShapes(const Shape& a, const Shape& b, const char* op_name) {
  if (a == b) return a;
  int64_t n = a.size() > b.size() ? a.size() : b.size();
  Shape out;
  out.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    int64_t ai = i - (n - a.size()), bi = i - (n - b.size());
    int64_t da = ai >= 0 ? a[ai] : 1, db = bi >= 0 ? b[bi] : 1;
    TY_CHECK(da == db || da == 1 || db == 1)
        << op_name << ": shapes " << a << " and " << b << " cannot be broadcast (dim " << i << ": "
        << da << " vs " << db << ")";
    out[i] = da == 1 ? db : da;
  }
  return out;
}

int64_t WrapDim(int64_t dim, int64_t ndim, const char* op_name) {
  int64_t n = ndim == 0 ? 1 : ndim;  // a scalar accepts dim 0 and -1, as in PyTorch
  TY_CHECK(dim >= -n && dim < n) << op_name << ": dim " << dim << " is out of range; expected "
                                 << -n << " to " << n - 1;
  return dim < 0 ? dim + n : dim;
}

}  // namespace trainyard
