// Job spec files as the CLI reads them: YAML (or JSON, by the .json extension), plus
// `--set path=value` overrides, parsed and validated into a spec::JobSpec.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "common/spec/job_spec.h"
#include "common/status.h"

namespace trainyard::client {

// The most a spec file may hold, as the service allows (CoordinatorOptions::max_spec_bytes).
inline constexpr size_t kMaxSpecFileBytes = size_t{1} << 20;

// The file's contents as Json. Errors name the path (and line and column for syntax errors).
// A file over kMaxSpecFileBytes is InvalidArgument; at most one byte more is read, so a pipe
// (/dev/stdin) works and an endless one (/dev/zero) is refused.
StatusOr<Json> ReadSpecFile(const std::string& path);

// Applies one "dotted.path=value" override, creating the mappings on the way; the value is
// typed as a plain YAML scalar ("steps=200" sets the integer 200). InvalidArgument for a
// missing '=', an empty path or a path through a non-mapping.
Status ApplyOverride(std::string_view assignment, Json* spec);

// ReadSpecFile, then every override in order: the spec before validation.
StatusOr<Json> LoadSpecJson(const std::string& path, const std::vector<std::string>& overrides);

// LoadSpecJson, then spec::ParseJobSpec (errors start with `path`).
StatusOr<spec::JobSpec> LoadJobSpec(const std::string& path,
                                    const std::vector<std::string>& overrides);
StatusOr<spec::JobSpec> ParseSpecJson(const std::string& path, const Json& json);

// Whether `json` sets the field at the dotted snake_case `path` ("parallelism.world_size") to
// something other than null, under either its snake_case or its lowerCamelCase name.
bool SetsField(const Json& json, std::string_view path);

}  // namespace trainyard::client
