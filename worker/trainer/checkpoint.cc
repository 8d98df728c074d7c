#include "worker/trainer/checkpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/check.h"
#include "common/durable_file.h"
#include "common/logging.h"
#include "worker/tensor/safetensors.h"
#include "worker/trainer/pytorch_layouts.h"

namespace trainyard::trainer {
namespace {

namespace fs = std::filesystem;

constexpr const char* kStepPrefix = "step-";
// Hidden names of a save in progress and of a checkpoint being deleted (Note [Atomic
// checkpoint]): ".tmp-step-00000010-<pid>", ".trash-step-00000010-<pid>".
constexpr const char* kTmpPrefix = ".tmp-";
constexpr const char* kTrashPrefix = ".trash-";

std::string Quoted(const std::string& s) { return "\"" + s + "\""; }

Status ErrorCodeStatus(const std::error_code& ec, const std::string& what) {
  errno = ec.value();  // std::filesystem reports errno values on POSIX
  return ErrnoStatus(what);
}

bool StartsWith(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// The step of a name "step-<digits>", or nullopt for any other name.
std::optional<int64_t> StepOfName(const std::string& name) {
  if (!StartsWith(name, kStepPrefix)) return std::nullopt;
  const std::string digits = name.substr(std::string(kStepPrefix).size());
  if (digits.empty() || digits.size() > 18) return std::nullopt;
  int64_t step = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    step = step * 10 + (c - '0');
  }
  return step;
}

// Names of the entries of `dir`. NotFound when `dir` does not exist.
StatusOr<std::vector<std::string>> ListNames(const std::string& dir) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  std::vector<std::string> names;
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    names.push_back(it->path().filename().string());
  }
  if (ec) return ErrorCodeStatus(ec, "listing checkpoint directory " + Quoted(dir));
  return names;
}

// (step, name) of the step directories among `names`, newest first.
std::vector<std::pair<int64_t, std::string>> StepDirs(const std::vector<std::string>& names) {
  std::vector<std::pair<int64_t, std::string>> out;
  for (const std::string& name : names) {
    if (std::optional<int64_t> step = StepOfName(name)) out.emplace_back(*step, name);
  }
  std::sort(out.rbegin(), out.rend());
  return out;
}

Status Rename(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0) {
    return ErrnoStatus("renaming " + Quoted(from) + " to " + Quoted(to));
  }
  return OkStatus();
}

void RemoveAllOrWarn(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) {
    TY_LOG(WARNING) << "cannot remove " << Quoted(path) << ": " << ec.message();
  }
}

// Deletes the checkpoint `dir`/`name`, hiding it first so no partial step-* is ever seen.
void Discard(const std::string& dir, const std::string& name) {
  const std::string trash = dir + "/" + kTrashPrefix + name + "-" + std::to_string(::getpid());
  Status s = Rename(dir + "/" + name, trash);
  if (!s.ok()) {
    TY_LOG(WARNING) << "cannot delete old checkpoint: " << s.message();
    return;
  }
  RemoveAllOrWarn(trash);
}

// Writes the files of a checkpoint into the fresh directory `tmp` and makes them durable.
Status WriteContents(const std::string& tmp, const nn::NamedTensors& model,
                     const std::vector<optim::NamedTensor>* optimizer_state, Manifest manifest) {
  RETURN_IF_ERROR(SaveSafetensors(tmp + "/" + manifest.model_file, model));
  if (optimizer_state != nullptr) {
    RETURN_IF_ERROR(SaveSafetensors(tmp + "/" + *manifest.optimizer_file, *optimizer_state));
  }
  for (const std::optional<std::string>& file :
       {std::optional<std::string>(manifest.model_file), manifest.optimizer_file}) {
    if (!file) continue;
    ASSIGN_OR_RETURN(manifest.files[*file], DigestFile(tmp + "/" + *file));
  }
  RETURN_IF_ERROR(WriteManifest(tmp + "/" + kManifestFile, manifest));
  return SyncDirectory(tmp);
}

// Renames the complete directory `tmp` to `dir`/`name`, replacing a checkpoint of that name.
Status Publish(const std::string& tmp, const std::string& dir, const std::string& name) {
  const std::string target = dir + "/" + name;
  std::error_code ec;
  if (!fs::exists(target, ec)) {
    RETURN_IF_ERROR(Rename(tmp, target));
    return SyncDirectory(dir);
  }
  const std::string trash = dir + "/" + kTrashPrefix + name + "-" + std::to_string(::getpid());
  RETURN_IF_ERROR(Rename(target, trash));
  Status s = Rename(tmp, target);
  if (!s.ok()) {
    Status restored = Rename(trash, target);
    return restored.ok() ? s : s.WithContext(restored.message());
  }
  RETURN_IF_ERROR(SyncDirectory(dir));
  RemoveAllOrWarn(trash);
  return OkStatus();
}

