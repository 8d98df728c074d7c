#include "worker/data/dataset.h"

#include <cstring>

namespace trainyard::data {

Tensor GatherRows(const Tensor& src, const std::vector<int64_t>& rows) {
  TY_CHECK(src.dim() >= 1 && src.is_contiguous()) << "GatherRows needs a contiguous (N, ...) "
                                                  << "tensor, got " << src.shape().ToString();
  const int64_t n = src.size(0);
  Shape shape = src.shape();
  shape[0] = static_cast<int64_t>(rows.size());
  Tensor out = Empty(shape, Options(src.dtype()));
  int64_t row_elems = 1;
  for (int64_t d = 1; d < src.dim(); ++d) row_elems *= src.size(d);
  const size_t row_bytes = static_cast<size_t>(row_elems) * ElementSize(src.dtype());
  const char* from = static_cast<const char*>(src.raw_data());
  char* to = static_cast<char*>(out.raw_data());
  for (size_t b = 0; b < rows.size(); ++b) {
    TY_CHECK(rows[b] >= 0 && rows[b] < n)
        << "sample index " << rows[b] << " is outside [0, " << n << ")";
    std::memcpy(to + b * row_bytes, from + rows[b] * row_bytes, row_bytes);
  }
  return out;
}

Dataset::Dataset(Tensor inputs, Tensor targets)
    : inputs_(ContiguousData(inputs.detach())), targets_(ContiguousData(targets.detach())) {
  TY_CHECK(inputs_.dim() >= 1 && targets_.dim() >= 1)
      << "a dataset needs inputs (N, ...) and targets (N, ...), got " << inputs_.shape().ToString()
      << " and " << targets_.shape().ToString();
  TY_CHECK_EQ(inputs_.size(0), targets_.size(0)) << "inputs and targets differ in N";
  TY_CHECK(inputs_.device().is_cpu() && targets_.device().is_cpu()) << "datasets live on cpu";
}

Batch Dataset::Get(const std::vector<int64_t>& indices) const {
  return Batch{GatherRows(inputs_, indices), GatherRows(targets_, indices)};
}

Dataset Dataset::Select(const std::vector<int64_t>& indices) const {
  Batch b = Get(indices);
  return Dataset(std::move(b.input), std::move(b.target));
}

Subset::Subset(std::shared_ptr<const BatchSource> base, std::vector<int64_t> indices)
    : base_(std::move(base)), indices_(std::move(indices)) {
  TY_CHECK(base_ != nullptr) << "Subset of a null source";
  for (int64_t i : indices_) {
    TY_CHECK(i >= 0 && i < base_->size())
        << "subset index " << i << " is outside [0, " << base_->size() << ")";
  }
}

StatusOr<Batch> Subset::Fetch(const std::vector<int64_t>& indices) const {
  std::vector<int64_t> mapped(indices.size());
  for (size_t b = 0; b < indices.size(); ++b) {
    TY_CHECK(indices[b] >= 0 && indices[b] < size())
        << "sample index " << indices[b] << " is outside [0, " << size() << ")";
    mapped[b] = indices_[indices[b]];
  }
  return base_->Fetch(mapped);
}

}  // namespace trainyard::data
