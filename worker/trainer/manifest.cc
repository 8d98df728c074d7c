#include "worker/trainer/manifest.h"

#include <cstdint>
#include <limits>
#include <utility>

#include "common/check.h"
#include "worker/trainer/durable_file.h"

namespace trainyard::trainer {
namespace {

constexpr const char* kDefaultGenerator = "default";

Json U64ToJson(uint64_t v) {
  if (v <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return Json(static_cast<int64_t>(v));
  }
  return Json(std::to_string(v));
}

// Member `key` of `object` (found at `path`), written by U64ToJson: a non-negative integer or
// a string of decimal digits.
StatusOr<uint64_t> U64FromJson(const Json& object, const std::string& path, const char* key) {
  const Json* found = object.Find(key);
  const std::string field = path + "." + key;
  if (found == nullptr) return NotFoundError("field \"" + field + "\" is missing");
  const Json& v = *found;
  if (v.is_integer() && v.int_value() >= 0) return static_cast<uint64_t>(v.int_value());
  if (v.is_string() && !v.string_value().empty() && v.string_value().size() <= 20) {
    uint64_t out = 0;
    bool ok = true;
    for (char c : v.string_value()) {
      ok = ok && c >= '0' && c <= '9' && !__builtin_mul_overflow(out, 10, &out) &&
           !__builtin_add_overflow(out, static_cast<uint64_t>(c - '0'), &out);
    }
    if (ok) return out;
  }
  return InvalidArgumentError("field \"" + field + "\": expected an unsigned 64-bit integer " +
                              "(a number or a string of digits), got " + v.Dump());
}

Json GeneratorToJson(const GeneratorState& g) {
  return Json::Object({{"seed", U64ToJson(g.seed)}, {"offset", U64ToJson(g.offset)}});
}

StatusOr<GeneratorState> GeneratorFromJson(const Json& v, const std::string& path) {
  if (!v.is_object()) {
    return InvalidArgumentError("field \"" + path + "\": expected an object, got " + v.Dump());
  }
  GeneratorState g;
  ASSIGN_OR_RETURN(g.seed, U64FromJson(v, path, "seed"));
  ASSIGN_OR_RETURN(g.offset, U64FromJson(v, path, "offset"));
  return g;
}

StatusOr<int64_t> ReadCount(const Json& json, const char* key, int64_t min) {
  ASSIGN_OR_RETURN(int64_t value, json.Get<int64_t>(key));
  if (value < min) {
    return InvalidArgumentError("field \"" + std::string(key) + "\" is " + std::to_string(value) +
                                "; it must be at least " + std::to_string(min));
  }
  return value;
}

bool IsPlainFileName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos;
}

StatusOr<std::string> ReadFileName(const Json& json, const char* key) {
  ASSIGN_OR_RETURN(std::string name, json.Get<std::string>(key));
  if (!IsPlainFileName(name)) {
    return InvalidArgumentError("field \"" + std::string(key) + "\" is " + Json(name).Dump() +
                                "; it must name a file in the checkpoint directory");
  }
  return name;
}

Status ReadFormat(const Json& json) {
  ASSIGN_OR_RETURN(std::string format, json.Get<std::string>("format"));
  if (format != kCheckpointFormat) {
    return InvalidArgumentError("field \"format\" is " + Json(format).Dump() + "; expected \"" +
                                kCheckpointFormat + "\"");
  }
  ASSIGN_OR_RETURN(int64_t version, json.Get<int64_t>("version"));
  if (version != kCheckpointVersion) {
    return UnimplementedError("unsupported checkpoint version " + std::to_string(version) +
                              "; this build reads version " + std::to_string(kCheckpointVersion));
  }
  return OkStatus();
}

Status ReadGenerators(const Json& json, CheckpointState* state) {
  ASSIGN_OR_RETURN(Json generators, json.Get<Json>("generators"));
  if (!generators.is_object()) {
    return InvalidArgumentError("field \"generators\": expected an object, got " +
                                generators.Dump());
  }
  if (generators.Find(kDefaultGenerator) == nullptr) {
    return NotFoundError("field \"generators.default\" is missing");
  }
  for (const auto& [name, value] : generators.members()) {
    ASSIGN_OR_RETURN(GeneratorState g, GeneratorFromJson(value, "generators." + name));
    if (name == kDefaultGenerator) {
      state->default_generator = g;
    } else {
      state->generators[name] = g;
    }
  }
  return OkStatus();
}

StatusOr<Manifest> ParseManifest(const Json& json) {
  if (!json.is_object()) return InvalidArgumentError("the manifest is not a JSON object");
  RETURN_IF_ERROR(ReadFormat(json));
  Manifest m;
  ASSIGN_OR_RETURN(m.state.step, ReadCount(json, "step", 0));
  ASSIGN_OR_RETURN(m.state.epoch, ReadCount(json, "epoch", 0));
  ASSIGN_OR_RETURN(m.state.position, ReadCount(json, "position", 0));
  ASSIGN_OR_RETURN(m.state.world_size, ReadCount(json, "world_size", 1));
  RETURN_IF_ERROR(ReadGenerators(json, &m.state));
  ASSIGN_OR_RETURN(m.model_file, ReadFileName(json, "model_file"));
  const Json* optimizer_file = json.Find("optimizer_file");
  if (optimizer_file != nullptr && !optimizer_file->is_null()) {
    ASSIGN_OR_RETURN(m.optimizer_file, ReadFileName(json, "optimizer_file"));
  }
  ASSIGN_OR_RETURN(m.state.saved_at, json.GetOr<double>("saved_at", 0.0));
  ASSIGN_OR_RETURN(m.state.spec, json.GetOr<Json>("spec", Json()));
  return m;
}

}  // namespace