bool IsRegularFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// OK when `step_dir` holds a manifest that reads back and the files it names.
// OK when the manifest reads back and every file it names is there, with the size and CRC-32
// it records (manifests without "files": present only).
Status CheckComplete(const std::string& step_dir) {
  ASSIGN_OR_RETURN(Manifest manifest, ReadManifest(step_dir + "/" + kManifestFile));
  for (const std::optional<std::string>& file :
       {std::optional<std::string>(manifest.model_file), manifest.optimizer_file}) {
    if (!file) continue;
    const std::string path = step_dir + "/" + *file;
    if (!IsRegularFile(path)) return NotFoundError(Quoted(path) + " is missing");
    auto want = manifest.files.find(*file);
    if (want == manifest.files.end()) continue;
    ASSIGN_OR_RETURN(FileDigest got, DigestFile(path));
    if (!(got == want->second)) {
      char detail[160];
      std::snprintf(detail, sizeof(detail),
                    " is damaged: %lld bytes with CRC-32 %08x, where the manifest records %lld "
                    "bytes with CRC-32 %08x",
                    static_cast<long long>(got.bytes), got.crc32,
                    static_cast<long long>(want->second.bytes), want->second.crc32);
      return DataLossError(Quoted(path) + detail);
    }
  }
  return OkStatus();
}

Status LoadWeights(const std::string& path, const SafetensorsFile& file, nn::Module* model) {
  Status s = model->LoadStateDict(file.tensors, /*strict=*/true);
  return s.ok() ? s : s.WithContext("loading weights from " + Quoted(path));
}

}  // namespace

nn::NamedTensors UniqueStateDict(const nn::Module& model) {
  nn::NamedTensors out;
  std::unordered_set<const TensorImpl*> seen;
  for (auto& [name, tensor] : model.StateDict()) {
    if (seen.insert(tensor.impl()).second) out.emplace_back(name, tensor);
  }
  return out;
}

std::string StepDirName(int64_t step) {
  TY_CHECK(step >= 0) << "checkpoint step " << step;
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%s%08lld", kStepPrefix, static_cast<long long>(step));
  return buffer;
}

CheckpointManager::CheckpointManager(std::string dir, int keep_last, const Clock* clock,
                                     int64_t attempt)
    : dir_(std::move(dir)),
      keep_last_(keep_last),
      clock_(clock ? clock : Clock::Real()),
      fence_(dir_, attempt) {
  TY_CHECK(keep_last_ >= 0) << "keep_last is " << keep_last_;
  TY_CHECK(!dir_.empty()) << "checkpoint directory is empty";
}

Status CheckpointManager::Save(const nn::Module& model, const optim::Optimizer* optimizer,
                               const CheckpointState& state) {
  if (optimizer == nullptr) return SaveWithOptimizerState(model, nullptr, state);
  const std::vector<optim::NamedTensor> optimizer_state = optimizer->StateDict();
  return SaveWithOptimizerState(model, &optimizer_state, state);
}

Status CheckpointManager::SaveWithOptimizerState(
    const nn::Module& model, const std::vector<optim::NamedTensor>* optimizer_state,
    const CheckpointState& state) {
  return SaveTensors(UniqueStateDict(model), optimizer_state, Stamped(state));
}

CheckpointState CheckpointManager::Stamped(CheckpointState state) const {
  state.saved_at = clock_->UnixSeconds();
  state.attempt = fence_.epoch();
  return state;
}

Status CheckpointManager::SaveTensors(const nn::NamedTensors& model,
                                      const std::vector<optim::NamedTensor>* optimizer_state,
                                      const CheckpointState& stamped,
                                      const std::function<void()>& before_commit) {
  Manifest manifest;
  manifest.state = stamped;
  if (optimizer_state != nullptr) manifest.optimizer_file = kOptimizerFile;
  const std::string name = StepDirName(stamped.step);
  const std::string tmp = dir_ + "/" + kTmpPrefix + name + "-" + std::to_string(::getpid());

  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) return ErrorCodeStatus(ec, "creating checkpoint directory " + Quoted(dir_));
  fs::remove_all(tmp, ec);  // left by an earlier process that had our pid
  if (::mkdir(tmp.c_str(), 0755) != 0) return ErrnoStatus("creating " + Quoted(tmp));
  Status s = WriteContents(tmp, model, optimizer_state, manifest);
  if (!s.ok()) {
    RemoveAllOrWarn(tmp);
    // A newer attempt clears the temporary directories it finds, ours included: then the
    // refusal is the cause to name, not the file that vanished.
    const Status fenced = fence_.Commit(name, [] { return OkStatus(); });
    if (fenced.code() == StatusCode::kFailedPrecondition) return fenced;
    return s.WithContext("saving checkpoint " + Quoted(dir_ + "/" + name));
  }
  if (before_commit) before_commit();
  s = fence_.Commit(name, [&] {
    RETURN_IF_ERROR(Publish(tmp, dir_, name));
    Prune(stamped.step);  // under the fence too: a stale attempt deletes nothing
    return OkStatus();
  });
  if (!s.ok()) {
    RemoveAllOrWarn(tmp);
    // A refusal (FailedPrecondition) names the step and the directory already.
    return s.code() == StatusCode::kFailedPrecondition
               ? s
               : s.WithContext("saving checkpoint " + Quoted(dir_ + "/" + name));
  }
  return OkStatus();
}

