// TcpStore (store.h): the client of TcpStoreServer. Each request takes an idle connection (or
// dials a new one) and is bounded by its own timeout plus kIoGrace (Note [Store wire protocol]
// in tcp_store_wire.h).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>

#include "worker/dist/store.h"
#include "worker/dist/store_internal.h"
#include "worker/dist/tcp_store_wire.h"

namespace trainyard::dist {
namespace {

using std::chrono::milliseconds;
using store_internal::Clock;
using store_internal::DecodeFrame;
using store_internal::EncodeFrame;
using store_internal::kIoGrace;
using store_internal::Left;
using store_internal::ParseInt;
using store_internal::Quote;
using store_internal::QuoteList;

// ---- Sockets ----

bool SplitHostPort(const std::string& address, std::string* host, int* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  *host = address.substr(0, colon);
  if (host->size() > 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  int64_t p = 0;
  if (!ParseInt(address.substr(colon + 1), &p) || p < 0 || p > 65535) return false;
  *port = static_cast<int>(p);
  return true;
}

void SetNonBlocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

// Waits for `events` on fd until the deadline: 1 ready, 0 deadline passed, -1 error.
int PollOne(int fd, short events, Clock::time_point deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, static_cast<int>(Left(deadline).count()));
    if (r > 0) return 1;
    if (r == 0) return 0;
    if (errno != EINTR) return -1;
  }
}

// One attempt to connect to host:port, bounded by `deadline`. The fd is non-blocking.
StatusOr<int> Dial(const std::string& host, int port, Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int gai = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (gai != 0) return UnavailableError(std::string("cannot resolve: ") + ::gai_strerror(gai));
  Status last = UnavailableError("no address");
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    SetNonBlocking(fd);
    int err = 0;
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        err = ETIMEDOUT;
        if (PollOne(fd, POLLOUT, deadline) == 1) {
          socklen_t len = sizeof(err);
          ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        }
      }
    }
    if (err == 0) {
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      ::freeaddrinfo(res);
      return fd;
    }
    ::close(fd);
    last = UnavailableError(std::strerror(err));
  }
  ::freeaddrinfo(res);
  return last;
}

// ---- Client ----

class TcpStoreClient final : public Store {
 public:
  TcpStoreClient(std::string host, int port, std::string address, int first_fd)
      : host_(std::move(host)), port_(port), address_(std::move(address)) {
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    char buf[INET6_ADDRSTRLEN] = {0};
    if (::getsockname(first_fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      if (local.ss_family == AF_INET) {
        ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&local)->sin_addr, buf, sizeof(buf));
      } else if (local.ss_family == AF_INET6) {
        ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr, buf,
                    sizeof(buf));
      }
    }
    local_address_ = buf;
    idle_.push_back(first_fd);
  }
  ~TcpStoreClient() override {
    for (int fd : idle_) ::close(fd);
  }

  Status Set(const std::string& key, const std::string& value) override {
    ASSIGN_OR_RETURN(auto reply, Call({"set", key, value}, kIoGrace));
    return ErrorOf(reply, "set " + Quote(key));
  }
  StatusOr<std::string> Get(const std::string& key, milliseconds timeout) override {
    ASSIGN_OR_RETURN(auto reply,
                     Call({"get", key, std::to_string(timeout.count())}, timeout + kIoGrace));
    if (reply[0] == "ok" && reply.size() == 2) return reply[1];
    RETURN_IF_ERROR(ErrorOf(reply, "get " + Quote(key)));
    return DeadlineExceededError("store " + address_ + ": key " + Quote(key) +
                                 " was not set within " + FormatDuration(timeout));
  }
  Status Wait(const std::vector<std::string>& keys, milliseconds timeout) override {
    std::vector<std::string> req = {"wait", std::to_string(timeout.count())};
    req.insert(req.end(), keys.begin(), keys.end());
    ASSIGN_OR_RETURN(auto reply, Call(req, timeout + kIoGrace));
    if (reply[0] == "ok") return OkStatus();
    RETURN_IF_ERROR(ErrorOf(reply, "wait"));
    return DeadlineExceededError("store " + address_ + ": keys still missing after " +
                                 FormatDuration(timeout) + ": " +
                                 QuoteList({reply.begin() + 1, reply.end()}));
  }
  StatusOr<int64_t> Add(const std::string& key, int64_t delta) override {
    ASSIGN_OR_RETURN(auto reply, Call({"add", key, std::to_string(delta)}, kIoGrace));
    int64_t sum = 0;
    if (reply[0] == "ok" && reply.size() == 2 && ParseInt(reply[1], &sum)) return sum;
    RETURN_IF_ERROR(ErrorOf(reply, "add to " + Quote(key)));
    return Unavailable("malformed reply to add");
  }
  std::string LocalAddressHint() const override { return local_address_; }

 private:
  // The error an {"error", message, code} reply carries (Note [Store wire protocol]); OK for
  // any other reply.
  Status ErrorOf(const std::vector<std::string>& reply, const std::string& what) const {
    int64_t code = 0;
    if (reply[0] != "error" || reply.size() != 3 || !ParseInt(reply[2], &code)) return OkStatus();
    if (code < 1 || code > static_cast<int64_t>(StatusCode::kUnauthenticated)) code = 2;  // unknown
    return Status(static_cast<StatusCode>(code),
                  "store " + address_ + ": " + what + ": " + reply[1]);
  }
  // One request and its reply on an idle connection (a new one when none is idle).
  StatusOr<std::vector<std::string>> Call(const std::vector<std::string>& req, milliseconds bound);
  Status Unavailable(const std::string& why) const {
    return UnavailableError("store " + address_ + " is unavailable: " + why +
                            "; is the process serving the store (rank 0 or the launcher) still "
                            "running?");
  }

  const std::string host_;
  const int port_;
  const std::string address_;
  std::string local_address_;
  std::mutex mu_;
  std::vector<int> idle_;  // connections with no request in flight
};

