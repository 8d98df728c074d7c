// Nodes in network namespaces for multi-node tests (ctest label `multinode`): a NetLab builds
// nodes, each a network namespace with a control interface `ctl0` (the coordinator's network)
// and, for workers, a data interface `data0` (the ranks' network), every node's end of a veth
// pair whose other end is a port of one of two bridges in the test's own namespace. The
// test process reaches the control network through the address the lab gives its control
// bridge; nothing is routed anywhere else.
//
//   control 10.a.b.0/25: bridge .126, node i at .(1 + i)     (ctl0)
//   data    10.a.b.128/25:                node i at .(129 + i) (data0)
//
// where a.b come from the test's pid and a counter, so that labs never share an address; names
// are "ty<id>n<i>" (namespaces), "t<id>c<i>" / "t<id>d<i>" (veths' bridge ends) and
// "t<id>C" / "t<id>D" (bridges), <id> being the pid and a letter. A link can be cut (its bridge end
// down: the node sees no carrier, as with a pulled cable), restored, and capped in bandwidth (tbf
// at both ends). Everything is removed on destruction, and leftovers of a test that was killed are
// removed by the next lab. Needs root (CAP_NET_ADMIN); Create() says so clearly when it is refused.
#pragma once

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "tests/testing/subprocess.h"

namespace trainyard::testing {

enum class Net { kControl, kData };

class NetLab {
 public:
  // Names and addresses are unique among the labs of this process (a counter) and, by the
  // pid, among concurrent tests; an address range some interface already has is skipped.
  NetLab() {
    static std::atomic<int> labs{0};
    const int pid = ::getpid();
    ProcessResult addrs =
        RunProcess({"/usr/sbin/ip", "-o", "-4", "addr", "show"}, std::chrono::seconds(10));
    for (int k = labs++; k < 1000; k = labs++) {
      id_ = std::to_string(pid) + static_cast<char>('a' + k % 26);
      prefix_ = "10." + std::to_string(64 + ((pid >> 8) + 37 * k) % 128) + "." +
                std::to_string((pid + k / 26) & 255);
      if (addrs.out.find(" " + prefix_ + ".") == std::string::npos) break;
    }
  }
  NetLab(const NetLab&) = delete;
  NetLab& operator=(const NetLab&) = delete;
  ~NetLab() { Destroy(); }

  // Builds the bridges and `nodes` namespaces (node 0 has only ctl0: the coordinator's; the
  // others both links). False with the failing command and its output in `error`.
  bool Create(int nodes, std::string* error) {
    RemoveLeftovers();
    nodes_ = nodes;
    std::vector<std::vector<std::string>> cmds = {
        {"link", "add", Bridge(Net::kControl), "type", "bridge"},
        {"link", "add", Bridge(Net::kData), "type", "bridge"},
        {"addr", "add", prefix_ + ".126/25", "dev", Bridge(Net::kControl)},
        {"link", "set", Bridge(Net::kControl), "up"},
        {"link", "set", Bridge(Net::kData), "up"}};
    for (int i = 0; i < nodes; ++i) {
      cmds.push_back({"netns", "add", Namespace(i)});
      cmds.push_back({"-n", Namespace(i), "link", "set", "lo", "up"});
      AddLink(i, Net::kControl, &cmds);
      if (i > 0) AddLink(i, Net::kData, &cmds);
    }
    for (const auto& c : cmds) {
      if (!Ip(c, error)) {
        *error =
            "cannot build the test's network namespaces (multinode tests need root: "
            "CAP_NET_ADMIN and CAP_SYS_ADMIN): " +
            *error;
        return false;
      }
    }
    return true;
  }

  // The node's address on a network ("10.a.b.2").
  std::string Address(int node, Net net) const {
    return prefix_ + "." + std::to_string(net == Net::kControl ? 1 + node : 129 + node);
  }
  // The test process's own address on the control network (its bridge's).
  std::string ControlBridgeAddress() const { return prefix_ + ".126"; }
  std::string Namespace(int node) const { return "ty" + id_ + "n" + std::to_string(node); }
  int nodes() const { return nodes_; }

