// TokenDataset: language-model windows over one token stream. Sample i is the window starting
// at token i: input = tokens[i, i + T), target = tokens[i + 1, i + T + 1), so the target at
// each position is the next token. Windows overlap; a RandomSampler over them draws random
// offsets into the corpus.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "worker/data/dataset.h"

namespace trainyard::data {

class TokenDataset final : public BatchSource {
 public:
  // InvalidArgument when context_length < 1 or the stream has fewer than context_length + 1
  // tokens (there would be no window).
  static StatusOr<TokenDataset> Create(std::vector<uint16_t> tokens, int64_t context_length);

  // Number of windows: tokens - T.
  int64_t size() const override { return static_cast<int64_t>(tokens_.size()) - context_length_; }
  int64_t context_length() const { return context_length_; }
  const std::vector<uint16_t>& tokens() const { return tokens_; }

  // input (B, T) int64 and target (B, T) int64. Thread-safe.
  Batch Get(const std::vector<int64_t>& indices) const;
  StatusOr<Batch> Fetch(const std::vector<int64_t>& indices) const override { return Get(indices); }

 private:
  TokenDataset(std::vector<uint16_t> tokens, int64_t context_length)
      : tokens_(std::move(tokens)), context_length_(context_length) {}

  std::vector<uint16_t> tokens_;
  int64_t context_length_;
};

// A held-out split of a token stream: the last round(eval_fraction * N) tokens are `eval`, the
// rest `train`. Contiguous, unlike SplitIndices, so no window straddles both sides.
struct TokenSplit {
  std::vector<uint16_t> train;
  std::vector<uint16_t> eval;
};
// InvalidArgument unless 0 <= eval_fraction < 1.
StatusOr<TokenSplit> SplitTokens(const std::vector<uint16_t>& tokens, double eval_fraction);

}  // namespace trainyard::data
