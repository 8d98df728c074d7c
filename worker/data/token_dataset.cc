#include "worker/data/token_dataset.h"

#include <cmath>

#include "worker/tensor/factories.h"

namespace trainyard::data {

StatusOr<TokenDataset> TokenDataset::Create(std::vector<uint16_t> tokens, int64_t context_length) {
  if (context_length < 1) {
    return InvalidArgumentError("context length " + std::to_string(context_length) +
                                " must be at least 1");
  }
  if (static_cast<int64_t>(tokens.size()) < context_length + 1) {
    return InvalidArgumentError("a corpus of " + std::to_string(tokens.size()) +
                                " tokens is too short for context length " +
                                std::to_string(context_length) + "; it needs at least " +
                                std::to_string(context_length + 1) + " tokens");
  }
  return TokenDataset(std::move(tokens), context_length);
}

Batch TokenDataset::Get(const std::vector<int64_t>& indices) const {
  const int64_t b_size = static_cast<int64_t>(indices.size());
  const int64_t t_len = context_length_;
  Tensor input = Empty({b_size, t_len}, Options(DType::kInt64));
  Tensor target = Empty({b_size, t_len}, Options(DType::kInt64));
  int64_t* x = input.data<int64_t>();
  int64_t* y = target.data<int64_t>();
  for (int64_t b = 0; b < b_size; ++b) {
    const int64_t start = indices[b];
    TY_CHECK(start >= 0 && start < size())
        << "window " << start << " is outside [0, " << size() << ")";
    const uint16_t* src = tokens_.data() + start;
    for (int64_t t = 0; t < t_len; ++t) {
      x[b * t_len + t] = src[t];
      y[b * t_len + t] = src[t + 1];
    }
  }
  return Batch{std::move(input), std::move(target)};
}

StatusOr<TokenSplit> SplitTokens(const std::vector<uint16_t>& tokens, double eval_fraction) {
  if (!(eval_fraction >= 0.0 && eval_fraction < 1.0)) {
    return InvalidArgumentError("eval fraction " + std::to_string(eval_fraction) +
                                " must be in [0, 1)");
  }
  const auto n_eval = static_cast<size_t>(std::llround(eval_fraction * tokens.size()));
  const size_t n_train = tokens.size() - n_eval;
  return TokenSplit{std::vector<uint16_t>(tokens.begin(), tokens.begin() + n_train),
                    std::vector<uint16_t>(tokens.begin() + n_train, tokens.end())};
}

}  // namespace trainyard::data
