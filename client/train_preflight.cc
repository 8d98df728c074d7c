#include "client/train_preflight.h"

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <vector>

#include "common/host_memory.h"
#include "common/spec/job_memory.h"

namespace trainyard::client {

Status MoveAside(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (dir.empty() || !fs::is_directory(dir, ec)) return OkStatus();
  std::vector<fs::path> entries;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().filename().string().rfind("previous-", 0) != 0) entries.push_back(e.path());
  }
  if (ec) return UnavailableError("--fresh: cannot list " + dir + ": " + ec.message());
  if (entries.empty()) return OkStatus();
  const std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "previous-%Y%m%d-%H%M%S", std::gmtime(&now));
  fs::path to = fs::path(dir) / stamp;
  for (int n = 2; fs::exists(to, ec); ++n)
    to = fs::path(dir) / (std::string(stamp) + "-" + std::to_string(n));
  fs::create_directory(to, ec);
  if (ec) return UnavailableError("--fresh: cannot create " + to.string() + ": " + ec.message());
  for (const fs::path& p : entries) {
    fs::rename(p, to / p.filename(), ec);
    if (ec) return UnavailableError("--fresh: cannot move " + p.string() + ": " + ec.message());
  }
  std::fprintf(stderr, "trainyard: --fresh: moved %zu entries of %s to %s\n", entries.size(),
               dir.c_str(), to.c_str());
  return OkStatus();
}

Status CheckMemory(const spec::JobSpec& spec, int nproc) {
  const int64_t usable = UsableMemoryBytes();
  if (usable <= 0 || spec.device == "cuda") return OkStatus();  // unknown; a GPU's is the rank's
  const spec::MemoryEstimate m = spec::EstimateRankMemory(spec, /*vocab_size=*/256);
  if (m.total_bytes() <= usable / nproc) return OkStatus();
  return InvalidArgumentError(
      "the job needs " + m.Describe() +
      (nproc > 1 ? ", for each of " + std::to_string(nproc) + " ranks" : "") +
      "; this machine lets it use " + spec::FormatBytes(usable) +
      " in all: lower batch_size, the model's size or context, or use "
      "parallelism.zero_stage: 1 across ranks");
}

}  // namespace trainyard::client
