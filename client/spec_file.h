// Job spec files as the CLI reads them: YAML (or JSON, by the .json extension), plus
// `--set path=value` overrides, parsed and validated into a spec::JobSpec.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "common/status.h"
#include "proto/job_spec.h"

namespace trainyard::client {

// The file's contents as Json. Errors name the path (and line and column for syntax errors).
StatusOr<Json> ReadSpecFile(const std::string& path);

// Applies one "dotted.path=value" override, creating the mappings on the way; the value is
// typed as a plain YAML scalar ("steps=200" sets the integer 200). InvalidArgument for a
// missing '=', an empty path or a path through a non-mapping.
Status ApplyOverride(std::string_view assignment, Json* spec);

// ReadSpecFile, every override in order, then spec::ParseJobSpec.
StatusOr<spec::JobSpec> LoadJobSpec(const std::string& path, const std::vector<std::string>& overrides);

}  // namespace trainyard::client
