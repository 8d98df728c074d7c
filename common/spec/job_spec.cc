#include "common/spec/job_spec.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <set>

#include "common/spec/job_spec_fields.h"
#include "common/spec/job_spec_internal.h"

namespace trainyard::spec {

namespace internal {

std::string Num(double v) {
  if (v == std::numeric_limits<double>::infinity()) return "inf";
  char buf[32];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {  // 86400, not 8.64e+04
    std::snprintf(buf, sizeof(buf), "%.0f", v);
    return buf;
  }
  // The shortest text that reads back the same, so 0.1 prints as 0.1.
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

std::string IntRange(int64_t lo, int64_t hi) {
  return "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
}

std::string DoubleRange(double lo, double hi, bool lo_open, bool hi_open) {
  if (hi == kInf) return (lo_open ? "> " : ">= ") + Num(lo);
  return (lo_open ? "(" : "[") + Num(lo) + ", " + Num(hi) + (hi_open ? ")" : "]");
}

std::string RangeMessage(const std::string& range) {
  return (range[0] == '>' ? "must be finite and " : "must be in ") + range;
}

std::string Quote(const std::string& s) { return Json(s).Dump(); }

bool HasProblem(const Problems& problems, const std::string& path) {
  return std::any_of(problems.begin(), problems.end(), [&](const Problem& p) {
    const std::string& f = p.field;
    return f.compare(0, path.size(), path) == 0 &&
           (f.size() == path.size() || f[path.size()] == '[' || f[path.size()] == '.');
  });
}

Problem ValueProblem(const std::string& field, const std::string& value, const std::string& what) {
  return {field, what + " (got " + value + ")", field + " = " + value + ": " + what};
}

Problem FieldProblem(const std::string& field, const std::string& what) {
  return {field, what, field.empty() ? what : field + ": " + what};
}

}  // namespace internal

namespace {

using internal::IntRange;
using internal::kInf;
using internal::Num;
using internal::Problems;
using internal::RangeMessage;

// "batch_size" -> "batchSize": the proto JSON name of a field.
std::string CamelCase(std::string_view name) {
  std::string out;
  bool upper = false;
  for (char c : name) {
    if (c == '_') {
      upper = true;
    } else {
      out += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
      upper = false;
    }
  }
  return out;
}

std::string Join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + items[i];
  return out;
}

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      bool same = std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                  std::tolower(static_cast<unsigned char>(b[j - 1]));
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (same ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// A visitor of job_spec_fields.h that reads the fields of one JSON object (absent: every field
// keeps its default) into a spec struct, recording a problem for each bad value and, in
// Finish, for each unknown key.
class Reader {
 public:
  Reader(const Json* object, std::string path, Problems* problems)
      : object_(object), path_(std::move(path)), problems_(problems) {}

  void Int(const char* name, int64_t* out, int64_t lo, int64_t hi) {
    const Json* v = Take(name);
    if (v == nullptr) return;
    const std::string range = RangeMessage(IntRange(lo, hi));
    std::optional<int64_t> n = ToInt(*v);
    if (!n)
      return Problem(name, *v, BeyondInt64(*v) ? "out of range: " + range : "expected an integer");
    if (*n < lo || *n > hi) return Problem(name, *v, range);
    *out = *n;
  }
  void Int(const char* name, int* out, int lo, int hi) {
    int64_t wide = *out;
    Int(name, &wide, lo, hi);
    *out = static_cast<int>(wide);
  }
  void Uint64(const char* name, uint64_t* out) {
    const Json* v = Take(name);
    if (v == nullptr) return;
    if (v->is_integer() && v->int_value() >= 0) {
      *out = static_cast<uint64_t>(v->int_value());
    } else if (v->is_string() && !v->string_value().empty() && v->string_value().size() <= 20 &&
               std::all_of(v->string_value().begin(), v->string_value().end(),
                           [](char c) { return c >= '0' && c <= '9'; })) {
      errno = 0;
      unsigned long long n = std::strtoull(v->string_value().c_str(), nullptr, 10);
      if (errno == ERANGE)
        return Problem(name, *v, "out of range: must be in [0, 18446744073709551615]");
      *out = n;
    } else if (BeyondInt64(*v) || (v->is_integer() && v->int_value() < 0)) {
      Problem(name, *v, "out of range: must be in [0, 18446744073709551615]");
    } else {
      Problem(name, *v, "expected an integer in [0, 18446744073709551615]");
    }
  }
  // Finite values in [lo, hi], or [lo, hi) when hi_open; hi = inf means no upper bound.
  void Double(const char* name, double* out, double lo, double hi, bool hi_open = false) {
    const Json* v = Take(name);
    if (v == nullptr) return;
    std::optional<double> d = ToDouble(*v);
    if (!d) return Problem(name, *v, "expected a number");
    bool above = hi_open ? !(*d < hi) : *d > hi;
    if (!std::isfinite(*d) || *d < lo || above) {
      return Problem(name, *v, RangeMessage(internal::DoubleRange(lo, hi, false, hi_open)));
    }
    *out = *d;
  }
  // Finite values in (lo, hi].
  void DoubleAbove(const char* name, double* out, double lo, double hi) {
    const Json* v = Take(name);
    if (v == nullptr) return;
    std::optional<double> d = ToDouble(*v);
    if (!d) return Problem(name, *v, "expected a number");
    if (!std::isfinite(*d) || !(*d > lo) || *d > hi) {
      return Problem(name, *v, RangeMessage(internal::DoubleRange(lo, hi, true, false)));
    }
    *out = *d;
  }
  void Bool(const char* name, bool* out) {
    const Json* v = Take(name);
    if (v == nullptr) return;
    if (!v->is_bool()) return Problem(name, *v, "expected true or false");
    *out = v->bool_value();
  }
  void String(const char* name, std::string* out) {
    const Json* v = Take(name);
    if (v == nullptr) return;
    if (!v->is_string()) return Problem(name, *v, "expected a string");
    *out = v->string_value();
  }
  void Choice(const char* name, std::string* out, std::initializer_list<const char*> allowed) {
    const Json* v = Take(name);
    if (v == nullptr) return;
    std::vector<std::string> names;
    for (const char* a : allowed) {
      if (v->is_string() && v->string_value() == a) {
        *out = a;
        return;
      }
      names.push_back(std::string("\"") + a + "\"");
    }
    Problem(name, *v, (names.size() == 1 ? "allowed: " : "allowed: one of ") + Join(names, ", "));
  }
  void IntList(const char* name, std::vector<int64_t>* out, int64_t lo, int64_t hi) {
    const Json* v = Take(name);
    if (v == nullptr) return;
    if (!v->is_array()) return Problem(name, *v, "expected a list of integers");
    std::vector<int64_t> items;
    bool ok = true;
    for (size_t i = 0; i < v->size(); ++i) {
      std::string item = std::string(name) + "[" + std::to_string(i) + "]";
      std::optional<int64_t> n = ToInt((*v)[i]);
      if (!n) {
        Problem(item.c_str(), (*v)[i],
                BeyondInt64((*v)[i]) ? "out of range: " + RangeMessage(IntRange(lo, hi))
                                     : "expected an integer");
        ok = false;
      } else if (*n < lo || *n > hi) {
        Problem(item.c_str(), (*v)[i], RangeMessage(IntRange(lo, hi)));
        ok = false;
      } else {
        items.push_back(*n);
      }
    }
    if (ok) *out = std::move(items);
  }
  void StringList(const char* name, std::vector<std::string>* out) {
    const Json* v = Take(name);
    if (v == nullptr) return;
    if (!v->is_array()) return Problem(name, *v, "expected a list of strings");
    std::vector<std::string> items;
    for (size_t i = 0; i < v->size(); ++i) {
      const std::string item = std::string(name) + "[" + std::to_string(i) + "]";
      if (!(*v)[i].is_string()) {
        Problem(item.c_str(), (*v)[i], "expected a string");
      } else {
        items.push_back((*v)[i].string_value());
      }
    }
    if (items.size() == v->size()) *out = std::move(items);
  }
  // A list of messages, each read by visit(Reader&, T&) at "name[i]".
  template <typename T, typename F>
  void MessageList(const char* name, std::vector<T>* out, const F& visit) {
    const Json* v = Take(name);
    if (v == nullptr) return;
    if (!v->is_array()) return Problem(name, *v, "expected a list of objects (messages)");
    std::vector<T> items(v->size());
    for (size_t i = 0; i < v->size(); ++i) {
      const std::string item = std::string(name) + "[" + std::to_string(i) + "]";
      if (!(*v)[i].is_object()) {
        Problem(item.c_str(), (*v)[i], "expected an object (a message)");
        continue;
      }
      Reader sub(&(*v)[i], Path(item), problems_);
      visit(sub, items[i]);
      sub.Finish();
    }
    *out = std::move(items);
  }
  // A nested message: `visit` reads it when present. `selected` matters only to the Writer.
  void Message(const char* name, bool /*selected*/, const std::function<void(Reader&)>& visit) {
    const Json* v = Take(name);
    if (v == nullptr) return;
    if (!v->is_object()) return Problem(name, *v, "expected an object (a message)");
    Reader sub(v, Path(name), problems_);
    visit(sub);
    sub.Finish();
  }
  // A oneof: sets *out to the member present. Two members present is a problem; none leaves
  // *out as it was, a problem when `required`.
  void OneOf(std::string* out, std::initializer_list<const char*> members, bool required) {
    std::vector<std::string> found, all;
    for (const char* m : members) {
      all.push_back(m);
      const Json* v = Find(m);
      if (v != nullptr && !v->is_null()) found.push_back(m);
    }
    if (found.size() > 1) {
      Add(internal::FieldProblem(
          path_, "set only one of " + Join(all, ", ") + " (found " + Join(found, " and ") + ")"));
    } else if (found.size() == 1) {
      *out = found[0];
    } else if (required) {
      Add(internal::FieldProblem(path_, "required: set one of " + Join(all, ", ")));
    }
  }
  // Records every key not taken by a field as a problem.
  void Finish() {
    if (object_ == nullptr) return;
    for (const auto& [key, value] : object_->members()) {
      if (taken_.count(key)) continue;
      std::string best;
      size_t best_distance = 3;
      for (const std::string& known : known_) {
        // Keys far longer than any field name cannot be near one (and would cost time).
        if (key.size() > known.size() + best_distance) continue;
        size_t d = std::min(EditDistance(key, known), EditDistance(key, CamelCase(known)));
        if (d < best_distance) best_distance = d, best = known;
      }
      const std::string hint = best.empty() ? "" : " (did you mean " + best + "?)";
      const std::string allowed = known_.empty() ? std::string("none") : Join(known_, ", ");
      Add({Path(key), "unknown field" + hint,
           "unknown field " + Path(key) + hint + "; allowed: " + allowed});
    }
  }

  std::string Path(std::string_view name) const {
    return path_.empty() ? std::string(name) : path_ + "." + std::string(name);
  }
  void Add(internal::Problem p) { problems_->push_back(std::move(p)); }

 private:
  // The value of field `name` (snake_case or lowerCamelCase key), nullptr when absent or
  // null; marks the key as known and used. Both spellings present is a problem.
  const Json* Take(const char* name) {
    known_.push_back(name);
    if (object_ == nullptr) return nullptr;
    const Json* snake = object_->Find(name);
    std::string camel = CamelCase(name);
    const Json* lower = camel == name ? nullptr : object_->Find(camel);
    if (snake) taken_.insert(name);
    if (lower) taken_.insert(camel);
    if (snake && lower) {
      Add(internal::FieldProblem(Path(name),
                                 std::string("set twice, as ") + name + " and " + camel));
      return nullptr;
    }
    const Json* v = snake ? snake : lower;
    return v == nullptr || v->is_null() ? nullptr : v;
  }
  const Json* Find(const char* name) const {
    if (object_ == nullptr) return nullptr;
    if (const Json* v = object_->Find(name)) return v;
    return object_->Find(CamelCase(name));
  }
  void Problem(const char* name, const Json& value, const std::string& what) {
    // NaN and infinities have no JSON text (Dump writes null).
    std::string text = value.is_number() && !std::isfinite(value.number_value())
                           ? Num(value.number_value())
                           : value.Dump();
    if (text.size() > 60) text = text.substr(0, 57) + "...";
    Add(internal::ValueProblem(Path(name), text, what));
  }
  // An integer too large for int64: a number with an integral (or infinite) value beyond it,
  // or a string of more digits than it holds (the proto JSON form of int64).
  static bool BeyondInt64(const Json& v) {
    if (v.is_number() && !v.is_integer()) {
      const double d = v.number_value();
      return !std::isnan(d) && (std::isinf(d) || (d == std::floor(d) && std::fabs(d) >= 9.2e18));
    }
    if (!v.is_string()) return false;
    const std::string& s = v.string_value();
    const size_t sign = !s.empty() && (s[0] == '-' || s[0] == '+');
    return s.size() > sign + 18 &&
           std::all_of(s.begin() + static_cast<std::ptrdiff_t>(sign), s.end(),
                       [](char c) { return c >= '0' && c <= '9'; });
  }
  static std::optional<int64_t> ToInt(const Json& v) {
    if (v.is_integer()) return v.int_value();
    if (v.is_number()) {
      double d = v.number_value();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2e18) {
        return static_cast<int64_t>(d);
      }
      return std::nullopt;
    }
    if (v.is_string()) {  // the proto JSON form of 64-bit integers
      const std::string& s = v.string_value();
      if (s.empty() || s.size() > 20) return std::nullopt;
      char* end = nullptr;
      errno = 0;
      long long n = std::strtoll(s.c_str(), &end, 10);
      if (errno == 0 && end == s.c_str() + s.size() &&
          !std::isspace(static_cast<unsigned char>(s[0]))) {
        return n;
      }
    }
    return std::nullopt;
  }
  static std::optional<double> ToDouble(const Json& v) {
    if (v.is_number()) return v.number_value();
    if (v.is_string()) {  // proto JSON: "NaN", "Infinity" or a number in a string
      const std::string& s = v.string_value();
      if (s == "NaN") return std::nan("");
      if (s == "Infinity") return kInf;
      if (s == "-Infinity") return -kInf;
      char* end = nullptr;
      double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && end == s.c_str() + s.size() &&
          !std::isspace(static_cast<unsigned char>(s[0]))) {
        return d;
      }
    }
    return std::nullopt;
  }

