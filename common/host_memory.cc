#include "common/host_memory.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace trainyard {
namespace {

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

int64_t UsableMemoryBytes(const std::string& meminfo, const std::string& cgroup_limit) {
  int64_t total = 0;
  std::istringstream lines(meminfo);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("MemTotal:", 0) == 0) total = std::atoll(line.c_str() + 9) * 1024;  // kB
  }
  char* end = nullptr;
  const long long limit = std::strtoll(cgroup_limit.c_str(), &end, 10);
  // cgroup v1 writes "no limit" as a huge number (PAGE_COUNTER_MAX pages); MemTotal is smaller.
  if (end != cgroup_limit.c_str() && limit > 0)
    total = total > 0 ? std::min<int64_t>(total, limit) : limit;
  return total;
}

int64_t UsableMemoryBytes() {
  std::string limit = Read("/sys/fs/cgroup/memory.max");
  if (limit.empty()) limit = Read("/sys/fs/cgroup/memory/memory.limit_in_bytes");
  return UsableMemoryBytes(Read("/proc/meminfo"), limit);
}

}  // namespace trainyard
