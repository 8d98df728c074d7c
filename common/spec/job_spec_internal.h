// Shared by the source files of ty_spec (job_spec.cc, job_spec_rules.cc, job_spec_schema.cc)
// and its tests; not its API.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/json.h"
#include "common/spec/job_spec.h"
#include "common/spec/model_graph.h"

namespace trainyard::spec::internal {

inline constexpr int64_t kMaxSteps = 1'000'000'000'000;  // 10^12

// One problem of a spec: the field it is about, a short description (a field violation's),
// and the whole line the message shows ("path = value: what is allowed").
struct Problem {
  std::string field;  // "model.gpt.n_head"; "" for the spec as a whole
  std::string description;
  std::string line;
};
using Problems = std::vector<Problem>;

// "field = value: what" (description "what (got value)"), and "field: what".
Problem ValueProblem(const std::string& field, const std::string& value, const std::string& what);
Problem FieldProblem(const std::string& field, const std::string& what);

// The shortest text that reads back as `v` (0.1 prints as 0.1); "inf" for infinity.
std::string Num(double v);
// A range as job.proto's (range) options write it: "[lo, hi]" for integers; "[lo, hi]",
// "(lo, hi]" or "[lo, hi)" for floating point, or ">= lo" when hi is infinite.
std::string IntRange(int64_t lo, int64_t hi);
std::string DoubleRange(double lo, double hi, bool lo_open, bool hi_open);
// What the reader says of a value outside `range`: "must be in [1, 4096]", "must be finite and
// >= 0" (floating point values must be finite whatever their range).
std::string RangeMessage(const std::string& range);
// `s` as a JSON string, quotes and escapes included.
std::string Quote(const std::string& s);
// Whether a problem was already recorded for `path` or a field inside it.
bool HasProblem(const Problems& problems, const std::string& path);

// One field of the spec as the reader applies it: a message field, or a value with the default
// of job_spec.h's struct, the range it must lie in and the strings it may be.
struct FieldRule {
  std::string path;  // "model.gpt.n_head"; oneof members too ("optimizer.adamw.lr")
  bool message = false;
  Json default_value;                // an int list's as an array
  std::string range;                 // as IntRange or DoubleRange write it; "" for any
  std::vector<std::string> allowed;  // a string's values; empty for any
};
// Every field of the spec, in the order the reader visits them (job_spec_schema.cc), for the
// test that proves them equal to job.proto's fields and options.
std::vector<FieldRule> DescribeFields();

// Checks a model graph (model_graph.cc), appending its problems; fills `out` when none.
void CheckGraph(const GraphSpec& graph, Problems* problems, CompiledGraph* out);

// Appends a line for each broken rule that relates two fields, or a field and the data it
// describes (job_spec_rules.cc). A field that already has a problem is not checked again.
// Makes epochs 1 when neither steps nor epochs is set.
void CheckRelations(JobSpec& spec, Problems* problems);

}  // namespace trainyard::spec::internal