  const Json* object_;
  std::string path_;
  Problems* problems_;
  std::vector<std::string> known_;
  std::set<std::string> taken_;
};

// A visitor of job_spec_fields.h that writes every field of a spec struct into a JSON object,
// with the .proto's names.
class Writer {
 public:
  explicit Writer(Json* object) : object_(object) { *object_ = Json::Object(); }

  void Int(const char* name, int64_t* v, int64_t, int64_t) { object_->Set(name, *v); }
  void Int(const char* name, int* v, int, int) { object_->Set(name, *v); }
  void Uint64(const char* name, uint64_t* v) {
    // The proto JSON form: a number when exact everywhere, else a decimal string.
    if (*v <= (uint64_t{1} << 53)) {
      object_->Set(name, static_cast<int64_t>(*v));
    } else {
      object_->Set(name, std::to_string(*v));
    }
  }
  void Double(const char* name, double* v, double, double, bool = false) { object_->Set(name, *v); }
  void DoubleAbove(const char* name, double* v, double, double) { object_->Set(name, *v); }
  void Bool(const char* name, bool* v) { object_->Set(name, *v); }
  void String(const char* name, std::string* v) { object_->Set(name, *v); }
  void Choice(const char* name, std::string* v, std::initializer_list<const char*>) {
    object_->Set(name, *v);
  }
  void IntList(const char* name, std::vector<int64_t>* v, int64_t, int64_t) {
    Json::Items items(v->begin(), v->end());
    object_->Set(name, Json::Array(std::move(items)));
  }
  void StringList(const char* name, std::vector<std::string>* v) {
    Json::Items items(v->begin(), v->end());
    object_->Set(name, Json::Array(std::move(items)));
  }
  template <typename T, typename F>
  void MessageList(const char* name, std::vector<T>* v, const F& visit) {
    Json::Items items;
    for (T& item : *v) {
      Json sub;
      Writer w(&sub);
      visit(w, item);
      items.push_back(std::move(sub));
    }
    object_->Set(name, Json::Array(std::move(items)));
  }
  void Message(const char* name, bool selected, const std::function<void(Writer&)>& visit) {
    if (!selected) return;
    Json sub;
    Writer w(&sub);
    visit(w);
    object_->Set(name, std::move(sub));
  }
  void OneOf(std::string*, std::initializer_list<const char*>, bool) {}

