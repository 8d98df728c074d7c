// The round-trip times of a rank's busy TCP connections, per peer address: how the coordinator
// tells a slow network link from a slow rank (Note [Slow links] in server/health.h). Linux
// only: reads TCP_INFO from every TCP socket the process has open.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace trainyard::ranks {

struct PeerLink {
  std::string peer;    // the remote IP address ("10.0.0.2", "::1")
  int64_t rtt_us = 0;  // the kernel's smoothed round-trip time, the largest over its sockets
};

// Samples the process's sockets; each Sample() reports the peers of connections that sent data
// since the previous one (idle sockets carry no fresh round-trip time). The coordinator keeps
// only peers that are hosts of the job's ranks. Not thread-safe.
class LinkMonitor {
 public:
  std::vector<PeerLink> Sample();

 private:
  std::map<int, uint64_t> acked_;  // fd -> bytes acked at the last sample
};

}  // namespace trainyard::ranks
