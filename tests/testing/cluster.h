// A real Trainyard service on loopback for end-to-end tests: trainyard-coordinator and N
// trainyard-worker processes (the built binaries), with their logs in a test directory, the
// C++ client connected, and ways to kill and restart each process. Every wait is bounded.
#pragma once

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "client/service_client.h"
#include "tests/testing/netns.h"
#include "tests/testing/pki.h"

namespace trainyard::testing {

using namespace std::chrono_literals;

// Polls `done` every 20 ms until it holds or `timeout` passes.
inline bool WaitUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// GET http://address/path (address "127.0.0.1:port"); "" on failure. Bounded by 5 s.
inline std::string HttpGet(const std::string& address, const std::string& path) {
  const size_t colon = address.rfind(':');
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  ::inet_pton(AF_INET, address.substr(0, colon).c_str(), &sa.sin_addr);
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0) {
    const std::string req = "GET " + path + " HTTP/1.0\r\nHost: " + address + "\r\n\r\n";
    if (::write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
      char buf[65536];
      for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;)
        out.append(buf, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  return out;
}

// One daemon process, output to a log file, killed with the test (PR_SET_PDEATHSIG).
class Daemon {
 public:
  Daemon() = default;
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;
  ~Daemon() { Kill(SIGKILL); }

  // Runs argv with its output appended to `log`; inside node `node` of `lab` when one is given.
  void Start(std::vector<std::string> argv, const std::string& log, const NetLab* lab = nullptr,
             int node = 0) {
    Kill(SIGKILL);
    log_ = log;
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    std::vector<char*> args;
    for (std::string& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
      if (lab != nullptr && !lab->EnterInChild(node)) ::_exit(126);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    ::close(fd);
  }
  // Sends `sig`; for SIGKILL / SIGTERM also waits (up to 20 s) for the exit.
  void Kill(int sig) {
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    if (sig != SIGKILL && sig != SIGTERM) return;
    const bool gone = WaitUntil([&] { return ::waitpid(pid_, nullptr, WNOHANG) == pid_; }, 20s);
    if (!gone) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    pid_ = -1;
  }
  bool running() { return pid_ > 0 && ::waitpid(pid_, nullptr, WNOHANG) == 0; }
  pid_t pid() const { return pid_; }
  std::string log() const { return ReadFile(log_); }

 private:
  pid_t pid_ = -1;
  std::string log_;
};

// The pids of `parent`'s children.
inline std::vector<pid_t> ChildrenOf(pid_t parent) {
  std::vector<pid_t> out;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return out;
  while (dirent* d = ::readdir(proc)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(d->d_name));
    if (pid <= 0) continue;
    const std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    std::string state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent) out.push_back(pid);
  }
  ::closedir(proc);
  return out;
}

struct ClusterOptions {
  int workers = 2;
  int slots = 1;
  double heartbeat_timeout = 10;
  std::vector<std::string> coordinator_flags;  // e.g. TLS and tokens
  std::vector<std::string> worker_flags;       // "{name}" in a flag becomes the worker's name
  client::ConnectOptions connect;              // TLS and token of the test's client
  // Each process on a node of its own (netns.h): the coordinator on node 0, worker i on node
  // i + 1, ranks binding the data network; the test's client reaches the coordinator through
  // the control bridge.
  bool namespaced = false;
};

class Cluster {
 public:
  Cluster(std::string dir, ClusterOptions o)
      : dir_(std::move(dir)), o_(std::move(o)), workers_(static_cast<size_t>(o_.workers)) {}

  // Starts the coordinator (on a port it picks, kept across restarts) and the workers, and
  // waits until every worker is registered. False (with the logs in `error`) on failure.
  bool Start(std::string* error) {
    if (o_.namespaced) {
      lab_ = std::make_unique<NetLab>();
      if (!lab_->Create(o_.workers + 1, error) || !Secure(error)) return false;
    }
    if (!StartCoordinator(error)) return false;
    for (int i = 0; i < o_.workers; ++i) StartWorker(i);
    const bool all = WaitUntil([&] { return AliveWorkers() == o_.workers; }, 30s);
    if (!all) *error = "workers did not register:\n" + Logs();
    return all;
  }

  bool StartCoordinator(std::string* error) {
    const std::string ready = dir_ + "/coordinator.ready";
    ::unlink(ready.c_str());
    // A flag and its value per line.
    // clang-format off
    std::vector<std::string> argv = {std::string(TY_BIN_DIR) + "/trainyard-coordinator",
        "--listen", Host(0) + ":" + std::to_string(port_),
        "--metrics-listen", Host(0) + ":0",
        "--state-dir", dir_ + "/state",
        "--checkpoint-root", dir_ + "/checkpoints",
        "--heartbeat-timeout", std::to_string(o_.heartbeat_timeout),
        "--ready-file", ready};
    // clang-format on
    argv.insert(argv.end(), o_.coordinator_flags.begin(), o_.coordinator_flags.end());
    coordinator_.Start(argv, dir_ + "/coordinator.log", lab_.get(), 0);
    if (!WaitUntil([&] { return !ReadFile(ready).empty() || !coordinator_.running(); }, 20s) ||
        ReadFile(ready).empty()) {
      *error = "coordinator did not start:\n" + coordinator_.log();
      return false;
    }
    std::istringstream lines(ReadFile(ready));
    lines >> address_ >> metrics_;
    port_ = std::stoi(address_.substr(address_.rfind(':') + 1));
    client::ConnectOptions co = o_.connect;
    co.coordinator = address_;
    auto c = client::ServiceClient::Connect(co);
    if (!c.ok()) {
      *error = std::string(c.status().message());
      return false;
    }
    client_ = *std::move(c);
    return true;
  }

