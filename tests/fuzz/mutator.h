// Mutator: deterministic mutations of spec text for the readers' fuzz test. The same seed gives
// the same mutants on every machine (splitmix64 and plain modulo, no std:: distributions), so a
// failure reproduces from the seed and the mutant's number.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace trainyard::fuzz {

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : state_(seed) {}

  // `text` changed by one to four stacked mutations: bit flips, byte inserts and deletes,
  // chunk duplication, splicing with one of `others`, long digit runs, YAML and JSON tokens,
  // anchors and aliases, alias ladders and deep brackets.
  std::string Mutate(const std::string& text, const std::vector<std::string>& others);

  // A number in [0, n); n > 0.
  size_t Below(size_t n);

 private:
  uint64_t Next();
  size_t Position(const std::string& text) { return Below(text.size() + 1); }

  void FlipBit(std::string* text);
  void InsertByte(std::string* text);
  void DeleteRange(std::string* text);
  void DuplicateChunk(std::string* text);
  void Splice(std::string* text, const std::vector<std::string>& others);
  void InsertDigits(std::string* text);
  void InsertToken(std::string* text);
  void AnchorAndAlias(std::string* text);
  void AppendAliasLadder(std::string* text);
  void InsertBrackets(std::string* text);

  uint64_t state_;
};

}  // namespace trainyard::fuzz
