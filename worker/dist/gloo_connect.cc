// GlooProcessGroup::Create (gloo_process_group.h): joining through the Store, connecting Gloo's
// full mesh over TCP, and mapping the addresses Gloo may print to peer ranks (Note [Naming the
// peer] in gloo_process_group.cc).
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>

#include "gloo/common/error.h"
#include "gloo/context.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/context.h"
#include "gloo/transport/tcp/address.h"
#include "gloo/transport/tcp/device.h"
#include "worker/dist/gloo_internal.h"
#include "worker/dist/gloo_process_group.h"

namespace trainyard::dist {
namespace {

using internal::CleanGlooText;
using internal::Contains;
using std::chrono::milliseconds;

// Our Store seen as Gloo's: Gloo wants exceptions, so failures throw gloo::IoException and the
// first one is kept to be returned as a Status.
class StoreAdapter final : public gloo::rendezvous::Store {
 public:
  StoreAdapter(std::shared_ptr<dist::Store> store, milliseconds timeout)
      : store_(std::move(store)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    Check(store_->Set(key, std::string(data.begin(), data.end())));
  }
  std::vector<char> get(const std::string& key) override {
    StatusOr<std::string> v = store_->Get(key, timeout_);
    Check(v.status());
    return std::vector<char>(v->begin(), v->end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const milliseconds& timeout) override {
    Check(store_->Wait(keys, timeout.count() > 0 ? timeout : timeout_));
  }
  const Status& error() const { return error_; }

 private:
  void Check(const Status& st) {
    if (st.ok()) return;
    if (error_.ok()) error_ = st;
    throw gloo::IoException(st.ToString());
  }
  std::shared_ptr<dist::Store> store_;
  milliseconds timeout_;
  Status error_;
};

// ---- Connecting ----

// The IP (as text) and port (host order) of a socket address; false when it is not IP.
bool IpAndPort(const sockaddr_storage& ss, std::string* ip, int* port) {
  char text[INET6_ADDRSTRLEN] = {0};
  if (ss.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
    *port = ntohs(in->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
    *port = ntohs(in6->sin6_port);
  } else {
    return false;
  }
  *ip = text;
  return true;
}

// "10.78.0.3:41234" ("[fe80::1]:41234" for IPv6) for a socket address; "" if not IP.
std::string HostPort(const sockaddr_storage& ss) {
  std::string ip;
  int port = 0;
  if (!IpAndPort(ss, &ip, &port)) return "";
  return (ss.ss_family == AF_INET6 ? "[" + ip + "]" : ip) + ":" + std::to_string(port);
}

// A pair's address (Gloo's tcp::Address, or its bytes as published) as HostPort.
std::string HostPort(const gloo::transport::Address& address) {
  const auto* tcp = dynamic_cast<const gloo::transport::tcp::Address*>(&address);
  return tcp == nullptr ? "" : HostPort(tcp->getSockaddr());
}

// Where connecting the mesh got to: the peer being connected, this rank's listener for it and
// the address the peer published for us (Note [Naming the peer], at connection time).
struct MeshProgress {
  int peer = -1;  // -1: none (all connected, or failed before the first pair)
  std::string mine, theirs;
};

// gloo::rendezvous::Context::connectFullMesh step by step (the same store keys: "<rank>" holds
// a rank's pair addresses, one per peer in rank order), so that when a pair cannot connect we
// know which peer it was and both addresses. Throws what Gloo throws.
class MeshContext final : public gloo::Context {
 public:
  MeshContext(int rank, int size) : gloo::Context(rank, size) {}

  void Connect(gloo::rendezvous::Store& store, std::shared_ptr<gloo::transport::Device>& device,
               MeshProgress* progress) {
    auto transport = device->createContext(rank, size);
    transport->setTimeout(getTimeout());
    std::vector<char> all;
    for (int q = 0; q < size; ++q) {
      if (q == rank) continue;
      const std::vector<char> bytes = transport->createPair(q)->address().bytes();
      all.insert(all.end(), bytes.begin(), bytes.end());
    }
    store.set(std::to_string(rank), all);
    for (int q = 0; q < size; ++q) {
      if (q == rank) continue;
      *progress = MeshProgress{q, HostPort(transport->getPair(q)->address()), ""};
      store.wait({std::to_string(q)}, getTimeout());
      const std::vector<char> theirs = store.get(std::to_string(q));
      const size_t each = theirs.size() / (size - 1);
      const size_t at = (rank > q ? rank - 1 : rank) * each;
      const std::vector<char> ours(theirs.begin() + at, theirs.begin() + at + each);
      progress->theirs = HostPort(gloo::transport::tcp::Address(ours));
      transport->getPair(q)->connect(ours);
    }
    *progress = MeshProgress{};
    device_ = device;
    transportContext_ = std::move(transport);
  }
};

// Why a pair did not connect, from Gloo's text: "Connection refused" from "connect
// [10.0.0.4]:34206: Connection refused"; "timed out after 10s" for its "Connect timeout".
std::string ConnectFailure(const std::string& text, milliseconds timeout) {
  if (Contains(text, "imeout") || Contains(text, "imed out")) {
    return "timed out after " + FormatDuration(timeout * 5) + " (gloo waits 5 times the timeout)";
  }
  const size_t colon = text.rfind(": ");
  return colon == std::string::npos ? text : text.substr(colon + 2);
}

std::string ListenHost(const ProcessGroupOptions& options, const Store& store) {
  if (!options.hostname.empty()) return options.hostname;
  std::string hint = store.LocalAddressHint();
  if (!hint.empty()) return hint;
  char name[256] = {0};
  if (::gethostname(name, sizeof(name) - 1) == 0) {
    addrinfo* res = nullptr;
    if (::getaddrinfo(name, nullptr, nullptr, &res) == 0) {
      ::freeaddrinfo(res);
      return name;
    }
  }
  return "127.0.0.1";
}

// "[127.0.0.1]:41234" from Gloo's address strings (which may add "$<seq>").
std::string StripSeq(const std::string& addr) { return addr.substr(0, addr.find('$')); }

// Both spellings of a Gloo address: Address::str() prints the port in network byte order
// ("[127.0.0.1]:34206" for port 40581) while some error messages print it in host order.
std::vector<std::string> Spellings(const std::string& addr) {
  const size_t colon = addr.rfind(':');
  const int port = colon == std::string::npos ? -1 : std::atoi(addr.c_str() + colon + 1);
  if (port < 0 || port > 65535) return {addr};
  const int swapped = ((port & 0xff) << 8) | (port >> 8);
  return {addr, addr.substr(0, colon + 1) + std::to_string(swapped)};
}

// "[127.0.0.1]:41234" for a socket address (port in host order), as Gloo prints addresses;
// empty if not IP.
std::string AddressString(const sockaddr_storage& ss) {
  std::string ip;
  int port = 0;
  if (!IpAndPort(ss, &ip, &port)) return "";
  return "[" + ip + "]:" + std::to_string(port);
}

// Note [Naming the peer]. The addresses a message may print for peer q: q's pair listeners,
// which every rank publishes under "addr/<rank>" as "<peer> <address>" lines, and both ends of
// this rank's connection to q, found among this process's sockets: the one whose far end is q's
// listener for us (we dialed), or one we accepted, whose far end q publishes under
// "dialed/<q>" (our listener is shared by all pairs, so its local end cannot tell).
std::map<std::string, int> MapPeerAddresses(gloo::Context& context, StoreAdapter& store) {
  const int rank = context.rank, size = context.size;
  std::string mine;
  std::map<std::string, int> ends;  // our listener for q, and q's listener for us -> q
  for (int q = 0; q < size; ++q) {
    if (q == rank) continue;
    const std::string addr = StripSeq(context.getPair(q)->address().str());
    mine += std::to_string(q) + " " + addr + "\n";
    for (const std::string& spelling : Spellings(addr)) ends[spelling] = q;
  }
  store.set("addr/" + std::to_string(rank), std::vector<char>(mine.begin(), mine.end()));
  std::map<std::string, int> peers;
  std::map<std::string, int> theirs_for_us;  // q's listener for its pair with us -> q
  for (int q = 0; q < size; ++q) {
    if (q == rank) continue;
    const std::vector<char> theirs = store.get("addr/" + std::to_string(q));
    std::istringstream lines(std::string(theirs.begin(), theirs.end()));
    int for_rank = -1;
    for (std::string addr; lines >> for_rank >> addr;) {
      for (const std::string& spelling : Spellings(addr)) {
        peers[spelling] = q;
        if (for_rank == rank) ends[spelling] = theirs_for_us[spelling] = q;
      }
    }
  }
  std::string dialed;  // "<q> <our end>" for each connection we opened to q
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    const int fd = std::atoi(entry.path().filename().c_str());
    sockaddr_storage local{}, remote{};
    socklen_t local_len = sizeof(local), remote_len = sizeof(remote);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
        ::getpeername(fd, reinterpret_cast<sockaddr*>(&remote), &remote_len) != 0) {
      continue;
    }
    const std::string near = AddressString(local), far = AddressString(remote);
    for (const auto& [known, other] : {std::pair(near, far), std::pair(far, near)}) {
      auto it = ends.find(known);
      if (it == ends.end()) continue;
      for (const std::string& spelling : Spellings(other)) peers[spelling] = it->second;
    }
    auto dialed_to = theirs_for_us.find(far);
    if (dialed_to != theirs_for_us.end()) {
      dialed += std::to_string(dialed_to->second) + " " + near + "\n";
    }
  }
  // Our listener is shared by all our pairs, so a connection we accepted does not say from whom
  // by its local end: the peer that dialed it says, publishing its end under "dialed/<rank>".
  store.set("dialed/" + std::to_string(rank), std::vector<char>(dialed.begin(), dialed.end()));
  for (int q = 0; q < size; ++q) {
    if (q == rank) continue;
    const std::vector<char> theirs = store.get("dialed/" + std::to_string(q));
    std::istringstream lines(std::string(theirs.begin(), theirs.end()));
    int to = -1;
    for (std::string addr; lines >> to >> addr;) {
      if (to != rank) continue;
      for (const std::string& spelling : Spellings(addr)) peers[spelling] = q;
    }
  }
  return peers;
}

// Gloo writes to sockets with plain write(2), so a vanished peer raises SIGPIPE, which kills
// the process by default. The group's threads (ours, and Gloo's device loop, which inherits the
// mask of the thread creating the device) keep SIGPIPE blocked, so a write fails with EPIPE
// instead. This guard blocks it on the calling thread while the group is created; on exit it
// discards a SIGPIPE raised meanwhile and restores the old mask.
class BlockSigpipe {
 public:
  BlockSigpipe() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    ::pthread_sigmask(SIG_BLOCK, &set, &old_);
  }
  ~BlockSigpipe() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    const timespec zero{0, 0};
    while (::sigtimedwait(&set, nullptr, &zero) == SIGPIPE) {
    }
    ::pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t old_;
};

// The error of a mesh that did not connect. Note [Naming the peer]: with the pair that failed
// known, it names both ends, "rank 1 at 10.78.0.3:41234 could not connect to rank 2 at
// 10.78.0.4:40581: Connection refused", so that a wrong interface or a firewall shows.
Status ConnectError(int rank, int size, const std::string& host, const MeshProgress& progress,
                    const Status& store_error, const std::string& text, milliseconds timeout) {
  const std::string me = "gloo: rank " + std::to_string(rank);
  if (!store_error.ok()) return store_error.WithContext(me + " connecting");
  const bool timed_out = Contains(text, "imeout") || Contains(text, "imed out");
  if (progress.peer >= 0 && !progress.theirs.empty()) {
    const std::string msg = me + " at " + (progress.mine.empty() ? host : progress.mine) +
                            " could not connect to rank " + std::to_string(progress.peer) + " at " +
                            progress.theirs + ": " + ConnectFailure(text, timeout) +
                            "; check that this node reaches that address (the workers' "
                            "--advertise-address or --interface) and no firewall blocks it";
    return timed_out ? DeadlineExceededError(msg) : UnavailableError(msg);
  }
  const std::string msg = me + " could not connect to its " + std::to_string(size - 1) +
                          " peers (listening on " + host + "): " + text;
  return timed_out ? DeadlineExceededError(msg) : UnavailableError(msg);
}

// The ring across hosts of a hierarchical group (ShmPlan): a second mesh, among the ranks with
// this local rank, on the same device, under its own store keys.
StatusOr<std::shared_ptr<gloo::Context>> ConnectCross(
    const std::shared_ptr<Store>& store, const internal::ShmPlan& plan,
    std::shared_ptr<gloo::transport::Device>& device, int rank, milliseconds timeout) {
  const std::string prefix = "gloo/cross" + std::to_string(plan.local_rank) + "/";
  StoreAdapter adapter(std::make_shared<PrefixStore>(prefix, store), timeout);
  auto cross =
      std::make_shared<MeshContext>(plan.cross_rank, static_cast<int>(plan.cross_ranks.size()));
  MeshProgress progress;
  try {
    cross->setTimeout(timeout);
    cross->Connect(adapter, device, &progress);
  } catch (const std::exception& e) {
    const std::string peer =
        progress.peer >= 0 ? " to rank " + std::to_string(plan.cross_ranks[progress.peer]) : "";
    return UnavailableError("gloo: rank " + std::to_string(rank) +
                            " could not connect its ring across hosts" + peer + ": " +
                            CleanGlooText(e.what()));
  }
  return std::shared_ptr<gloo::Context>(std::move(cross));
}

}  // namespace