StatusOr<std::vector<std::string>> TcpStoreClient::Call(const std::vector<std::string>& req,
                                                        milliseconds bound) {
  const auto deadline = Clock::now() + bound;
  int fd = -1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      fd = idle_.back();
      idle_.pop_back();
    }
  }
  if (fd < 0) {
    StatusOr<int> dialed = Dial(host_, port_, std::min(deadline, Clock::now() + kIoGrace));
    if (!dialed.ok()) return Unavailable("connect: " + dialed.status().message());
    fd = *dialed;
  }
  const std::string out = EncodeFrame(req);
  std::string why;
  for (size_t sent = 0; sent < out.size() && why.empty();) {
    const ssize_t n = ::send(fd, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (PollOne(fd, POLLOUT, deadline) != 1)
        why = "no progress sending within " + FormatDuration(bound);
    } else {
      why = std::string("send: ") + std::strerror(errno);
    }
  }
  std::string in;
  std::vector<std::string> reply;
  while (why.empty()) {
    const int64_t used = DecodeFrame(in, &reply);
    if (used < 0) why = "malformed reply";
    if (used > 0) break;
    if (!why.empty()) break;
    char buf[65536];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n > 0) {
      in.append(buf, static_cast<size_t>(n));
    } else if (n == 0) {
      why = "the connection was closed";
    } else if (errno == EAGAIN || errno == EINTR) {
      if (PollOne(fd, POLLIN, deadline) != 1) why = "no reply within " + FormatDuration(bound);
    } else {
      why = std::string("recv: ") + std::strerror(errno);
    }
  }
  if (!why.empty() || reply.empty()) {
    ::close(fd);
    return Unavailable(why.empty() ? "empty reply" : why);
  }
  std::lock_guard<std::mutex> lock(mu_);
  idle_.push_back(fd);
  return reply;
}

}  // namespace

// ---- Public entry points ----

StatusOr<std::shared_ptr<Store>> TcpStore::Connect(const std::string& address,
                                                   milliseconds timeout) {
  std::string host;
  int port = 0;
  if (!SplitHostPort(address, &host, &port)) {
    return InvalidArgumentError("store address \"" + address +
                                "\" is not host:port (e.g. \"127.0.0.1:29500\")");
  }
  const auto deadline = Clock::now() + timeout;
  Status last;
  for (int round = 0;; ++round) {
    StatusOr<int> fd = Dial(host, port, deadline);
    if (fd.ok()) return std::shared_ptr<Store>(new TcpStoreClient(host, port, address, *fd));
    last = fd.status();
    if (Clock::now() >= deadline) break;
    // The server may not be up yet: retry with a short, growing pause.
    std::this_thread::sleep_for(
        std::min(milliseconds(std::min(100, 5 << std::min(round, 5))), Left(deadline)));
  }
  return UnavailableError("could not connect to the store at " + address + " within " +
                          FormatDuration(timeout) + ": " + last.message());
}

}  // namespace trainyard::dist