 private:
  Json* object_;
};

// Note [Errors that arrive whole] (proto/rpc.h): the message lists the first problems in full
// within kMessageBytes, then "and N more"; the field violations list them all (up to
// kMaxViolations), each with its field path, for programs.
Status ProblemsStatus(const Problems& problems) {
  constexpr size_t kMessageBytes = 1400;
  constexpr size_t kMaxViolations = 1000;
  std::string text = "invalid job spec (" + std::to_string(problems.size()) +
                     (problems.size() == 1 ? " problem):" : " problems):");
  size_t shown = 0;
  for (; shown < problems.size(); ++shown) {
    std::string line = "\n  " + problems[shown].line;
    if (text.size() + line.size() > kMessageBytes && shown > 0) break;
    if (line.size() > kMessageBytes / 2) line = line.substr(0, kMessageBytes / 2) + "...";
    text += line;
  }
  if (shown < problems.size()) {
    text += "\n  and " + std::to_string(problems.size() - shown) + " more";
  }
  std::vector<FieldViolation> violations;
  for (size_t i = 0; i < problems.size() && i < kMaxViolations; ++i) {
    violations.push_back({problems[i].field, problems[i].description});
  }
  if (problems.size() > kMaxViolations) {
    violations.push_back({"", "and " + std::to_string(problems.size() - kMaxViolations) + " more"});
  }
  return InvalidArgumentError(text).WithFieldViolations(std::move(violations));
}

}  // namespace

