#include "worker/data/bpe.h"

#include <limits>

#include "common/json.h"
#include "worker/data/file_io.h"

namespace trainyard::data {

namespace {

enum class Class { kLetter, kDigit, kSpace, kOther };

struct CodePoint {
  size_t begin, end;  // bytes of the text
  Class cls;
  char ascii;  // the character when ASCII, else 0
};

std::vector<CodePoint> Decode(std::string_view text) {
  std::vector<CodePoint> out;
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    size_t len = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    len = std::min(len, text.size() - i);
    Class cls = Class::kLetter;  // every code point from U+0080 on, and stray bytes
    if (c < 0x80) {
      cls = std::isalpha(c)                        ? Class::kLetter
            : std::isdigit(c)                      ? Class::kDigit
            : c == ' ' || (c >= '\t' && c <= '\r') ? Class::kSpace
                                                   : Class::kOther;
    }
    out.push_back({i, i + len, cls, c < 0x80 ? static_cast<char>(c) : '\0'});
    i += len;
  }
  return out;
}

// A code point as UTF-8.
std::string Utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// The symbols of a UTF-8 string of GPT-2 characters (each one code point).
std::vector<std::string> Symbols(const std::string& s) {
  std::vector<std::string> out;
  for (const CodePoint& cp : Decode(s)) out.push_back(s.substr(cp.begin, cp.end - cp.begin));
  return out;
}

}  // namespace

std::vector<std::string_view> SplitGpt2(std::string_view text) {
  const std::vector<CodePoint> cps = Decode(text);
  std::vector<std::string_view> out;
  const size_t n = cps.size();
  auto piece = [&](size_t from, size_t to) {  // code points [from, to)
    out.push_back(text.substr(cps[from].begin, cps[to - 1].end - cps[from].begin));
  };
  for (size_t i = 0; i < n;) {
    if (cps[i].ascii == '\'') {  // 's 't 're 've 'm 'll 'd
      size_t len = 0;
      for (const char* suffix : {"s", "t", "re", "ve", "m", "ll", "d"}) {
        const std::string_view sv(suffix);
        bool match = i + sv.size() < n;
        for (size_t k = 0; match && k < sv.size(); ++k) match = cps[i + 1 + k].ascii == sv[k];
        if (match) {
          len = sv.size();
          break;
        }
      }
      if (len > 0) {
        piece(i, i + 1 + len);
        i += 1 + len;
        continue;
      }
    }
    size_t j = i;
    if (cps[i].ascii == ' ' && i + 1 < n && cps[i + 1].cls != Class::kSpace) j = i + 1;
    const Class cls = cps[j].cls;
    size_t end = j + 1;
    while (end < n && cps[end].cls == cls) ++end;
    if (cls == Class::kSpace && end < n && end - i > 1) --end;  // \s+(?!\S)
    piece(i, end);
    i = end;
  }
  return out;
}

