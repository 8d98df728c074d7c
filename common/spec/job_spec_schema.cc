// DescribeFields: the field visitors (job_spec_fields.h) read back as a list, for the test that
// proves them equal to job.proto (tests/common/spec/job_spec_schema_test.cc).
#include <functional>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "common/spec/job_spec_fields.h"
#include "common/spec/job_spec_internal.h"

namespace trainyard::spec::internal {
namespace {

// Records every field it is shown, with the value it holds (a default-constructed struct's:
// the default) and the range or values the Reader allows; visits every message, oneof members
// included.
class Describer {
 public:
  Describer(std::string path, std::vector<FieldRule>* out) : path_(std::move(path)), out_(out) {}

  void Int(const char* name, int64_t* v, int64_t lo, int64_t hi) {
    Add(name, Json(*v), IntRange(lo, hi));
  }
  void Int(const char* name, int* v, int lo, int hi) { Add(name, Json(*v), IntRange(lo, hi)); }
  void Uint64(const char* name, uint64_t* v) { Add(name, Json(*v), ""); }
  void Double(const char* name, double* v, double lo, double hi, bool hi_open = false) {
    Add(name, Json(*v), DoubleRange(lo, hi, /*lo_open=*/false, hi_open));
  }
  void DoubleAbove(const char* name, double* v, double lo, double hi) {
    Add(name, Json(*v), DoubleRange(lo, hi, /*lo_open=*/true, /*hi_open=*/false));
  }
  void Bool(const char* name, bool* v) { Add(name, Json(*v), ""); }
  void String(const char* name, std::string* v) { Add(name, Json(*v), ""); }
  void Choice(const char* name, std::string* v, std::initializer_list<const char*> allowed) {
    Add(name, Json(*v), "");
    out_->back().allowed.assign(allowed.begin(), allowed.end());
  }
  void IntList(const char* name, std::vector<int64_t>* v, int64_t lo, int64_t hi) {
    Add(name, Json::Array(Json::Items(v->begin(), v->end())), IntRange(lo, hi));
  }
  void StringList(const char* name, std::vector<std::string>* v) {
    Add(name, Json::Array(Json::Items(v->begin(), v->end())), "");
  }
  // A list's entries are described once, at "name[]".
  template <typename T, typename F>
  void MessageList(const char* name, std::vector<T>*, const F& visit) {
    out_->push_back({Path(name), /*message=*/true, Json(), "", {}});
    T item;
    Describer sub(Path(name) + "[]", out_);
    visit(sub, item);
  }
  void Message(const char* name, bool /*selected*/, const std::function<void(Describer&)>& visit) {
    out_->push_back({Path(name), /*message=*/true, Json(), "", {}});
    Describer sub(Path(name), out_);
    visit(sub);
  }
  void OneOf(std::string*, std::initializer_list<const char*>, bool) {}

 private:
  std::string Path(const char* name) const {
    return path_.empty() ? std::string(name) : path_ + "." + name;
  }
  void Add(const char* name, Json value, std::string range) {
    out_->push_back({Path(name), /*message=*/false, std::move(value), std::move(range), {}});
  }

  std::string path_;
  std::vector<FieldRule>* out_;
};

}  // namespace

std::vector<FieldRule> DescribeFields() {
  JobSpec defaults;
  std::vector<FieldRule> fields;
  Describer describer("", &fields);
  VisitJob(describer, defaults);
  return fields;
}

}  // namespace trainyard::spec::internal