std::string ResolvedBackend(const JobSpec& spec) {
  if (spec.parallelism.backend != "auto") return spec.parallelism.backend;
  return spec.device == "cuda" ? "nccl" : "gloo";
}

int64_t SequenceLength(const ModelSpec& m) {
  if (m.arch == "gpt") return m.gpt.context;
  if (m.arch == "llama") return m.llama.context;
  const GraphInputSpec& in = m.graph.input;
  if (m.arch == "graph" && in.dtype == "int64" && in.shape.size() == 1) return in.shape[0];
  return 0;
}

int MinWorldSize(const ParallelismSpec& p) {
  return p.min_world_size > 0 ? p.min_world_size : p.world_size;
}
int MaxWorldSize(const ParallelismSpec& p) {
  return p.max_world_size > 0 ? p.max_world_size : p.world_size;
}
bool IsElastic(const ParallelismSpec& p) {
  return MinWorldSize(p) != p.world_size || MaxWorldSize(p) != p.world_size;
}

double OptimizerSpec::lr() const {
  if (kind == "sgd") return sgd.lr;
  if (kind == "adam") return adam.lr;
  return adamw.lr;
}

StatusOr<JobSpec> ParseJobSpec(const Json& json) {
  if (!json.is_object()) {
    return InvalidArgumentError("invalid job spec: expected an object (a mapping of fields), got " +
                                json.Dump().substr(0, 60));
  }
  JobSpec spec;
  Problems problems;
  Reader reader(&json, "", &problems);
  internal::VisitJob(reader, spec);
  reader.Finish();
  // A required message that is absent was never visited; its oneof says what is missing.
  for (const char* required : {"model", "data", "optimizer"}) {
    if (json.Find(required) == nullptr || json.Find(required)->is_null()) {
      problems.push_back(internal::FieldProblem(required, "required"));
    }
  }
  internal::CheckRelations(spec, &problems);
  if (!problems.empty()) return ProblemsStatus(problems);
  return spec;
}

StatusOr<GraphSpec> ParseGraphSpec(const Json& json) {
  if (!json.is_object()) {
    return InvalidArgumentError("invalid model graph: expected an object, got " +
                                json.Dump().substr(0, 60));
  }
  GraphSpec graph;
  Problems problems;
  Reader reader(&json, "model.graph", &problems);
  internal::VisitGraph(reader, graph);
  reader.Finish();
  CompiledGraph compiled;
  if (problems.empty()) internal::CheckGraph(graph, &problems, &compiled);
  if (!problems.empty()) return ProblemsStatus(problems);
  return graph;
}

Json ToJson(const JobSpec& spec) {
  JobSpec copy = spec;
  Json out;
  Writer writer(&out);
  internal::VisitJob(writer, copy);
  // Steps or epochs: only the one in use (the other is 0, outside its range).
  Json::Members members;
  for (const auto& [key, value] : out.members()) {
    if (key != (copy.steps > 0 ? "epochs" : "steps")) members.emplace_back(key, value);
  }
  return Json::Object(std::move(members));
}

}  // namespace trainyard::spec