void CheckpointManager::Prune(int64_t keep) const {
  StatusOr<std::vector<std::string>> names = ListNames(dir_);
  if (!names.ok()) {
    TY_LOG(WARNING) << "cannot prune old checkpoints: " << names.status().message();
    return;
  }
  for (const std::string& name : *names) {
    if (StartsWith(name, std::string(kTmpPrefix) + kStepPrefix) ||
        StartsWith(name, std::string(kTrashPrefix) + kStepPrefix)) {
      RemoveAllOrWarn(dir_ + "/" + name);
    }
  }
  if (keep_last_ == 0) return;
  const auto steps = StepDirs(*names);
  for (size_t i = keep_last_; i < steps.size(); ++i) {
    if (steps[i].first != keep) Discard(dir_, steps[i].second);
  }
}

StatusOr<std::optional<std::string>> CheckpointManager::Latest() const {
  StatusOr<std::vector<std::string>> names = ListNames(dir_);
  if (!names.ok() && names.status().code() == StatusCode::kNotFound) return std::nullopt;
  if (!names.ok()) return names.status();
  std::string skipped;
  for (const auto& [step, name] : StepDirs(*names)) {
    const std::string path = dir_ + "/" + name;
    Status s = CheckComplete(path);
    if (s.ok()) {
      if (!skipped.empty()) {
        TY_LOG(WARNING) << "resuming from the older checkpoint " << Quoted(path)
                        << ", the newest good one, after skipping: " << skipped;
      }
      return path;
    }
    TY_LOG(WARNING) << "skipping checkpoint " << Quoted(path) << ": " << s.message();
    skipped += (skipped.empty() ? "" : "; ") + std::string(s.message());
  }
  if (!skipped.empty()) {
    return DataLossError("no usable checkpoint in " + Quoted(dir_) + ": " + skipped +
                         ". Move the damaged step directories away to start from step 0, or "
                         "restore them from a copy");
  }
  return std::nullopt;
}

StatusOr<CheckpointState> LoadCheckpoint(const std::string& step_dir, nn::Module* model,
                                         optim::Optimizer* optimizer) {
  TY_CHECK(model != nullptr) << "LoadCheckpoint needs a model";
  ASSIGN_OR_RETURN(Manifest manifest, ReadManifest(step_dir + "/" + kManifestFile));
  if (optimizer != nullptr && !manifest.optimizer_file) {
    return FailedPreconditionError("checkpoint " + Quoted(step_dir) +
                                   " holds no optimizer state (it was saved without one)");
  }
  const std::string model_path = step_dir + "/" + manifest.model_file;
  ASSIGN_OR_RETURN(SafetensorsFile weights, LoadSafetensors(model_path));
  SafetensorsFile optimizer_state;
  std::string optimizer_path;
  if (optimizer != nullptr) {
    optimizer_path = step_dir + "/" + *manifest.optimizer_file;
    ASSIGN_OR_RETURN(optimizer_state, LoadSafetensors(optimizer_path));
  }
  RETURN_IF_ERROR(LoadWeights(model_path, weights, model));
  if (optimizer != nullptr) {
    Status s = optimizer->LoadStateDict(optimizer_state.tensors);
    if (!s.ok()) return s.WithContext("loading optimizer state from " + Quoted(optimizer_path));
  }
  return manifest.state;
}

StatusOr<std::vector<optim::NamedTensor>> LoadOptimizerState(const std::string& step_dir) {
  ASSIGN_OR_RETURN(Manifest manifest, ReadManifest(step_dir + "/" + kManifestFile));
  if (!manifest.optimizer_file) {
    return FailedPreconditionError("checkpoint " + Quoted(step_dir) +
                                   " holds no optimizer state (it was saved without one)");
  }
  ASSIGN_OR_RETURN(SafetensorsFile state,
                   LoadSafetensors(step_dir + "/" + *manifest.optimizer_file));
  return std::move(state.tensors);
}

Status InitFromWeights(const std::string& path, nn::Module* model) {
  TY_CHECK(model != nullptr) << "InitFromWeights needs a model";
  std::string file = path;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const std::string manifest_path = path + "/" + kManifestFile;
    if (!IsRegularFile(manifest_path)) {
      return NotFoundError(
          "init_from " + Quoted(path) + " is a directory without " + kManifestFile +
          "; give a checkpoint step directory (step-NNNNNNNN) or a .safetensors file");
    }
    ASSIGN_OR_RETURN(Manifest manifest, ReadManifest(manifest_path));
    file = path + "/" + manifest.model_file;
  }
  ASSIGN_OR_RETURN(SafetensorsFile weights, LoadSafetensors(file));
  std::string note;
  weights.tensors = FromPyTorchLayouts(std::move(weights.tensors), *model, &note);
  if (!note.empty()) {
    TY_LOG(INFO) << "init_from " << file << ": " << note;
  }
  return LoadWeights(file, weights, model);
}

}  // namespace trainyard::trainer
