#include "worker/ranks/env.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "common/spec/job_spec.h"

extern char** environ;

namespace trainyard::ranks {
namespace {

const std::string kLocalUnset = std::string(": a rank needs ") + kRankEnv + ", " + kWorldSizeEnv +
                                ", " + kStoreEnv + " and " + kRunIdEnv +
                                " (trainyard train --nproc sets them)";

bool ValidPort(const std::string& port) {
  return !port.empty() && port.size() <= 5 &&
         std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
         std::stoi(port) >= 1 && std::stoi(port) <= 65535;
}

bool ValidRunId(const std::string& id) {
  return !id.empty() && id.size() <= 64 && std::all_of(id.begin(), id.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
  });
}

}  // namespace

StatusOr<int> IntEnv(const char* name, int lo, int hi, const std::string& malformed,
                     const std::string& unset) {
  const char* value = std::getenv(name);
  if (value == nullptr) return InvalidArgumentError(std::string(name) + " is not set" + unset);
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(value, &end, 10);
  if (*value == '\0' || *end != '\0' || errno != 0 || n < lo || n > hi) {
    return InvalidArgumentError(std::string(name) + " = \"" + value +
                                "\": must be an integer in [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + "]" + malformed);
  }
  return static_cast<int>(n);
}

std::vector<std::string> RankEnvironment(const std::function<bool(const std::string&)>& drop,
                                         const std::vector<std::string>& extra, int threads) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    if (!drop(entry.substr(0, entry.find('=')))) env.push_back(entry);
  }
  env.insert(env.end(), extra.begin(), extra.end());
  if (std::getenv("TY_NUM_THREADS") == nullptr && threads > 0) {
    env.push_back("TY_NUM_THREADS=" + std::to_string(threads));
  }
  return env;
}

std::vector<std::string> SocketInterfaceEnv(const std::string& interface) {
  std::vector<std::string> env;
  if (interface.empty()) return env;
  for (const char* name : {"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"}) {
    if (std::getenv(name) == nullptr) env.push_back(std::string(name) + "=" + interface);
  }
  return env;
}

StatusOr<std::optional<LocalRankEnv>> ReadLocalRankEnv() {
  if (std::getenv(kRankEnv) == nullptr) return std::optional<LocalRankEnv>();
  LocalRankEnv env;
  ASSIGN_OR_RETURN(env.world_size, IntEnv(kWorldSizeEnv, 1, spec::kMaxWorldSize, "", kLocalUnset));
  ASSIGN_OR_RETURN(env.rank, IntEnv(kRankEnv, 0, env.world_size - 1,
                                    " (" + std::string(kWorldSizeEnv) + " = " +
                                        std::to_string(env.world_size) + ")",
                                    kLocalUnset));
  const char* store = std::getenv(kStoreEnv);
  if (store == nullptr)
    return InvalidArgumentError(std::string(kStoreEnv) + " is not set" + kLocalUnset);
  env.store = store;
  const size_t colon = env.store.rfind(':');
  if (colon == 0 || colon == std::string::npos || !ValidPort(env.store.substr(colon + 1))) {
    return InvalidArgumentError(std::string(kStoreEnv) + " = \"" + env.store +
                                "\": must be host:port, e.g. 127.0.0.1:29500");
  }
  const char* run_id = std::getenv(kRunIdEnv);
  if (run_id == nullptr)
    return InvalidArgumentError(std::string(kRunIdEnv) + " is not set" + kLocalUnset);
  env.run_id = run_id;
  if (!ValidRunId(env.run_id)) {
    return InvalidArgumentError(std::string(kRunIdEnv) + " = \"" + env.run_id +
                                "\": must be 1 to 64 characters of A-Z, a-z, 0-9, '-' and '_'");
  }
  return std::optional<LocalRankEnv>(std::move(env));
}

}  // namespace trainyard::ranks
