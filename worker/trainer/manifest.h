// The manifest of a checkpoint: manifest.json in a step directory (see checkpoint.h), naming
// the weight files and holding everything else a resumed run needs to continue exactly where
// the saved one stopped: the step, the data position, the random generators and the job spec.
//
//   {
//     "format": "trainyard.checkpoint",
//     "version": 1,
//     "step": 1200,                  optimizer steps completed
//     "epoch": 3,                    the epoch in progress
//     "position": 4096,              samples of that epoch consumed
//     "world_size": 1,
//     "total_steps": 4690,           the writing run's length (absent in older manifests)
//     "generators": {"default": {"seed": 42, "offset": 81920}, "<name>": {...}, ...},
//     "model_file": "model.safetensors",
//     "optimizer_file": "optimizer.safetensors",   null when saved without an optimizer
//     "saved_at": 1712345678.25,     Unix seconds
//     "spec": {...},                 the job spec, any JSON value
//     "run": {"uid": "9f0c...", "spec_digest": "1b2c3d4e5f607182", "job": "fashion-mlp-1"},
//     "attempt": 2,                  the job attempt that wrote it (absent: 0)
//     "files": {"model.safetensors": {"bytes": 2140, "crc32": "1a2b3c4d"}, ...}
//   }
//
// "files" holds each weight file's size and CRC-32 (IEEE, as zlib's crc32), checked before a
// checkpoint is resumed; manifests written before it have none.
// "run" is the identity of the run that wrote it (run_identity.h, Note [Run identity]);
// manifests written before it have none.
// "attempt" is the epoch of the job attempt that wrote it (Note [Checkpoint fence] in
// checkpoint_fence.h); written only when above 0, so runs outside the service (and manifests
// written before it) have none.
//
// Seeds and offsets are uint64: JSON integers when they fit int64, decimal strings above that
// (JSON readers lose integers past 2^53 or 2^63), and the reader accepts both.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "common/json.h"
#include "common/status.h"
#include "worker/tensor/generator.h"
#include "worker/trainer/run_identity.h"

namespace trainyard::trainer {

inline constexpr int64_t kCheckpointVersion = 1;
inline constexpr const char* kCheckpointFormat = "trainyard.checkpoint";
inline constexpr const char* kManifestFile = "manifest.json";
inline constexpr const char* kModelFile = "model.safetensors";
inline constexpr const char* kOptimizerFile = "optimizer.safetensors";

// A Generator's state: Philox seed and counter offset.
struct GeneratorState {
  uint64_t seed = 0;
  uint64_t offset = 0;

  static GeneratorState Of(const Generator& gen) { return {gen.seed(), gen.offset()}; }
  void ApplyTo(Generator* gen) const { gen->SetState(seed, offset); }
  friend bool operator==(const GeneratorState& a, const GeneratorState& b) {
    return a.seed == b.seed && a.offset == b.offset;
  }
};

// What a run needs besides the weights to resume. Counts are >= 0 and world_size >= 1.
struct CheckpointState {
  int64_t step = 0;                  // optimizer steps completed
  int64_t epoch = 0;                 // the epoch in progress (DataLoader::epoch())
  int64_t position = 0;              // samples of `epoch` consumed (DataLoader::position())
  GeneratorState default_generator;  // DefaultGenerator()
  std::map<std::string, GeneratorState> generators;  // other named generators; not "default"
  int64_t world_size = 1;
  int64_t total_steps = 0;  // the length of the run that wrote it (0: not recorded)
  Json spec;                // the job spec, stored as given
  double saved_at = 0;      // Unix seconds; CheckpointManager::Save sets it from its clock
  RunIdentity run;          // who wrote it; spec_digest "" (not written) for none
  // The job attempt that wrote it (Note [Checkpoint fence]); 0: none (`trainyard train`).
  // CheckpointManager::Save sets it from its attempt.
  int64_t attempt = 0;
};

struct FileDigest {
  int64_t bytes = 0;
  uint32_t crc32 = 0;
  friend bool operator==(const FileDigest& a, const FileDigest& b) {
    return a.bytes == b.bytes && a.crc32 == b.crc32;
  }
};

// The size and CRC-32 of the file at `path`; errors name it.
StatusOr<FileDigest> DigestFile(const std::string& path);

struct Manifest {
  CheckpointState state;
  std::map<std::string, FileDigest> files;  // by file name; empty in older manifests
  std::string model_file = kModelFile;
  std::optional<std::string> optimizer_file;  // nullopt: saved without an optimizer
};

// The manifest as JSON. `manifest` must be valid (TY_CHECK): counts as above, file names plain.
Json ManifestToJson(const Manifest& manifest);

// Reads and checks a manifest. InvalidArgument names the field and the bad value (a missing
// field, a negative count, a file name with a '/'); Unimplemented for another format version.
StatusOr<Manifest> ManifestFromJson(const Json& json);

// Writes ManifestToJson(manifest) to `path` and fsyncs it (not atomic: Save writes it into a
// directory that is renamed into place afterwards).
Status WriteManifest(const std::string& path, const Manifest& manifest);

// Reads `path` (normally <step dir>/manifest.json). Errors name the path: NotFound when
// missing, InvalidArgument for bad JSON or a bad field, Unimplemented for another version.
StatusOr<Manifest> ReadManifest(const std::string& path);

}  // namespace trainyard::trainer