Json ManifestToJson(const Manifest& manifest) {
  const CheckpointState& s = manifest.state;
  TY_CHECK(s.step >= 0 && s.epoch >= 0 && s.position >= 0 && s.world_size >= 1)
      << "checkpoint state: step " << s.step << ", epoch " << s.epoch << ", position " << s.position
      << ", world size " << s.world_size;
  TY_CHECK(IsPlainFileName(manifest.model_file)) << manifest.model_file;
  TY_CHECK(!manifest.optimizer_file || IsPlainFileName(*manifest.optimizer_file));
  Json generators = Json::Object({{kDefaultGenerator, GeneratorToJson(s.default_generator)}});
  for (const auto& [name, g] : s.generators) {
    TY_CHECK(name != kDefaultGenerator) << "a named generator may not be called \"default\"";
    generators.Set(name, GeneratorToJson(g));
  }
  return Json::Object({
      {"format", kCheckpointFormat},
      {"version", kCheckpointVersion},
      {"step", s.step},
      {"epoch", s.epoch},
      {"position", s.position},
      {"world_size", s.world_size},
      {"generators", std::move(generators)},
      {"model_file", manifest.model_file},
      {"optimizer_file", manifest.optimizer_file ? Json(*manifest.optimizer_file) : Json()},
      {"saved_at", s.saved_at},
      {"spec", s.spec},
  });
}

StatusOr<Manifest> ManifestFromJson(const Json& json) {
  StatusOr<Manifest> manifest = ParseManifest(json);
  // A missing field is a bad manifest, not a missing file.
  if (manifest.status().code() == StatusCode::kNotFound) {
    return InvalidArgumentError(manifest.status().message());
  }
  return manifest;
}

Status WriteManifest(const std::string& path, const Manifest& manifest) {
  return WriteFileSynced(path, ManifestToJson(manifest).Dump(2) + "\n");
}

StatusOr<Manifest> ReadManifest(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  StatusOr<Json> json = Json::Parse(text);
  if (!json.ok()) return json.status().WithContext("\"" + path + "\"");
  StatusOr<Manifest> manifest = ManifestFromJson(*json);
  if (!manifest.ok()) return manifest.status().WithContext("checkpoint manifest \"" + path + "\"");
  return manifest;
}

}  // namespace trainyard::trainer
