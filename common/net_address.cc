#include "common/net_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>

namespace trainyard::net {
namespace {

std::string Numeric(const sockaddr* sa) {
  char host[NI_MAXHOST] = {0};
  const socklen_t len = sa->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  if (::getnameinfo(sa, len, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) != 0) return "";
  return host;
}

std::string Join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "none" : out;
}

// The coordinator's "host:port" without a gRPC scheme ("dns:///host:port").
std::string WithoutScheme(const std::string& target) {
  const size_t at = target.find(":///");
  return at == std::string::npos ? target : target.substr(at + 4);
}

}  // namespace

std::vector<std::string> InterfaceNames() {
  std::set<std::string> names;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return {};
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) names.insert(i->ifa_name);
  ::freeifaddrs(list);
  return std::vector<std::string>(names.begin(), names.end());
}

StatusOr<std::string> InterfaceIpv4(const std::string& name) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) {
    return UnavailableError("listing network interfaces: " + std::string(std::strerror(errno)));
  }
  bool exists = false;
  std::string address;
  for (ifaddrs* i = list; i != nullptr && address.empty(); i = i->ifa_next) {
    if (name != i->ifa_name) continue;
    exists = true;
    if (i->ifa_addr != nullptr && i->ifa_addr->sa_family == AF_INET) address = Numeric(i->ifa_addr);
  }
  ::freeifaddrs(list);
  if (!address.empty()) return address;
  if (!exists) {
    return NotFoundError("network interface \"" + name +
                         "\" does not exist; this machine has: " + Join(InterfaceNames()));
  }
  return FailedPreconditionError("network interface \"" + name +
                                 "\" has no IPv4 address; give one that has, or the address "
                                 "itself (interfaces here: " +
                                 Join(InterfaceNames()) + ")");
}

StatusOr<std::string> RouteSourceAddress(const std::string& host, const std::string& port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), port.empty() ? "9" : port.c_str(), &hints, &res);
  if (rc != 0) return UnavailableError("resolving \"" + host + "\": " + ::gai_strerror(rc));
  std::string found, error = "no address";
  for (addrinfo* a = res; a != nullptr && found.empty(); a = a->ai_next) {
    const int fd = ::socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      found = Numeric(reinterpret_cast<sockaddr*>(&local));
    } else {
      error = std::strerror(errno);
    }
    ::close(fd);
  }
  ::freeaddrinfo(res);
  if (found.empty()) return UnavailableError("no route to \"" + host + "\": " + error);
  return found;
}

StatusOr<std::string> ResolveNumeric(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0) return UnavailableError("resolving \"" + host + "\": " + ::gai_strerror(rc));
  std::string v4, v6;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET && v4.empty()) v4 = Numeric(a->ai_addr);
    if (a->ai_family == AF_INET6 && v6.empty()) v6 = Numeric(a->ai_addr);
  }
  ::freeaddrinfo(res);
  if (v4.empty() && v6.empty()) return UnavailableError("\"" + host + "\" has no IP address");
  return v4.empty() ? v6 : v4;
}

bool IsLoopbackHost(const std::string& host) {
  in_addr v4{};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  return host == "localhost" || host == "::1";
}

std::pair<std::string, std::string> SplitHostPort(const std::string& address) {
  if (!address.empty() && address[0] == '[') {
    const size_t close = address.find(']');
    if (close == std::string::npos) return {address, ""};
    const bool port = close + 1 < address.size() && address[close + 1] == ':';
    return {address.substr(1, close - 1), port ? address.substr(close + 2) : ""};
  }
  if (std::count(address.begin(), address.end(), ':') != 1) return {address, ""};
  const size_t colon = address.find(':');
  return {address.substr(0, colon), address.substr(colon + 1)};
}

// --advertise-address as given, checked to resolve, and to a non-loopback address unless the
// coordinator is on loopback too.
static StatusOr<AdvertiseChoice> FromGivenAddress(const AdvertiseRequest& r, bool local) {
  StatusOr<std::string> ip = ResolveNumeric(r.advertise_address);
  if (!ip.ok()) {
    return InvalidArgumentError("--advertise-address \"" + r.advertise_address +
                                "\": " + std::string(ip.status().message()) +
                                "; give an address other nodes reach this worker at");
  }
  if (IsLoopbackHost(*ip) && !local) {
    return InvalidArgumentError(
        "--advertise-address \"" + r.advertise_address + "\" is " + *ip +
        ", a loopback address, but the coordinator " + r.coordinator +
        " is not on loopback, so no other node could reach this worker's ranks; give this "
        "node's address on the network, or --interface (e.g. --interface eth0)");
  }
  return AdvertiseChoice{r.advertise_address, *ip};
}

StatusOr<AdvertiseChoice> ChooseAdvertiseAddress(const AdvertiseRequest& r) {
  const auto [coordinator_host, coordinator_port] = SplitHostPort(WithoutScheme(r.coordinator));
  const bool local = IsLoopbackHost(coordinator_host);
  if (!r.advertise_address.empty() && !r.interface.empty()) {
    return InvalidArgumentError("--advertise-address \"" + r.advertise_address +
                                "\" and --interface \"" + r.interface +
                                "\" are both given; give one: the address other nodes reach "
                                "this worker at, or the interface to take it from");
  }
  if (!r.interface.empty()) {
    StatusOr<std::string> ip = InterfaceIpv4(r.interface);
    if (!ip.ok()) return ip.status().WithContext("--interface");
    return AdvertiseChoice{*ip, *ip};
  }
  if (!r.advertise_address.empty()) return FromGivenAddress(r, local);
  if (local) return AdvertiseChoice{"127.0.0.1", "127.0.0.1"};
  StatusOr<std::string> route = RouteSourceAddress(coordinator_host, coordinator_port);
  if (route.ok()) return AdvertiseChoice{*route, *route};
  const std::string name = r.host_name ? r.host_name() : "localhost";
  StatusOr<std::string> ip = ResolveNumeric(name);
  return AdvertiseChoice{name, ip.ok() ? *ip : name};
}

}  // namespace trainyard::net
