// TcpStoreServer (store.h): the store core (common/rendezvous.h, what the coordinator serves
// over gRPC) served over TCP in one scope. One thread accepts; each connection has a thread
// that answers its requests in order, blocking in the core for a get or wait as a gRPC call
// does (Note [Store wire protocol] in tcp_store_wire.h).
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <list>
#include <mutex>
#include <thread>

#include "common/random_id.h"
#include "common/rendezvous.h"
#include "worker/dist/store.h"
#include "worker/dist/store_internal.h"
#include "worker/dist/tcp_store_wire.h"

namespace trainyard::dist {
namespace {

using std::chrono::milliseconds;
using store_internal::DecodeFrame;
using store_internal::EncodeFrame;
using store_internal::ParseInt;
using store_internal::Quote;

std::vector<std::string> Error(const Status& s) {
  return {"error", std::string(s.message()), std::to_string(static_cast<int>(s.code()))};
}

// The core's answer to one request frame, as a reply frame.
std::vector<std::string> Answer(Rendezvous& core, const Rendezvous::Scope& scope,
                                const std::vector<std::string>& req) {
  const std::string op = req.empty() ? "" : req[0];
  int64_t num = 0;
  if (op == "set" && req.size() == 3) {
    Status s = core.Set(scope, req[1], req[2]);
    return s.ok() ? std::vector<std::string>{"ok"} : Error(s);
  }
  if (op == "get" && req.size() == 3 && ParseInt(req[2], &num)) {
    StatusOr<std::string> v = core.Get(scope, req[1], milliseconds(std::max<int64_t>(num, 0)));
    if (v.ok()) return {"ok", *std::move(v)};
    if (v.status().code() == StatusCode::kDeadlineExceeded) return {"timeout"};
    return Error(v.status());
  }
  if (op == "wait" && req.size() >= 2 && ParseInt(req[1], &num)) {
    std::vector<std::string> missing;
    Status s = core.Wait(scope, {req.begin() + 2, req.end()},
                         milliseconds(std::max<int64_t>(num, 0)), &missing);
    if (s.ok()) return {"ok"};
    if (s.code() != StatusCode::kDeadlineExceeded) return Error(s);
    missing.insert(missing.begin(), "timeout");
    return missing;
  }
  if (op == "add" && req.size() == 3 && ParseInt(req[2], &num)) {
    StatusOr<int64_t> sum = core.Add(scope, req[1], num);
    if (!sum.ok()) return Error(sum.status());
    return {"ok", std::to_string(*sum)};
  }
  return Error(InvalidArgumentError("malformed request " + Quote(op)));
}

// Writes all of `bytes`; false when the connection is gone.
bool SendAll(int fd, const std::string& bytes) {
  for (size_t sent = 0; sent < bytes.size();) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

class TcpStoreServerImpl final : public TcpStoreServer {
 public:
  TcpStoreServerImpl(int listen_fd, std::string host, int port)
      : listen_fd_(listen_fd), host_(std::move(host)), port_(port) {
    core_.Open(scope_);
    acceptor_ = std::thread([this] { Accept(); });
  }
  // Closing the scope wakes every parked get and wait, which then go unanswered (their
  // clients see the server gone: Unavailable); shutting the sockets down ends every thread's
  // blocking accept or recv.
  ~TcpStoreServerImpl() override {
    stopping_ = true;
    core_.Close(scope_.job_id, scope_.attempt);
    ::shutdown(listen_fd_, SHUT_RDWR);
    acceptor_.join();
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const Connection& c : connections_) ::shutdown(c.fd, SHUT_RDWR);
    }
    for (Connection& c : connections_) c.thread.join();
    for (const Connection& c : connections_) ::close(c.fd);
    ::close(listen_fd_);
  }
  int port() const override { return port_; }
  std::string address() const override {
    return (host_.find(':') != std::string::npos ? "[" + host_ + "]" : host_) + ":" +
           std::to_string(port_);
  }

 private:
  struct Connection {
    int fd;
    std::thread thread;
  };

  void Accept();
  void Serve(int fd);

  const int listen_fd_;
  const std::string host_;
  const int port_;
  Rendezvous core_;
  const Rendezvous::Scope scope_{"local", 1, RandomHex(16)};
  std::thread acceptor_;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::list<Connection> connections_;  // guarded by mu_ until the acceptor has stopped
};

void TcpStoreServerImpl::Accept() {
  while (true) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // shut down by the destructor
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    std::lock_guard<std::mutex> lock(mu_);
    connections_.push_back({fd, std::thread([this, fd] { Serve(fd); })});
  }
}

void TcpStoreServerImpl::Serve(int fd) {
  std::string in;
  std::vector<std::string> req;
  char buf[65536];
  while (true) {
    const int64_t used = DecodeFrame(in, &req);
    if (used < 0) return;  // not our protocol: stop answering
    if (used > 0) {
      in.erase(0, static_cast<size_t>(used));
      const std::vector<std::string> reply = Answer(core_, scope_, req);
      if (stopping_ || !SendAll(fd, EncodeFrame(reply))) return;
      continue;
    }
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    in.append(buf, static_cast<size_t>(n));
  }
}

}  // namespace

StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Start(const std::string& host, int port) {
  const std::string where = host + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const int gai = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (gai != 0) {
    return InvalidArgumentError("store server: cannot resolve " + where + ": " +
                                ::gai_strerror(gai));
  }
  const int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  if (fd < 0 || ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
      ::bind(fd, res->ai_addr, res->ai_addrlen) != 0 || ::listen(fd, 1024) != 0) {
    Status st = ErrnoStatus("store server: cannot listen on " + where);
    if (fd >= 0) ::close(fd);
    ::freeaddrinfo(res);
    return UnavailableError(st.message());
  }
  ::freeaddrinfo(res);
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  const int actual =
      ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                        : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return std::unique_ptr<TcpStoreServer>(new TcpStoreServerImpl(fd, host, actual));
}

}  // namespace trainyard::dist
