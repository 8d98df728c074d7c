// LinkMonitor (links.h): TCP_INFO of each socket in /proc/self/fd.
#include "worker/ranks/links.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdlib>

namespace trainyard::ranks {
namespace {

// The peer's IP address of a connected socket; "" when it is not one.
std::string PeerAddress(int fd) {
  sockaddr_storage sa{};
  socklen_t len = sizeof(sa);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) return "";
  char text[INET6_ADDRSTRLEN] = {};
  if (sa.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&sa)->sin_addr, text, sizeof(text));
  } else if (sa.ss_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&sa)->sin6_addr, text, sizeof(text));
  }
  return text;
}

}  // namespace

std::vector<PeerLink> LinkMonitor::Sample() {
  std::map<std::string, int64_t> rtt;
  std::map<int, uint64_t> acked;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return {};
  while (dirent* d = ::readdir(dir)) {
    const int fd = std::atoi(d->d_name);
    if (fd <= 2 || fd == ::dirfd(dir)) continue;
    tcp_info info{};
    socklen_t len = sizeof(info);
    if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) continue;
    if (info.tcpi_state != 1) continue;  // TCP_ESTABLISHED (netinet/tcp.h clashes with linux/tcp.h)
    acked[fd] = info.tcpi_bytes_acked;
    auto last = acked_.find(fd);
    if (last == acked_.end() || info.tcpi_bytes_acked <= last->second) continue;
    const std::string peer = PeerAddress(fd);
    if (peer.empty()) continue;
    int64_t& worst = rtt[peer];
    worst = std::max<int64_t>(worst, info.tcpi_rtt);
  }
  ::closedir(dir);
  acked_ = std::move(acked);
  std::vector<PeerLink> out;
  for (const auto& [peer, us] : rtt) out.push_back({peer, us});
  return out;
}

}  // namespace trainyard::ranks
