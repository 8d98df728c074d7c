// A real Prometheus server for end-to-end tests (Debian's `prometheus` package,
// /usr/bin/prometheus): started on a free loopback port with a given configuration and its
// storage in a test directory, queried through its HTTP API, killed with the test. Every wait
// is bounded.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <string>

#include "common/json.h"
#include "common/status.h"
#include "tests/testing/cluster.h"

namespace trainyard::testing {

inline constexpr const char* kPrometheusBinary = "/usr/bin/prometheus";

// A loopback TCP port free now (bound and released; another process could take it first).
inline int FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(sa);
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0) {
    port = ntohs(sa.sin_port);
  }
  ::close(fd);
  return port;
}

// Percent-encodes everything but RFC 3986's unreserved characters.
inline std::string UrlEncode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

class PrometheusServer {
 public:
  // Writes `config` (prometheus.yml's format) to dir/prometheus.yml and starts Prometheus on
  // it, its storage in dir/tsdb; waits (up to 30 s) until it is ready. False with its log in
  // `error` otherwise.
  bool Start(const std::string& dir, const std::string& config, std::string* error) {
    std::ofstream(dir + "/prometheus.yml") << config;
    address_ = "127.0.0.1:" + std::to_string(FreeLoopbackPort());
    process_.Start({kPrometheusBinary, "--config.file=" + dir + "/prometheus.yml",
                    "--storage.tsdb.path=" + dir + "/tsdb", "--web.listen-address=" + address_,
                    "--log.level=warn"},
                   dir + "/prometheus.log");
    const bool ready = WaitUntil(
        [&] { return !process_.running() || Get("/-/ready").find(" 200 ") != std::string::npos; },
        std::chrono::seconds(30));
    if (!ready || !process_.running()) {
      *error = "prometheus did not get ready on " + address_ + ":\n" + process_.log();
      return false;
    }
    return true;
  }

  // The whole HTTP response of GET path ("" when nothing answered).
  std::string Get(const std::string& path) { return HttpGet(address_, path); }

  // The `data` of an API call's JSON answer (/api/v1/...); an error names the path and the
  // answer when the call fails or its status is not "success".
  StatusOr<Json> Api(const std::string& path) {
    const std::string response = Get(path);
    const size_t body = response.find("\r\n\r\n");
    if (body == std::string::npos) return UnavailableError("GET " + path + ": no answer");
    StatusOr<Json> json = Json::Parse(std::string_view(response).substr(body + 4));
    const Json* status = json.ok() ? json->Find("status") : nullptr;
    if (status == nullptr || !status->is_string() || status->string_value() != "success" ||
        json->Find("data") == nullptr) {
      return InternalError("GET " + path + ": " + response.substr(0, 2000));
    }
    return *json->Find("data");
  }

  // An instant query's result (an array of samples for a vector).
  StatusOr<Json> Query(const std::string& promql) {
    ASSIGN_OR_RETURN(Json data, Api("/api/v1/query?query=" + UrlEncode(promql)));
    const Json* result = data.Find("result");
    if (result == nullptr) return InternalError("query " + promql + ": no result in the answer");
    return *result;
  }

  // SIGTERM, then SIGKILL after 20 s; the destructor kills it too.
  void Stop() { process_.Kill(SIGTERM); }
  std::string log() const { return process_.log(); }
  const std::string& address() const { return address_; }

 private:
  Daemon process_;
  std::string address_;
};

}  // namespace trainyard::testing
