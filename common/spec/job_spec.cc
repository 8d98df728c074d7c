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

using internal::Num;
using internal::Problems;
using internal::kMaxSteps;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int64_t kMaxBatch = 1 << 20;
constexpr int64_t kMaxWidth = 1 << 20;
constexpr int kMaxWorldSize = 4096;

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

// Reads the fields of one JSON object (absent: every field keeps its default) into a spec
// struct, recording a problem for each bad value and, in Finish, for each unknown key.
class Reader {
 public:
  Reader(const Json* object, std::string path, Problems* problems)
      : object_(object), path_(std::move(path)), problems_(problems) {}

  void Int(const char* name, int64_t* out, int64_t lo, int64_t hi) {
    const Json* v = Take(name);
    if (v == nullptr) return;
    const std::string range = "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
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
    } else if (v->is_string() && !v->string_value().empty() &&
               v->string_value().size() <= 20 &&
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
      std::string allowed = hi == kInf ? "must be finite and >= " + Num(lo)
                                       : "must be in [" + Num(lo) + ", " + Num(hi) +
                                             (hi_open ? ")" : "]");
      return Problem(name, *v, allowed);
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
      return Problem(name, *v, "must be in (" + Num(lo) + ", " + Num(hi) + "]");
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
                BeyondInt64((*v)[i]) ? "out of range: must be in [" + std::to_string(lo) + ", " +
                                           std::to_string(hi) + "]"
                                     : "expected an integer");
        ok = false;
      } else if (*n < lo || *n > hi) {
        Problem(item.c_str(), (*v)[i],
                "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
        ok = false;
      } else {
        items.push_back(*n);
      }
    }
    if (ok) *out = std::move(items);
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
      if (errno == 0 && end == s.c_str() + s.size() && !std::isspace(static_cast<unsigned char>(s[0]))) {
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
      if (!s.empty() && end == s.c_str() + s.size() && !std::isspace(static_cast<unsigned char>(s[0]))) {
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

// Writes every field of a spec struct into a JSON object, with the .proto's names.
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

// One description of every message, used by both Reader and Writer. Ranges follow job.proto.
template <typename V>
void VisitMlp(V& v, MlpSpec& s) {
  v.IntList("sizes", &s.sizes, 1, kMaxWidth);
  v.Choice("activation", &s.activation, {"relu", "gelu", "tanh"});
  v.Double("dropout", &s.dropout, 0, 1, /*hi_open=*/true);
}

template <typename V>
void VisitCnn(V& v, CnnSpec& s) {
  v.Int("in_channels", &s.in_channels, 1, 4096);
  v.Int("image_size", &s.image_size, 4, 4096);
  v.Int("num_classes", &s.num_classes, 1, kMaxWidth);
  v.Int("channels1", &s.channels1, 1, 4096);
  v.Int("channels2", &s.channels2, 1, 4096);
  v.Int("hidden", &s.hidden, 1, kMaxWidth);
  v.Double("dropout", &s.dropout, 0, 1, /*hi_open=*/true);
}

template <typename V>
void VisitResNet(V& v, ResNetSpec& s) {
  v.Int("in_channels", &s.in_channels, 1, 4096);
  v.Int("num_classes", &s.num_classes, 1, kMaxWidth);
  v.Int("base_width", &s.base_width, 1, 4096);
  v.IntList("blocks", &s.blocks, 1, 64);
}

template <typename V>
void VisitGpt(V& v, GptSpec& s) {
  v.Int("vocab_size", &s.vocab_size, 0, 65536);
  v.Int("context", &s.context, 1, 65536);
  v.Int("n_layer", &s.n_layer, 1, 1024);
  v.Int("n_head", &s.n_head, 1, 1024);
  v.Int("n_embd", &s.n_embd, 1, 65536);
  v.Double("dropout", &s.dropout, 0, 1, /*hi_open=*/true);
  v.Bool("bias", &s.bias);
}

template <typename V>
void VisitModel(V& v, ModelSpec& s) {
  v.OneOf(&s.arch, {"mlp", "cnn", "resnet", "gpt"}, /*required=*/true);
  v.Message("mlp", s.arch == "mlp", [&](V& m) { VisitMlp(m, s.mlp); });
  v.Message("cnn", s.arch == "cnn", [&](V& m) { VisitCnn(m, s.cnn); });
  v.Message("resnet", s.arch == "resnet", [&](V& m) { VisitResNet(m, s.resnet); });
  v.Message("gpt", s.arch == "gpt", [&](V& m) { VisitGpt(m, s.gpt); });
}

template <typename V>
void VisitData(V& v, DataSpec& s) {
  v.OneOf(&s.source, {"fashion_mnist", "text", "tokens", "csv"}, /*required=*/true);
  v.Message("fashion_mnist", s.source == "fashion_mnist", [&](V& m) {
    m.String("dir", &s.fashion_mnist.dir);
    m.Bool("normalize", &s.fashion_mnist.normalize);
    m.Int("limit", &s.fashion_mnist.limit, 0, 60000);
  });
  v.Message("text", s.source == "text", [&](V& m) {
    m.String("path", &s.text.path);
    m.Choice("vocabulary", &s.text.vocabulary, {"char", "byte"});
    m.Double("eval_fraction", &s.text.eval_fraction, 0, 0.5);
  });
  v.Message("tokens", s.source == "tokens", [&](V& m) {
    m.String("path", &s.tokens.path);
    m.Double("eval_fraction", &s.tokens.eval_fraction, 0, 0.5);
  });
  v.Message("csv", s.source == "csv", [&](V& m) {
    m.String("path", &s.csv.path);
    m.Bool("header", &s.csv.header);
    m.Int("label_column", &s.csv.label_column, -65536, 65535);
    m.Choice("delimiter", &s.csv.delimiter, {",", ";", "\t", " "});
    m.Double("eval_fraction", &s.csv.eval_fraction, 0, 0.5);
  });
  v.Bool("shuffle", &s.shuffle);
  v.Int("num_workers", &s.num_workers, 0, 64);
  v.Int("prefetch", &s.prefetch, 1, 64);
  v.Bool("drop_last", &s.drop_last);
}

template <typename V>
void VisitAdam(V& v, AdamSpec& s) {
  v.Double("lr", &s.lr, 0, kInf);
  v.Double("beta1", &s.beta1, 0, 1, /*hi_open=*/true);
  v.Double("beta2", &s.beta2, 0, 1, /*hi_open=*/true);
  v.Double("eps", &s.eps, 0, kInf);
  v.Double("weight_decay", &s.weight_decay, 0, kInf);
}

template <typename V>
void VisitOptimizer(V& v, OptimizerSpec& s) {
  v.OneOf(&s.kind, {"sgd", "adam", "adamw"}, /*required=*/true);
  v.Message("sgd", s.kind == "sgd", [&](V& m) {
    m.Double("lr", &s.sgd.lr, 0, kInf);
    m.Double("momentum", &s.sgd.momentum, 0, 1);
    m.Double("dampening", &s.sgd.dampening, 0, 1);
    m.Bool("nesterov", &s.sgd.nesterov);
    m.Double("weight_decay", &s.sgd.weight_decay, 0, kInf);
  });
  v.Message("adam", s.kind == "adam", [&](V& m) { VisitAdam(m, s.adam); });
  v.Message("adamw", s.kind == "adamw", [&](V& m) { VisitAdam(m, s.adamw); });
}

template <typename V>
void VisitSchedule(V& v, ScheduleSpec& s) {
  v.OneOf(&s.kind, {"constant", "step", "cosine"}, /*required=*/false);
  v.Message("constant", s.kind == "constant", [](V&) {});
  v.Message("step", s.kind == "step", [&](V& m) {
    m.Int("step_size", &s.step.step_size, 1, kMaxSteps);
    m.Double("gamma", &s.step.gamma, 0, kInf);
  });
  v.Message("cosine", s.kind == "cosine", [&](V& m) {
    m.Int("warmup_steps", &s.cosine.warmup_steps, 0, kMaxSteps);
    m.Int("total_steps", &s.cosine.total_steps, 0, kMaxSteps);
    m.Double("min_lr", &s.cosine.min_lr, 0, kInf);
  });
}

template <typename V>
void VisitParallelism(V& v, ParallelismSpec& s) {
  v.Int("world_size", &s.world_size, 1, kMaxWorldSize);
  v.Int("ranks_per_node", &s.ranks_per_node, 0, kMaxWorldSize);
  v.Choice("backend", &s.backend, {"auto", "gloo", "nccl"});
  v.DoubleAbove("bucket_size_mb", &s.bucket_size_mb, 0, 1024);
  v.DoubleAbove("first_bucket_size_mb", &s.first_bucket_size_mb, 0, 1024);
  v.Int("grad_accumulation_steps", &s.grad_accumulation_steps, 1, 1'000'000);
  v.Int("zero_stage", &s.zero_stage, 0, 1);
  v.Bool("activation_checkpointing", &s.activation_checkpointing);
  v.DoubleAbove("collective_timeout_seconds", &s.collective_timeout_seconds, 0, 86400);
  v.Bool("find_unused_parameters", &s.find_unused_parameters);
  v.Choice("grad_compression", &s.grad_compression, {"none", "bf16", "fp16"});
  v.Choice("all_reduce_algorithm", &s.all_reduce_algorithm, {"ring", "ring_chunked"});
}

template <typename V>
void VisitJob(V& v, JobSpec& s) {
  v.String("name", &s.name);
  v.Message("model", true, [&](V& m) { VisitModel(m, s.model); });
  v.Message("data", true, [&](V& m) { VisitData(m, s.data); });
  v.Message("optimizer", true, [&](V& m) { VisitOptimizer(m, s.optimizer); });
  v.Message("schedule", true, [&](V& m) { VisitSchedule(m, s.schedule); });
  v.Int("batch_size", &s.batch_size, 1, kMaxBatch);
  v.Int("steps", &s.steps, 1, kMaxSteps);
  v.Int("epochs", &s.epochs, 1, 1'000'000);
  v.Message("eval", true, [&](V& m) {
    m.Int("every_steps", &s.eval.every_steps, 0, kMaxSteps);
    m.Int("max_batches", &s.eval.max_batches, 0, kMaxSteps);
    m.Int("batch_size", &s.eval.batch_size, 0, kMaxBatch);
  });
  v.Choice("precision", &s.precision, {"fp32", "bf16", "fp16"});
  v.Choice("device", &s.device, {"cpu", "cuda"});
  v.Uint64("seed", &s.seed);
  v.Message("checkpoint", true, [&](V& m) {
    m.String("dir", &s.checkpoint.dir);
    m.Int("every_steps", &s.checkpoint.every_steps, 0, kMaxSteps);
    m.Int("keep_last", &s.checkpoint.keep_last, 0, 1'000'000);
    m.Bool("resume", &s.checkpoint.resume);
    m.String("init_from", &s.checkpoint.init_from);
    m.String("resume_from", &s.checkpoint.resume_from);
  });
  v.Double("grad_clip_norm", &s.grad_clip_norm, 0, kInf);
  v.Int("num_threads", &s.num_threads, 0, 1024);
  v.Message("parallelism", true, [&](V& m) { VisitParallelism(m, s.parallelism); });
  v.Message("fault_tolerance", true, [&](V& m) {
    m.Int("max_restarts", &s.fault_tolerance.max_restarts, 0, 1000);
    m.DoubleAbove("hang_timeout_seconds", &s.fault_tolerance.hang_timeout_seconds, 0, 86400);
    m.DoubleAbove("straggler_factor", &s.fault_tolerance.straggler_factor, 1, 1000);
    m.Int("straggler_window_steps", &s.fault_tolerance.straggler_window_steps, 1, 100000);
  });
  v.Int("priority", &s.priority, -1000, 1000);
}

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
  VisitJob(reader, spec);
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

Json ToJson(const JobSpec& spec) {
  JobSpec copy = spec;
  Json out;
  Writer writer(&out);
  VisitJob(writer, copy);
  // Steps or epochs: only the one in use (the other is 0, outside its range).
  Json::Members members;
  for (const auto& [key, value] : out.members()) {
    if (key != (copy.steps > 0 ? "epochs" : "steps")) members.emplace_back(key, value);
  }
  return Json::Object(std::move(members));
}

}  // namespace trainyard::spec