// ---- Creation ----

StatusOr<std::unique_ptr<GlooProcessGroup>> GlooProcessGroup::Create(
    std::shared_ptr<Store> store, int rank, int size, const ProcessGroupOptions& options) {
  if (options.algorithm != "auto" && options.algorithm != "ring" &&
      options.algorithm != "ring_chunked") {
    return InvalidArgumentError("gloo: algorithm \"" + options.algorithm +
                                "\" is unknown; it must be \"auto\", \"ring\" or "
                                "\"ring_chunked\"");
  }
  if (options.transport == "ibverbs") {
    return UnimplementedError(
        "gloo: transport \"ibverbs\" is not supported: this libgloo's ibverbs transport has no "
        "unbound buffers, which the collectives need; use \"tcp\" or \"auto\"");
  }
  if (options.transport != "auto" && options.transport != "tcp") {
    return InvalidArgumentError("gloo: transport \"" + options.transport +
                                "\" is unknown; it must be \"auto\", \"tcp\" or \"ibverbs\"");
  }
  RETURN_IF_ERROR(JoinGroup(*store, "gloo", rank, size, options.timeout));

  BlockSigpipe block_sigpipe;
  const std::string host = ListenHost(options, *store);
  StoreAdapter adapter(std::make_shared<PrefixStore>("gloo/", store), options.timeout);
  std::shared_ptr<gloo::transport::Device> device;
  auto context = std::make_shared<MeshContext>(rank, size);
  std::map<std::string, int> peers;
  MeshProgress progress;
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = host;
    device = gloo::transport::tcp::CreateDevice(attr);
    context->setTimeout(options.timeout);
    context->Connect(adapter, device, &progress);
    peers = MapPeerAddresses(*context, adapter);
  } catch (const std::exception& e) {
    return ConnectError(rank, size, host, progress, adapter.error(), CleanGlooText(e.what()),
                        options.timeout);
  }
  ASSIGN_OR_RETURN(internal::ShmPlan plan, internal::PlanSharedMemory(*store, rank, size, options));
  std::shared_ptr<gloo::Context> cross;
  if (plan.shm && !plan.cross_ranks.empty()) {
    ASSIGN_OR_RETURN(cross, ConnectCross(store, plan, device, rank, options.timeout));
  }
  return std::unique_ptr<GlooProcessGroup>(
      new GlooProcessGroup(rank, size, options, std::move(device), std::move(context),
                           std::move(plan), std::move(cross), std::move(peers)));
}

}  // namespace trainyard::dist
