#include "worker/trainer/run_identity.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "common/random_id.h"

namespace trainyard::trainer {
namespace {

const Json kNull;

const Json& Member(const Json& object, const char* key) {
  const Json* v = object.is_object() ? object.Find(key) : nullptr;
  return v != nullptr ? *v : kNull;
}

int64_t IntOr(const Json& object, const char* key, int64_t fallback) {
  const Json& v = Member(object, key);
  return v.is_integer() ? v.int_value() : fallback;
}

// `object` without the members named in `drop`.
Json Without(const Json& object, std::initializer_list<const char*> drop) {
  if (!object.is_object()) return object;
  Json::Members kept;
  for (const auto& [key, value] : object.members()) {
    bool dropped = false;
    for (const char* d : drop) dropped |= key == d;
    if (!dropped) kept.emplace_back(key, value);
  }
  return Json::Object(std::move(kept));
}

// The schedule without cosine.total_steps: like the step count, its length may change
// between a run and its continuation (job.proto's CosineSchedule).
Json ScheduleShape(const Json& schedule) {
  const Json* cosine = schedule.is_object() ? schedule.Find("cosine") : nullptr;
  if (cosine == nullptr) return schedule;
  Json out = schedule;
  out.Set("cosine", Without(*cosine, {"total_steps"}));
  return out;
}

// Leaves of `v` as path -> JSON text.
void Flatten(const Json& v, const std::string& path, std::map<std::string, std::string>* out) {
  if (v.is_object()) {
    for (const auto& [key, value] : v.members())
      Flatten(value, path.empty() ? key : path + "." + key, out);
    return;
  }
  (*out)[path] = v.Dump();
}

}  // namespace

Json IdentityFields(const Json& spec) {
  const Json& parallelism = Member(spec, "parallelism");
  // A pipeline's stages share each sample: world_size / pipeline_stages replicas read data.
  const int64_t replicas = IntOr(parallelism, "world_size", 1) /
                           std::max<int64_t>(1, IntOr(parallelism, "pipeline_stages", 1));
  const int64_t global_batch =
      IntOr(spec, "batch_size", 0) * replicas * IntOr(parallelism, "grad_accumulation_steps", 1);
  return Json::Object({{"model", Member(spec, "model")},
                       {"data", Without(Member(spec, "data"), {"num_workers", "prefetch"})},
                       {"optimizer", Member(spec, "optimizer")},
                       {"schedule", ScheduleShape(Member(spec, "schedule"))},
                       {"batch_size x world_size x grad_accumulation_steps", global_batch},
                       {"seed", Member(spec, "seed")},
                       {"grad_clip_norm", Member(spec, "grad_clip_norm")}});
}

std::string SpecDigest(const Json& spec) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : IdentityFields(spec).Dump()) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

std::vector<std::string> IdentityDifferences(const Json& saved, const Json& spec, size_t limit) {
  std::map<std::string, std::string> there, here;
  Flatten(IdentityFields(saved), "", &there);
  Flatten(IdentityFields(spec), "", &here);
  for (const auto& [path, value] : here) there.emplace(path, "absent");
  for (const auto& [path, value] : there) here.emplace(path, "absent");
  std::vector<std::string> out;
  size_t differing = 0;
  for (const auto& [path, value] : there) {
    if (here[path] == value) continue;
    if (++differing <= limit)
      out.push_back(path + ": " + value + " there, " + here[path] + " here");
  }
  if (differing > limit) out.push_back("and " + std::to_string(differing - limit) + " more");
  return out;
}

std::string NewRunUid() { return RandomHex(32); }

}  // namespace trainyard::trainer