  void StartWorker(int i) {
    // A flag and its value per line.
    // clang-format off
    std::vector<std::string> argv = {std::string(TY_BIN_DIR) + "/trainyard-worker",
        "--coordinator", address_,
        "--name", "w" + std::to_string(i),
        "--cpu-slots", std::to_string(o_.slots),
        "--metrics-listen", Host(i + 1) + ":0",
        "--work-dir", dir_ + "/w" + std::to_string(i),
        "--grace", "5"};
    // clang-format on
    if (lab_) argv.insert(argv.end(), {"--interface", "data0"});  // the ranks bind data0
    for (std::string flag : o_.worker_flags) {
      if (size_t at = flag.find("{name}"); at != std::string::npos) {
        flag.replace(at, 6, "w" + std::to_string(i));
      }
      argv.push_back(std::move(flag));
    }
    workers_[static_cast<size_t>(i)].Start(argv, dir_ + "/w" + std::to_string(i) + ".log",
                                           lab_.get(), i + 1);
  }

  int AliveWorkers() {
    auto listed = client_->ListWorkers();
    if (!listed.ok()) return 0;
    int n = 0;
    for (const auto& w : *listed) n += w.alive();
    return n;
  }

  Daemon& coordinator() { return coordinator_; }
  // The namespaces (null unless ClusterOptions::namespaced): node 0 is the coordinator's,
  // node i + 1 worker i's.
  NetLab* lab() { return lab_.get(); }
  Daemon& worker(int i) { return workers_[static_cast<size_t>(i)]; }
  client::ServiceClient& client() { return *client_; }
  const std::string& address() const { return address_; }
  const std::string& metrics_address() const { return metrics_; }
  const std::string& dir() const { return dir_; }

  // The rank processes under worker i.
  std::vector<pid_t> RankPids(int i) { return ChildrenOf(worker(i).pid()); }

  // Every process's log, for failure messages.
  std::string Logs() {
    std::string out = "--- coordinator\n" + coordinator_.log();
    for (size_t i = 0; i < workers_.size(); ++i) {
      out += "--- worker " + std::to_string(i) + "\n" + workers_[i].log();
    }
    return out;
  }

 private:
  // Off loopback the coordinator requires TLS: mutual TLS with a test CA (the server's
  // certificate for its control address, worker i's with CN w<i>) and a client token.
  bool Secure(std::string* error) {
    const std::string pki = dir_ + "/pki";
    std::vector<TestCert> certs = {{"server", "server", "IP:" + lab_->Address(0, Net::kControl)}};
    for (int i = 0; i < o_.workers; ++i) {
      const std::string w = "w" + std::to_string(i);
      certs.push_back({w, w, "DNS:" + w});
    }
    if (!MakeTestPki(pki, certs)) {
      *error = "openssl could not make the test's certificates in " + pki;
      return false;
    }
    std::ofstream(pki + "/tokens") << "test-token tester\n";
    o_.coordinator_flags.insert(
        o_.coordinator_flags.end(),
        {"--tls-cert", pki + "/server.pem", "--tls-key", pki + "/server.key", "--tls-client-ca",
         pki + "/ca.pem", "--tokens-file", pki + "/tokens"});
    o_.worker_flags.insert(o_.worker_flags.end(),
                           {"--ca-cert", pki + "/ca.pem", "--cert", pki + "/{name}.pem", "--key",
                            pki + "/{name}.key"});
    o_.connect.channel.tls.ca = pki + "/ca.pem";
    o_.connect.token = "test-token";
    return true;
  }

  // Node `node`'s address on the control network (loopback when not namespaced).
  std::string Host(int node) const {
    return lab_ ? lab_->Address(node, Net::kControl) : "127.0.0.1";
  }

  std::string dir_;
  ClusterOptions o_;
  std::unique_ptr<NetLab> lab_;  // outlives the processes in it
  Daemon coordinator_;
  std::vector<Daemon> workers_;
  int port_ = 0;
  std::string address_, metrics_;
  std::unique_ptr<client::ServiceClient> client_;
};

// Follows a job's events from another thread; Wait() looks for one.
class JobWatch {
 public:
  JobWatch(client::ServiceClient& c, std::string id) : id_(std::move(id)) {
    thread_ = std::thread([this, &c] {
      Status s = c.Watch(
          id_,
          [this](const v1::JobEvent& e) {
            std::lock_guard<std::mutex> lock(mu_);
            events_.push_back(e);
            cv_.notify_all();
            return true;
          },
          std::chrono::seconds(60), &stop_);
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
      status_ = s;
      cv_.notify_all();
    });
  }
  // Ends the watch at once (its call is cancelled), with or without events to come.
  ~JobWatch() {
    stop_.Stop();
    thread_.join();
  }

  // Waits for an event matching `match`, looking at those already seen too.
  bool Wait(const std::function<bool(const v1::JobEvent&)>& match,
            std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] {
      for (const auto& e : events_) {
        if (match(e)) return true;
      }
      return false;
    });
  }
  bool WaitForState(v1::JobState s, std::chrono::milliseconds timeout) {
    return Wait([&](const v1::JobEvent& e) { return e.has_state() && e.state().to() == s; },
                timeout);
  }
  // Waits for the watch to end (the job ended).
  bool WaitDone(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return done_; });
  }
  std::vector<v1::JobEvent> events() {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }
  std::string Describe() {
    std::string out;
    for (const auto& e : events()) {
      if (!e.has_step()) out += e.ShortDebugString() + "\n";
    }
    return out;
  }

 private:
  std::string id_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<v1::JobEvent> events_;
  bool done_ = false;
  Status status_;
  client::WatchStop stop_;
  std::thread thread_;
};

}  // namespace trainyard::testing