  // Cuts or restores the node's link to a network.
  bool SetLink(int node, Net net, bool up, std::string* error) {
    return Ip({"link", "set", Veth(node, net), up ? "up" : "down"}, error);
  }
  // Caps the link both ways at `rate` (tc's syntax: "100mbit"); an empty rate removes the cap.
  bool Cap(int node, Net net, const std::string& rate, std::string* error) {
    const std::string dev = net == Net::kControl ? "ctl0" : "data0";
    const std::vector<std::string> tbf = {"root",  "tbf",   "rate",    rate,
                                          "burst", "256kb", "latency", "200ms"};
    std::vector<std::string> outer = {"tc", "qdisc", rate.empty() ? "del" : "replace", "dev",
                                      Veth(node, net)};
    std::vector<std::string> inner = {
        "ip",  "netns", "exec", Namespace(node), "tc", "qdisc", rate.empty() ? "del" : "replace",
        "dev", dev};
    for (auto* cmd : {&outer, &inner}) {
      if (rate.empty()) {
        cmd->push_back("root");
      } else {
        cmd->insert(cmd->end(), tbf.begin(), tbf.end());
      }
      if (!Run(*cmd, error)) return false;
    }
    return true;
  }

  // In a forked child before exec: moves it into the node's namespace (false on failure).
  bool EnterInChild(int node) const {
    const int fd = ::open(("/var/run/netns/" + Namespace(node)).c_str(), O_RDONLY | O_CLOEXEC);
    return fd >= 0 && ::setns(fd, CLONE_NEWNET) == 0;
  }

  void Destroy() {
    if (nodes_ == 0) return;
    std::string ignored;
    for (int i = 0; i < nodes_; ++i) {
      // The links first: a namespace goes away asynchronously, and its veths with it.
      Ip({"link", "del", Veth(i, Net::kControl)}, &ignored);
      if (i > 0) Ip({"link", "del", Veth(i, Net::kData)}, &ignored);
      Ip({"netns", "del", Namespace(i)}, &ignored);
    }
    Ip({"link", "del", Bridge(Net::kControl)}, &ignored);
    Ip({"link", "del", Bridge(Net::kData)}, &ignored);
    nodes_ = 0;
  }

 private:
  std::string Bridge(Net net) const { return "t" + id_ + (net == Net::kControl ? "C" : "D"); }
  std::string Veth(int node, Net net) const {
    return "t" + id_ + (net == Net::kControl ? "c" : "d") + std::to_string(node);
  }

  void AddLink(int i, Net net, std::vector<std::vector<std::string>>* cmds) const {
    const std::string inner = net == Net::kControl ? "ctl0" : "data0";
    const std::string ns = Namespace(i);
    cmds->push_back(
        {"link", "add", Veth(i, net), "type", "veth", "peer", "name", inner, "netns", ns});
    cmds->push_back({"link", "set", Veth(i, net), "master", Bridge(net), "up"});
    cmds->push_back({"-n", ns, "addr", "add", Address(i, net) + "/25", "dev", inner});
    cmds->push_back({"-n", ns, "link", "set", inner, "up"});
  }

  static bool Run(const std::vector<std::string>& argv, std::string* error) {
    std::vector<std::string> full = argv;
    full[0] = "/usr/sbin/" + full[0];
    ProcessResult r = RunProcess(full, std::chrono::seconds(10));
    if (r.exit_code == 0) return true;
    std::string cmd;
    for (const auto& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
    *error = "`" + cmd + "` failed (exit " + std::to_string(r.exit_code) + "): " + r.err;
    return false;
  }
  static bool Ip(std::vector<std::string> args, std::string* error) {
    args.insert(args.begin(), "ip");
    return Run(args, error);
  }

  // Namespaces and links named after a test process that no longer runs.
  static void RemoveLeftovers() {
    std::string ignored;
    ProcessResult ns = RunProcess({"/usr/sbin/ip", "netns", "list"}, std::chrono::seconds(10));
    ProcessResult links =
        RunProcess({"/usr/sbin/ip", "-o", "link", "show"}, std::chrono::seconds(10));
    auto dead = [](const std::string& name, size_t digits_at) {
      const pid_t pid = static_cast<pid_t>(std::atoi(name.c_str() + digits_at));
      return pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH;
    };
    for (size_t at = 0; (at = ns.out.find("ty", at)) != std::string::npos; ++at) {
      if (at > 0 && ns.out[at - 1] != '\n') continue;
      const std::string name = ns.out.substr(at, ns.out.find_first_of(" \n", at) - at);
      if (name.find('n', 2) != std::string::npos && dead(name, 2))
        Ip({"netns", "del", name}, &ignored);
    }
    for (size_t at = 0; (at = links.out.find(": t", at)) != std::string::npos; ++at) {
      const std::string name =
          links.out.substr(at + 2, links.out.find_first_of(":@", at + 2) - at - 2);
      if ((name.back() == 'C' || name.back() == 'D') && dead(name, 1)) {
        Ip({"link", "del", name}, &ignored);
      }
    }
  }

  std::string id_, prefix_;
  int nodes_ = 0;
};

}  // namespace trainyard::testing