StatusOr<BpeTokenizer> BpeTokenizer::Load(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFileBytes(path));
  StatusOr<Json> parsed = Json::Parse(text);
  if (!parsed.ok()) {
    return InvalidArgumentError(path + ": not JSON: " + std::string(parsed.status().message()));
  }
  const Json& json = *parsed;
  auto bad = [&](const std::string& what) {
    return InvalidArgumentError(path + ": " + what +
                                "; a byte-level BPE tokenizer.json (GPT-2's) is expected");
  };
  const Json* model = json.is_object() ? json.Find("model") : nullptr;
  const Json* type = model != nullptr && model->is_object() ? model->Find("type") : nullptr;
  if (type == nullptr || !type->is_string() || type->string_value() != "BPE")
    return bad("model.type is not \"BPE\"");
  const Json* pre = json.Find("pre_tokenizer");
  const Json* pre_type = pre != nullptr && pre->is_object() ? pre->Find("type") : nullptr;
  if (pre_type == nullptr || !pre_type->is_string() || pre_type->string_value() != "ByteLevel")
    return bad("pre_tokenizer.type is not \"ByteLevel\"");
  BpeTokenizer t;
  if (const Json* p = pre->Find("add_prefix_space"); p != nullptr && p->is_bool())
    t.add_prefix_space_ = p->bool_value();
  if (const Json* m = model->Find("ignore_merges"); m != nullptr && m->is_bool())
    t.ignore_merges_ = m->bool_value();
  const Json* vocab = model->Find("vocab");
  if (vocab == nullptr || !vocab->is_object()) return bad("model.vocab is not an object");
  for (const auto& [token, id] : vocab->members()) {
    if (!id.is_integer() || id.int_value() < 0 || id.int_value() > 65535) {
      return bad("model.vocab[" + Json(token).Dump() + "] = " + id.Dump() +
                 " is not an id in [0, 65535]");
    }
    t.vocab_[token] = id.int_value();
    t.vocab_size_ = std::max(t.vocab_size_, id.int_value() + 1);
  }
  const Json* merges = model->Find("merges");
  if (merges == nullptr || !merges->is_array()) return bad("model.merges is not a list");
  for (size_t r = 0; r < merges->size(); ++r) {
    const Json& m = (*merges)[r];
    std::pair<std::string, std::string> pair;
    if (m.is_string() && m.string_value().find(' ') != std::string::npos) {
      const std::string& s = m.string_value();
      pair = {s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1)};
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      pair = {m[0].string_value(), m[1].string_value()};
    } else {
      return bad("model.merges[" + std::to_string(r) + "] = " + m.Dump().substr(0, 60) +
                 " is not a pair of tokens");
    }
    if (!t.vocab_.count(pair.first) || !t.vocab_.count(pair.second) ||
        !t.vocab_.count(pair.first + pair.second)) {
      return bad("model.merges[" + std::to_string(r) + "] = " + m.Dump().substr(0, 60) +
                 " merges tokens that model.vocab lacks (or makes one it lacks)");
    }
    t.ranks_.emplace(std::move(pair), static_cast<int64_t>(r));
  }
  // GPT-2's bytes_to_unicode: printable bytes stand for themselves, the others for U+0100 on.
  int next = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    t.byte_char_[b] = Utf8(printable ? static_cast<uint32_t>(b) : 256u + next++);
  }
  return t;
}

Status BpeTokenizer::EncodePiece(std::string_view piece, std::vector<uint16_t>* out) const {
  std::string mapped;
  for (char c : piece) mapped += byte_char_[static_cast<unsigned char>(c)];
  auto whole = vocab_.find(mapped);
  std::vector<std::string> symbols;
  if (ignore_merges_ && whole != vocab_.end()) {
    symbols = {mapped};
  } else {
    symbols = Symbols(mapped);
  }
  while (symbols.size() > 1) {  // merge every occurrence of the best-ranked pair
    int64_t best = std::numeric_limits<int64_t>::max();
    const std::pair<std::string, std::string>* best_pair = nullptr;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      auto it = ranks_.find({symbols[i], symbols[i + 1]});
      if (it != ranks_.end() && it->second < best) best = it->second, best_pair = &it->first;
    }
    if (best_pair == nullptr) break;
    std::vector<std::string> merged;
    for (size_t i = 0; i < symbols.size(); ++i) {
      if (i + 1 < symbols.size() && symbols[i] == best_pair->first &&
          symbols[i + 1] == best_pair->second) {
        merged.push_back(symbols[i] + symbols[i + 1]);
        ++i;
      } else {
        merged.push_back(symbols[i]);
      }
    }
    symbols = std::move(merged);
  }
  for (const std::string& s : symbols) {
    auto it = vocab_.find(s);
    if (it == vocab_.end()) {
      return InvalidArgumentError("the tokenizer has no id for " + Json(s).Dump() + " (of " +
                                  Json(std::string(piece)).Dump() + ")");
    }
    out->push_back(static_cast<uint16_t>(it->second));
  }
  return OkStatus();
}

StatusOr<std::vector<uint16_t>> BpeTokenizer::Encode(std::string_view text) const {
  std::string prefixed;
  if (add_prefix_space_ && !text.empty() && text[0] != ' ') {
    prefixed = " " + std::string(text);
    text = prefixed;
  }
  std::vector<uint16_t> out;
  std::unordered_map<std::string_view, std::vector<uint16_t>> cache;  // words repeat
  for (std::string_view piece : SplitGpt2(text)) {
    auto it = cache.find(piece);
    if (it == cache.end()) {
      std::vector<uint16_t> ids;
      RETURN_IF_ERROR(EncodePiece(piece, &ids));
      it = cache.emplace(piece, std::move(ids)).first;
    }
    out.insert(out.end(), it->second.begin(), it->second.end());
  }
  return out;
}

}  // namespace trainyard::data
