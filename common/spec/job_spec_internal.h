// Shared by the source files of ty_spec (job_spec.cc, job_spec_rules.cc); not its API.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/spec/job_spec.h"

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
// `s` as a JSON string, quotes and escapes included.
std::string Quote(const std::string& s);
// Whether a problem was already recorded for `path` or a field inside it.
bool HasProblem(const Problems& problems, const std::string& path);

// Appends a line for each broken rule that relates two fields, or a field and the data it
// describes (job_spec_rules.cc). A field that already has a problem is not checked again.
// Makes epochs 1 when neither steps nor epochs is set.
void CheckRelations(JobSpec& spec, Problems* problems);

}  // namespace trainyard::spec::internal
