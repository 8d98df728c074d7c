#include "worker/trainer/manifest.h"

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <utility>
#include <vector>

#include "common/check.h"
#include "common/durable_file.h"

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

Status ReadFiles(const Json& json, Manifest* m) {
  ASSIGN_OR_RETURN(Json files, json.GetOr<Json>("files", Json()));
  if (files.is_null()) return OkStatus();
  if (!files.is_object())
    return InvalidArgumentError("field \"files\": expected an object, got " + files.Dump());
  for (const auto& [name, entry] : files.members()) {
    const std::string where = "field \"files." + name + "\"";
    if (!IsPlainFileName(name)) return InvalidArgumentError(where + ": not a file name");
    if (!entry.is_object())
      return InvalidArgumentError(where + ": expected an object, got " + entry.Dump());
    FileDigest d;
    ASSIGN_OR_RETURN(d.bytes, entry.Get<int64_t>("bytes"));
    ASSIGN_OR_RETURN(std::string crc, entry.Get<std::string>("crc32"));
    char* end = nullptr;
    const unsigned long v = std::strtoul(crc.c_str(), &end, 16);
    if (crc.size() != 8 || *end != '\0' || d.bytes < 0) {
      return InvalidArgumentError(
          where + ": expected {\"bytes\": N >= 0, \"crc32\": 8 hex digits}, got " + entry.Dump());
    }
    d.crc32 = static_cast<uint32_t>(v);
    m->files[name] = d;
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
  if (json.Find("total_steps") != nullptr) {
    ASSIGN_OR_RETURN(m.state.total_steps, ReadCount(json, "total_steps", 0));
  }
  RETURN_IF_ERROR(ReadGenerators(json, &m.state));
  ASSIGN_OR_RETURN(m.model_file, ReadFileName(json, "model_file"));
  const Json* optimizer_file = json.Find("optimizer_file");
  if (optimizer_file != nullptr && !optimizer_file->is_null()) {
    ASSIGN_OR_RETURN(m.optimizer_file, ReadFileName(json, "optimizer_file"));
  }
  ASSIGN_OR_RETURN(m.state.saved_at, json.GetOr<double>("saved_at", 0.0));
  ASSIGN_OR_RETURN(m.state.spec, json.GetOr<Json>("spec", Json()));
  if (json.Find("attempt") != nullptr) {
    ASSIGN_OR_RETURN(m.state.attempt, ReadCount(json, "attempt", 0));
  }
  RETURN_IF_ERROR(ReadFiles(json, &m));
  ASSIGN_OR_RETURN(Json run, json.GetOr<Json>("run", Json()));
  if (!run.is_null()) {
    if (!run.is_object())
      return InvalidArgumentError("field \"run\": expected an object, got " + run.Dump());
    ASSIGN_OR_RETURN(m.state.run.uid, run.GetOr<std::string>("uid", ""));
    ASSIGN_OR_RETURN(m.state.run.spec_digest, run.GetOr<std::string>("spec_digest", ""));
    ASSIGN_OR_RETURN(m.state.run.job, run.GetOr<std::string>("job", ""));
  }
  return m;
}

}  // namespace

Json ManifestToJson(const Manifest& manifest) {
  const CheckpointState& s = manifest.state;
  TY_CHECK(s.step >= 0 && s.epoch >= 0 && s.position >= 0 && s.world_size >= 1 && s.attempt >= 0)
      << "checkpoint state: step " << s.step << ", epoch " << s.epoch << ", position " << s.position
      << ", world size " << s.world_size << ", attempt " << s.attempt;
  TY_CHECK(IsPlainFileName(manifest.model_file)) << manifest.model_file;
  TY_CHECK(!manifest.optimizer_file || IsPlainFileName(*manifest.optimizer_file));
  Json generators = Json::Object({{kDefaultGenerator, GeneratorToJson(s.default_generator)}});
  for (const auto& [name, g] : s.generators) {
    TY_CHECK(name != kDefaultGenerator) << "a named generator may not be called \"default\"";
    generators.Set(name, GeneratorToJson(g));
  }
  Json out = Json::Object({
      {"format", kCheckpointFormat},
      {"version", kCheckpointVersion},
      {"step", s.step},
      {"epoch", s.epoch},
      {"position", s.position},
      {"world_size", s.world_size},
      {"total_steps", s.total_steps},
      {"generators", std::move(generators)},
      {"model_file", manifest.model_file},
      {"optimizer_file", manifest.optimizer_file ? Json(*manifest.optimizer_file) : Json()},
      {"saved_at", s.saved_at},
      {"spec", s.spec},
  });
  if (!manifest.files.empty()) {
    Json files = Json::Object();
    for (const auto& [name, d] : manifest.files) {
      char crc[9];
      std::snprintf(crc, sizeof(crc), "%08x", d.crc32);
      files.Set(name, Json::Object({{"bytes", d.bytes}, {"crc32", std::string(crc)}}));
    }
    out.Set("files", std::move(files));
  }
  if (s.attempt > 0) out.Set("attempt", s.attempt);
  if (!s.run.spec_digest.empty()) {
    out.Set(
        "run",
        Json::Object({{"uid", s.run.uid}, {"spec_digest", s.run.spec_digest}, {"job", s.run.job}}));
  }
  return out;
}

StatusOr<Manifest> ManifestFromJson(const Json& json) {
  StatusOr<Manifest> manifest = ParseManifest(json);
  // A missing field is a bad manifest, not a missing file.
  if (manifest.status().code() == StatusCode::kNotFound) {
    return InvalidArgumentError(manifest.status().message());
  }
  return manifest;
}

StatusOr<FileDigest> DigestFile(const std::string& path) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("cannot read \"" + path + "\"");
  FileDigest d;
  uint32_t crc = 0xffffffffu;
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const std::streamsize n = in.gcount();
    for (std::streamsize i = 0; i < n; ++i) {
      crc = table[(crc ^ static_cast<unsigned char>(buf[static_cast<size_t>(i)])) & 0xff] ^
            (crc >> 8);
    }
    d.bytes += n;
  }
  if (in.bad()) return UnavailableError("error reading \"" + path + "\"");
  d.crc32 = crc ^ 0xffffffffu;
  return d;
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
