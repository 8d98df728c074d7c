#include "tests/fuzz/mutator.h"

#include <algorithm>
#include <string_view>

namespace trainyard::fuzz {
namespace {

// Text that means something to a YAML or JSON reader, or to the spec validator behind them.
constexpr std::string_view kTokens[] = {"&a ",
                                        "*a",
                                        "&b ",
                                        "*b ",
                                        "<<: *a\n",
                                        "!!int ",
                                        "!!float ",
                                        "!!str ",
                                        "!!bool ",
                                        "!!null ",
                                        "!foo ",
                                        "!<tag:yaml.org,2002:int> ",
                                        "? ",
                                        "- ",
                                        ": ",
                                        "---\n",
                                        "...\n",
                                        "%YAML 1.2\n",
                                        "%TAG ! tag:x,2000:\n",
                                        "\t",
                                        "\\u",
                                        "\\ud800",
                                        "\\udc00\\ud800",
                                        "\"",
                                        "'",
                                        "|\n",
                                        ">-\n",
                                        "\xEF\xBB\xBF",
                                        "\xff",
                                        "\xc3",
                                        "\xed\xa0\x80",
                                        "\xf4\x90\x80\x80",
                                        std::string_view("\0", 1),
                                        "\r",
                                        "1e999",
                                        "-1e-400",
                                        "-0",
                                        "0x",
                                        "0o7",
                                        "0x8000000000000000",
                                        ".inf",
                                        "-.inf",
                                        ".nan",
                                        "null",
                                        "true",
                                        "~",
                                        "9223372036854775808",
                                        "-9223372036854775809",
                                        "2147483648",
                                        "-1",
                                        "1.5",
                                        "#",
                                        "\n  ",
                                        "\n- ",
                                        "{",
                                        "}",
                                        "[",
                                        "]",
                                        ",",
                                        "\"a\": ",
                                        "NaN",
                                        "steps",
                                        "epochs",
                                        "batch_size",
                                        "world_size",
                                        "lr",
                                        "sizes",
                                        "mlp",
                                        "gpt",
                                        "cnn",
                                        "sgd",
                                        "adamw",
                                        "cuda",
                                        "bf16",
                                        "{}",
                                        "[]",
                                        "\"\"",
                                        "\\\"",
                                        "\\n"};

constexpr size_t kDigitRuns[] = {1, 19, 20, 309, 400, 5000, 60000};
constexpr size_t kBracketDepths[] = {3, 100, 255, 257, 300, 511, 513, 2000};

}  // namespace

uint64_t Mutator::Next() {  // splitmix64
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

size_t Mutator::Below(size_t n) { return static_cast<size_t>(Next() % n); }

std::string Mutator::Mutate(const std::string& text, const std::vector<std::string>& others) {
  std::string out = text;
  for (size_t n = 1 + Below(4); n > 0; --n) {
    switch (Below(10)) {
      case 0:
        FlipBit(&out);
        break;
      case 1:
        InsertByte(&out);
        break;
      case 2:
        DeleteRange(&out);
        break;
      case 3:
        DuplicateChunk(&out);
        break;
      case 4:
        Splice(&out, others);
        break;
      case 5:
        InsertDigits(&out);
        break;
      case 6:
        InsertToken(&out);
        break;
      case 7:
        AnchorAndAlias(&out);
        break;
      case 8:
        AppendAliasLadder(&out);
        break;
      default:
        InsertBrackets(&out);
        break;
    }
  }
  return out;
}

void Mutator::FlipBit(std::string* text) {
  if (text->empty()) return;
  (*text)[Below(text->size())] ^= static_cast<char>(1u << Below(8));
}

void Mutator::InsertByte(std::string* text) {
  text->insert(Position(*text), 1, static_cast<char>(Below(256)));
}

void Mutator::DeleteRange(std::string* text) {
  if (text->empty()) return;
  const size_t at = Below(text->size());
  text->erase(at, 1 + Below(16));
}

void Mutator::DuplicateChunk(std::string* text) {
  if (text->empty()) return;
  const size_t from = Below(text->size());
  const std::string chunk = text->substr(from, 1 + Below(64));
  text->insert(Position(*text), chunk);
}

// Replaces a range of `text` with a range of another input (or of itself).
void Mutator::Splice(std::string* text, const std::vector<std::string>& others) {
  const std::string other = others.empty() ? *text : others[Below(others.size())];
  if (other.empty()) return;
  const size_t from = Below(other.size());
  const std::string chunk = other.substr(from, 1 + Below(256));
  const size_t at = Position(*text);
  text->replace(at, Below(64), chunk);
}

void Mutator::InsertDigits(std::string* text) {
  std::string run(kDigitRuns[Below(std::size(kDigitRuns))], '0');
  for (char& c : run) c = static_cast<char>('0' + Below(10));
  static constexpr std::string_view kPrefixes[] = {"", "-", "0.", "0x", "0o", "1e", "."};
  run.insert(0, kPrefixes[Below(std::size(kPrefixes))]);
  text->insert(Position(*text), run);
}

void Mutator::InsertToken(std::string* text) {
  text->insert(Position(*text), kTokens[Below(std::size(kTokens))]);
}

// An anchor after one ": " and an alias of it after another, so both land where values go.
void Mutator::AnchorAndAlias(std::string* text) {
  std::vector<size_t> values;
  for (size_t at = text->find(": "); at != std::string::npos; at = text->find(": ", at + 2)) {
    values.push_back(at + 2);
  }
  if (values.empty()) return InsertToken(text);
  const std::string name = "a" + std::to_string(Below(3));
  const size_t anchor_at = values[Below(values.size())];
  const size_t alias_at = values[Below(values.size())];
  // Later position first, so the earlier one stays where it was.
  if (alias_at > anchor_at) text->insert(alias_at, "*" + name + " ");
  text->insert(anchor_at, "&" + name + " ");
  if (alias_at < anchor_at) text->insert(alias_at, "*" + name + " ");
}

// Top-level keys whose values alias the level before, `width` times each: a small alias bomb.
void Mutator::AppendAliasLadder(std::string* text) {
  const size_t levels = 1 + Below(12);
  const size_t width = 2 + Below(7);
  std::string ladder = "\nz0: &z0 [1, 2]\n";
  for (size_t i = 1; i <= levels; ++i) {
    ladder += "z" + std::to_string(i) + ": &z" + std::to_string(i) + " [";
    for (size_t k = 0; k < width; ++k) ladder += (k ? ", *z" : "*z") + std::to_string(i - 1);
    ladder += "]\n";
  }
  text->append(ladder);
}

void Mutator::InsertBrackets(std::string* text) {
  const size_t depth = kBracketDepths[Below(std::size(kBracketDepths))];
  static constexpr std::string_view kOpeners[] = {"[", "{\"a\": ", "{a: ", "- "};
  const std::string_view opener = kOpeners[Below(std::size(kOpeners))];
  std::string brackets;
  for (size_t i = 0; i < depth; ++i) brackets += opener;
  const bool closed = Below(2) == 0;
  if (closed && opener != "- ") brackets += std::string(depth, opener[0] == '[' ? ']' : '}');
  text->insert(Position(*text), brackets);
}

}  // namespace trainyard::fuzz
