// YAML job specs: one YAML document turned into the Json the spec reader takes
// (common/spec/job_spec.h), so YAML and JSON specs go through the same checks.
//
// Scalars follow the YAML 1.2 core schema: plain (unquoted) scalars are null (~, null, empty),
// booleans (true, false, in any of YAML's three casings), integers (decimal, 0x hex, 0o octal),
// floats (1.5, 1e-3, .inf, .nan) or else strings; quoted and block scalars are always strings;
// an explicit !!str, !!int, !!float, !!bool or !!null tag is obeyed. An integer beyond int64
// becomes the nearest double (inf beyond that), which the spec's range checks refuse. Anchors
// and aliases work; mapping keys must be scalars and unique.
//
// Hostile text is refused, not obeyed: nesting deeper than 256 and anchors and aliases that
// copy more than 100 000 values or 16 MiB of strings in all ("billion laughs"; Note [Alias
// budget] in yaml.cc) are InvalidArgument. Otherwise time and memory are linear in the text,
// whose size is the caller's to bound (ReadSpecFile allows 1 MiB).
#pragma once

#include <string>
#include <string_view>

#include "common/json.h"
#include "common/status.h"

namespace trainyard::client {

// Parses exactly one YAML document (an empty text is an error). InvalidArgument names
// `source`, the line and the column: "spec.yaml:3:1: duplicate key \"lr\"".
StatusOr<Json> ParseYaml(std::string_view text, const std::string& source);

// One plain scalar typed as above ("3" -> 3, "0.1" -> 0.1, "true" -> true, "abc" -> "abc"):
// the value of a --set key=value override.
Json ParsePlainScalar(std::string_view text);

}  // namespace trainyard::client
