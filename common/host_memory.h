// The memory this process's machine lets it use: the smaller of the machine's RAM (MemTotal in
// /proc/meminfo) and the memory limit of its cgroup (cgroup v2 memory.max, as a Kubernetes pod's
// limit sets it; v1 memory.limit_in_bytes). 0 when neither can be read.
#pragma once

#include <cstdint>
#include <string>

namespace trainyard {

int64_t UsableMemoryBytes();

// The same from given file contents (for tests): /proc/meminfo's text, and a cgroup limit's
// ("max", a byte count, or "" when there is none).
int64_t UsableMemoryBytes(const std::string& meminfo, const std::string& cgroup_limit);

}  // namespace trainyard
