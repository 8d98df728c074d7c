// TcpStoreServer (store.h): one thread polls every connection and parks a get or wait until its
// keys are set or its timeout passes (Note [Store wire protocol] in tcp_store_wire.h).
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <map>
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
using store_internal::Left;
using store_internal::ParseInt;
using store_internal::Quote;

class TcpStoreServerImpl final : public TcpStoreServer {
 public:
  TcpStoreServerImpl(int listen_fd, int wake_read, int wake_write, std::string host, int port)
      : listen_fd_(listen_fd),
        wake_read_(wake_read),
        wake_write_(wake_write),
        host_(std::move(host)),
        port_(port) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~TcpStoreServerImpl() override {
    const char c = 0;
    while (::write(wake_write_, &c, 1) < 0 && errno == EINTR) {
    }
    thread_.join();
    for (auto& [fd, client] : clients_) ::close(fd);
    ::close(listen_fd_);
    ::close(wake_read_);
    ::close(wake_write_);
  }
  int port() const override { return port_; }
  std::string address() const override {
    return (host_.find(':') != std::string::npos ? "[" + host_ + "]" : host_) + ":" +
           std::to_string(port_);
  }

 private:
  struct Client {
    std::string in, out;
    // A parked get ("get") or wait ("wait"); empty when none.
    std::string waiting;
    std::vector<std::string> keys;
    Clock::time_point deadline;
  };

  void Loop();
  void Accept();
  // Reads what is there and answers complete requests; false when the client is gone.
  bool Read(Client& c, int fd);
  bool Write(Client& c, int fd);
  void Handle(Client& c, const std::vector<std::string>& req);
  // Answers the client's parked request if its keys are set or `expire` is true.
  void TryFinishWait(Client& c, bool expire);
  void ServeBuffered(Client& c);

  int listen_fd_, wake_read_, wake_write_;
  std::string host_;
  int port_;
  std::thread thread_;
  std::map<int, Client> clients_;  // by fd; touched by the loop thread only
  std::map<std::string, std::string> data_;
};

void TcpStoreServerImpl::Loop() {
  while (true) {
    std::vector<pollfd> fds = {{wake_read_, POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    Clock::time_point next = Clock::time_point::max();
    for (auto& [fd, c] : clients_) {
      fds.push_back({fd, static_cast<short>(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
      if (!c.waiting.empty()) next = std::min(next, c.deadline);
    }
    const int timeout_ms =
        next == Clock::time_point::max() ? -1 : static_cast<int>(Left(next).count()) + 1;
    if (::poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) return;
    if (fds[0].revents) return;  // destructor
    if (fds[1].revents & POLLIN) Accept();
    for (size_t i = 2; i < fds.size(); ++i) {
      auto it = clients_.find(fds[i].fd);
      bool alive = true;
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) alive = Read(it->second, it->first);
      if (alive && !it->second.out.empty()) alive = Write(it->second, it->first);
      if (!alive) {
        ::close(it->first);
        clients_.erase(it);
      }
    }
    const auto now = Clock::now();
    for (auto& [fd, c] : clients_) {
      if (!c.waiting.empty() && c.deadline <= now) TryFinishWait(c, /*expire=*/true);
    }
  }
}

void TcpStoreServerImpl::Accept() {
  while (true) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    clients_[fd];
  }
}

bool TcpStoreServerImpl::Read(Client& c, int fd) {
  char buf[65536];
  while (true) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n > 0) {
      c.in.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) return false;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    return false;
  }
  std::vector<std::string> req;
  while (c.waiting.empty()) {
    const int64_t used = DecodeFrame(c.in, &req);
    if (used < 0) return false;  // not our protocol: drop the connection
    if (used == 0) break;
    c.in.erase(0, static_cast<size_t>(used));
    Handle(c, req);
  }
  return true;
}

bool TcpStoreServerImpl::Write(Client& c, int fd) {
  while (!c.out.empty()) {
    const ssize_t n = ::send(fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
    if (n > 0) {
      c.out.erase(0, static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    }
  }
  return true;
}

void TcpStoreServerImpl::Handle(Client& c, const std::vector<std::string>& req) {
  const std::string op = req.empty() ? "" : req[0];
  int64_t num = 0;
  if (op == "set" && req.size() == 3) {
    data_[req[1]] = req[2];
    c.out += EncodeFrame({"ok"});
    for (auto& [fd, other] : clients_) TryFinishWait(other, false);
  } else if ((op == "get" && req.size() == 3 && ParseInt(req[2], &num)) ||
             (op == "wait" && req.size() >= 2 && ParseInt(req[1], &num))) {
    c.waiting = op;
    c.keys.assign(req.begin() + (op == "get" ? 1 : 2), op == "get" ? req.begin() + 2 : req.end());
    c.deadline = Clock::now() + milliseconds(num);
    TryFinishWait(c, num <= 0);
  } else if (op == "add" && req.size() == 3 && ParseInt(req[2], &num)) {
    int64_t cur = 0, sum = 0;
    auto it = data_.find(req[1]);
    if (it != data_.end() && !ParseInt(it->second, &cur)) {
      c.out +=
          EncodeFrame({"error", "key " + Quote(req[1]) + " holds a value that is not an integer"});
      return;
    }
    if (__builtin_add_overflow(cur, num, &sum)) {
      c.out += EncodeFrame({"error", "key " + Quote(req[1]) + " holds " + std::to_string(cur) +
                                         "; adding " + std::to_string(num) +
                                         " would overflow a 64-bit integer; use a new key"});
      return;
    }
    data_[req[1]] = std::to_string(sum);
    c.out += EncodeFrame({"ok", std::to_string(sum)});
    for (auto& [fd, other] : clients_) TryFinishWait(other, false);
  } else {
    c.out += EncodeFrame({"error", "malformed request " + Quote(op)});
  }
}

void TcpStoreServerImpl::TryFinishWait(Client& c, bool expire) {
  if (c.waiting.empty()) return;
  std::vector<std::string> missing;
  for (const std::string& k : c.keys) {
    if (data_.count(k) == 0) missing.push_back(k);
  }
  if (!missing.empty() && !expire) return;
  std::vector<std::string> reply = {missing.empty() ? "ok" : "timeout"};
  if (missing.empty() && c.waiting == "get") reply.push_back(data_[c.keys[0]]);
  reply.insert(reply.end(), missing.begin(), missing.end());
  c.out += EncodeFrame(reply);
  c.waiting.clear();
  c.keys.clear();
  ServeBuffered(c);
}

// Requests that arrived while one was parked.
void TcpStoreServerImpl::ServeBuffered(Client& c) {
  std::vector<std::string> req;
  while (c.waiting.empty()) {
    const int64_t used = DecodeFrame(c.in, &req);
    if (used <= 0) return;
    c.in.erase(0, static_cast<size_t>(used));
    Handle(c, req);
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
  const int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
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
  int wake[2];
  if (::pipe2(wake, O_CLOEXEC) != 0) {
    Status st = ErrnoStatus("store server: pipe");
    ::close(fd);
    return st;
  }
  return std::unique_ptr<TcpStoreServer>(
      new TcpStoreServerImpl(fd, wake[0], wake[1], host, actual));
}

}  // namespace trainyard::dist
