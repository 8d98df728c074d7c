// The address a node advertises to its peers, chosen the way GLOO_SOCKET_IFNAME and
// NCCL_SOCKET_IFNAME choose theirs: given outright, taken from a named network interface, or
// (neither given) the local end of this machine's route to the coordinator. The worker daemon's
// --advertise-address / --interface use it; its ranks' Gloo listens on the result.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/status.h"

namespace trainyard::net {

// The names of this machine's network interfaces (getifaddrs), sorted, each once.
std::vector<std::string> InterfaceNames();

// The first IPv4 address of interface `name`. NotFound naming the interface and listing those
// that exist when there is no such interface; FailedPrecondition when it has no IPv4 address.
StatusOr<std::string> InterfaceIpv4(const std::string& name);

// The local address this machine would send from to `host`:`port` (a UDP socket connected to
// it: no packet is sent). Unavailable when `host` does not resolve or no route leads there.
StatusOr<std::string> RouteSourceAddress(const std::string& host, const std::string& port);

// `host` as a numeric address: itself when it is one, else its first IPv4 (then IPv6) address.
StatusOr<std::string> ResolveNumeric(const std::string& host);

// True for 127.0.0.0/8, ::1 and "localhost".
bool IsLoopbackHost(const std::string& host);

// "host" and "port" of "host:port" or "[v6]:port"; the port is empty when there is none.
std::pair<std::string, std::string> SplitHostPort(const std::string& address);

struct AdvertiseRequest {
  std::string advertise_address;           // --advertise-address (or --host); empty: not given
  std::string interface;                   // --interface; empty: not given
  std::string coordinator;                 // "host:port" of the coordinator
  std::function<std::string()> host_name;  // the fallback when no route is found
};

struct AdvertiseChoice {
  std::string advertise;  // what the node registers as its address: as given, or chosen
  std::string listen;     // the same as a numeric address, for sockets to bind (Gloo)
};

// InvalidArgument when both flags are given, when a given address does not resolve, or when
// it resolves to loopback while the coordinator is not on loopback (peers on other nodes could
// not reach it); InterfaceIpv4's errors for --interface.
StatusOr<AdvertiseChoice> ChooseAdvertiseAddress(const AdvertiseRequest& request);

}  // namespace trainyard::net
