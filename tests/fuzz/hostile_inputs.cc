#include "tests/fuzz/hostile_inputs.h"

#include <string_view>

namespace trainyard::fuzz {

const char kValidSpecYaml[] = R"(name: fuzz
model:
  mlp: {sizes: [784, 16, 10]}
data:
  fashion_mnist: {}
optimizer:
  sgd: {lr: 0.1}
batch_size: 8
steps: 2
checkpoint:
  dir: runs/fuzz
)";

namespace {

constexpr int kBombLevels = 16;     // 4^16 values, expanded
constexpr int kMapKeys = 10000;     // a map aliased until it exceeds the budget
constexpr int kManyKeys = 30000;    // keys in one mapping
constexpr int kLongDigits = 50000;  // digits in one scalar
constexpr int kTooDeep = 100000;    // brackets

std::string Repeated(std::string_view text, int times) {
  std::string out;
  for (int i = 0; i < times; ++i) out += text;
  return out;
}

// (A constant, not a std::string: HostileInputs() runs during static initialisation.)
constexpr char kAliasRefusal[] = "aliases expand to more than 100000 values";

// kValidSpecYaml with the top-level field `field` (its line and the indented lines after it)
// replaced by `text`.
std::string SpecWith(std::string_view field, const std::string& text) {
  std::string spec = kValidSpecYaml;
  const size_t at = spec.find("\n" + std::string(field) + ":") + 1;
  size_t end = spec.find('\n', at) + 1;
  while (end < spec.size() && spec[end] == ' ') end = spec.find('\n', end) + 1;
  return spec.replace(at, end - at, text + "\n");
}

std::string AliasBomb() {
  std::string text = "l0: &l0 [lol, lol, lol, lol]\n";
  for (int i = 1; i <= kBombLevels; ++i) {
    const std::string prev = "*l" + std::to_string(i - 1);
    text += "l" + std::to_string(i) + ": &l" + std::to_string(i) + " [" + prev + ", " + prev +
            ", " + prev + ", " + prev + "]\n";
  }
  return text;
}

std::string AliasedMap() {
  std::string text = "base: &m\n";
  for (int i = 0; i < kMapKeys; ++i) text += "  k" + std::to_string(i) + ": v\n";
  for (int i = 0; i < 100; ++i) text += "copy" + std::to_string(i) + ": *m\n";
  return text;
}

// `keys` members; YAML block style under `indent`, or one JSON object.
std::string ManyKeysYaml(const std::string& indent) {
  std::string text;
  for (int i = 0; i < kManyKeys; ++i) text += indent + "k" + std::to_string(i) + ": 1\n";
  return text;
}
std::string ManyKeysJson() {
  std::string text = "{";
  for (int i = 0; i < kManyKeys; ++i) text += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":1";
  return text + "}";
}

// `levels` mappings, each the value of the one before, in block style.
std::string BlockNesting(int levels) {
  std::string text;
  for (int i = 0; i < levels; ++i) text += std::string(i, ' ') + "a:\n";
  return text;
}

// Members with 100-byte values, up to `bytes` of text in all.
std::string LongMembers(size_t bytes) {
  std::string text;
  const std::string value(100, 'v');
  while (text.size() + 120 <= bytes)
    text += "k" + std::to_string(text.size()) + ": " + value + "\n";
  return text;
}

std::vector<HostileInput> LongScalars() {
  const std::string digits(kLongDigits, '9');
  const std::string zeros(kLongDigits, '0');
  return {
      {"YamlIntOf50000Digits", Reader::kYaml, SpecWith("batch_size", "batch_size: " + digits), "",
       "batch_size"},
      {"YamlNegativeIntOf50000Digits", Reader::kYaml, SpecWith("steps", "steps: -" + digits), "",
       "steps"},
      {"YamlFloatOf50000Digits", Reader::kYaml,
       SpecWith("optimizer", "optimizer: {sgd: {lr: 0." + zeros + "1}}"), "", ""},  // lr 0: allowed
      {"YamlPathOf50000Digits", Reader::kYaml,
       SpecWith("checkpoint", "checkpoint: {dir: runs/" + digits + "/x}"), "", ""},
      {"YamlKeyOf50000Digits", Reader::kYaml, SpecWith("steps", "? " + digits + "\n: 1"), "",
       "unknown field"},
      {"JsonIntOf50000Digits", Reader::kJson, "{\"batch_size\": " + digits + "}",
       "is out of range for a double", ""},
      // Json::Parse refuses what underflows a double (YAML reads it as 0).
      {"JsonFloatOf50000Digits", Reader::kJson, "{\"lr\": 0." + zeros + "1}",
       "is out of range for a double", ""},
  };
}

std::vector<HostileInput> AliasesAndKeys() {
  const std::string big_string(1 << 20, 'x');
  return {
      {"YamlAliasBomb", Reader::kYaml, AliasBomb(), kAliasRefusal, ""},
      {"YamlAliasesOfA10000KeyMap", Reader::kYaml, AliasedMap(), kAliasRefusal, ""},
      {"YamlAliasesOfAMebibyteString", Reader::kYaml,
       "s: &s " + big_string + "\na: [" + Repeated("*s, ", 20) + "*s]\n",
       "aliases expand to more than 16777216 bytes of text", ""},
      {"Yaml30000TopLevelKeys", Reader::kYaml, ManyKeysYaml(""), "", "unknown field"},
      {"Yaml30000NestedKeys", Reader::kYaml, "model:\n" + ManyKeysYaml("  "), "", "model"},
      {"Json30000TopLevelKeys", Reader::kJson, ManyKeysJson(), "", "unknown field"},
      {"Json30000NestedKeys", Reader::kJson, "{\"model\": " + ManyKeysJson() + "}", "", "model"},
  };
}

std::vector<HostileInput> DepthEncodingAndSize() {
  const std::string spec = kValidSpecYaml;
  return {
      {"YamlFlowNestingTooDeep", Reader::kYaml, std::string(kTooDeep, '['),
       "nesting deeper than 256", ""},
      {"YamlBlockNestingTooDeep", Reader::kYaml, BlockNesting(300), "nesting deeper than 256", ""},
      {"YamlNestingAtTheLimit", Reader::kYaml,
       SpecWith("name", "name: " + std::string(255, '[') + std::string(255, ']')), "", "name"},
      {"JsonNestingTooDeep", Reader::kJson, std::string(kTooDeep, '['),
       "nesting deeper than 512 levels", ""},
      {"JsonNestingAtTheLimit", Reader::kJson,
       "{\"name\": " + std::string(511, '[') + std::string(511, ']') + "}", "", "name"},
      {"YamlInvalidUtf8", Reader::kYaml, SpecWith("name", "name: fu\xff\xfezz"),
       "invalid leading UTF-8 octet", ""},
      {"YamlEncodedSurrogate", Reader::kYaml, SpecWith("name", "name: \xed\xa0\x80"),
       "invalid Unicode character", ""},
      {"JsonInvalidUtf8", Reader::kJson, "{\"name\": \"fu\xc3zz\"}", "invalid UTF-8", ""},
      {"SpecFileOverOneMebibyte", Reader::kSpecFile,
       spec + "#" + std::string((1 << 20) - spec.size(), 'x'), "is larger than 1048576 bytes", ""},
      {"SpecFileOfOneMebibyte", Reader::kSpecFile, LongMembers(1 << 20), "", "unknown field"},
  };
}

}  // namespace

std::vector<HostileInput> HostileInputs() {
  std::vector<HostileInput> inputs = LongScalars();
  for (auto* more : {&AliasesAndKeys, &DepthEncodingAndSize}) {
    for (HostileInput& input : more()) inputs.push_back(std::move(input));
  }
  return inputs;
}

}  // namespace trainyard::fuzz
