// Helpers for the job spec tests: JSON from text, a small valid spec, a spec's problems, and
// setting a value at a dotted path.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "common/json.h"
#include "common/spec/job_spec.h"

namespace trainyard::spec::testing {

inline Json ParseOrDie(const std::string& text) {
  StatusOr<Json> json = Json::Parse(text);
  EXPECT_TRUE(json.ok()) << json.status();
  return json.ok() ? *json : Json();
}

// A small valid spec; tests change one thing at a time.
inline Json Minimal() {
  return ParseOrDie(R"({
    "model": {"mlp": {"sizes": [784, 128, 10]}},
    "data": {"fashion_mnist": {}},
    "optimizer": {"sgd": {"lr": 0.1, "momentum": 0.9}}
  })");
}

// The message of the InvalidArgument that ParseJobSpec must answer `json` with.
inline std::string ProblemsOf(const Json& json) {
  StatusOr<JobSpec> spec = ParseJobSpec(json);
  EXPECT_FALSE(spec.ok()) << "accepted " << json.Dump();
  if (spec.ok()) return "";
  EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument);
  return std::string(spec.status().message());
}

// Sets the value at a dotted path, creating objects on the way.
inline void SetPath(Json* json, const std::string& path, Json value) {
  size_t dot = path.find('.');
  if (dot == std::string::npos) {
    json->Set(path, std::move(value));
    return;
  }
  std::string head = path.substr(0, dot);
  Json* child = json->Find(head);
  if (child == nullptr) child = &json->Set(head, Json::Object()).Find(head)[0];
  SetPath(child, path.substr(dot + 1), std::move(value));
}

}  // namespace trainyard::spec::testing
