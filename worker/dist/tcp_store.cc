// TcpStoreServer and TcpStore.
//
// Note [Store wire protocol]
// A frame is a list of byte strings: u32 count, then for each string u32 length and the bytes
// (integers little-endian). The client sends one request frame on a connection and reads one
// reply frame before it sends the next, so a connection has at most one request in flight:
//   {"set", key, value}        -> {"ok"}
//   {"get", key, timeout_ms}   -> {"ok", value} | {"timeout"}
//   {"wait", timeout_ms, keys} -> {"ok"} | {"timeout", missing keys...}
//   {"add", key, delta}        -> {"ok", sum} | {"error", message}
// The server parks a get or wait whose keys are missing until they are set or its timeout
// passes, so waiting costs no polling. The client bounds every exchange by the request's own
// timeout plus kIoGrace; a closed connection is Unavailable at once.
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
#include <map>
#include <mutex>
#include <thread>

#include "worker/dist/store.h"
#include "worker/dist/store_internal.h"

namespace trainyard::dist {
namespace {

using std::chrono::milliseconds;
using store_internal::Clock;
using store_internal::kIoGrace;
using store_internal::Left;
using store_internal::ParseInt;
using store_internal::Quote;
using store_internal::QuoteList;

constexpr uint32_t kMaxFields = 1u << 16;
constexpr uint32_t kMaxFieldBytes = 1u << 30;

// ---- Frames (Note [Store wire protocol]) ----

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

std::string EncodeFrame(const std::vector<std::string>& fields) {
  std::string out;
  PutU32(&out, static_cast<uint32_t>(fields.size()));
  for (const std::string& f : fields) {
    PutU32(&out, static_cast<uint32_t>(f.size()));
    out += f;
  }
  return out;
}

// Parses one frame at the front of `buf`: the bytes it took, 0 when incomplete, -1 when
// malformed.
int64_t DecodeFrame(const std::string& buf, std::vector<std::string>* fields) {
  size_t pos = 0;
  if (buf.size() < 4) return 0;
  const uint32_t n = GetU32(buf.data());
  if (n > kMaxFields) return -1;
  pos = 4;
  fields->clear();
  for (uint32_t i = 0; i < n; ++i) {
    if (buf.size() < pos + 4) return 0;
    const uint32_t len = GetU32(buf.data() + pos);
    if (len > kMaxFieldBytes) return -1;
    pos += 4;
    if (buf.size() < pos + len) return 0;
    fields->emplace_back(buf, pos, len);
    pos += len;
  }
  return static_cast<int64_t>(pos);
}

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

// ---- Server ----

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
    int64_t cur = 0;
    auto it = data_.find(req[1]);
    if (it != data_.end() && !ParseInt(it->second, &cur)) {
      c.out +=
          EncodeFrame({"error", "key " + Quote(req[1]) + " holds a value that is not an integer"});
      return;
    }
    data_[req[1]] = std::to_string(cur + num);
    c.out += EncodeFrame({"ok", std::to_string(cur + num)});
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
    return Call({"set", key, value}, kIoGrace).status();
  }
  StatusOr<std::string> Get(const std::string& key, milliseconds timeout) override {
    ASSIGN_OR_RETURN(auto reply,
                     Call({"get", key, std::to_string(timeout.count())}, timeout + kIoGrace));
    if (reply[0] == "ok" && reply.size() == 2) return reply[1];
    return DeadlineExceededError("store " + address_ + ": key " + Quote(key) +
                                 " was not set within " + FormatDuration(timeout));
  }
  Status Wait(const std::vector<std::string>& keys, milliseconds timeout) override {
    std::vector<std::string> req = {"wait", std::to_string(timeout.count())};
    req.insert(req.end(), keys.begin(), keys.end());
    ASSIGN_OR_RETURN(auto reply, Call(req, timeout + kIoGrace));
    if (reply[0] == "ok") return OkStatus();
    return DeadlineExceededError("store " + address_ + ": keys still missing after " +
                                 FormatDuration(timeout) + ": " +
                                 QuoteList({reply.begin() + 1, reply.end()}));
  }
  StatusOr<int64_t> Add(const std::string& key, int64_t delta) override {
    ASSIGN_OR_RETURN(auto reply, Call({"add", key, std::to_string(delta)}, kIoGrace));
    int64_t sum = 0;
    if (reply[0] == "ok" && reply.size() == 2 && ParseInt(reply[1], &sum)) return sum;
    return InvalidArgumentError("store " + address_ + ": add to " + Quote(key) + ": " +
                                (reply.size() > 1 ? reply[1] : "bad reply"));
  }
  std::string LocalAddressHint() const override { return local_address_; }

 private:
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
