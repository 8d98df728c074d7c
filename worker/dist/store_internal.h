// Helpers shared by the Store implementations (store.cc, tcp_store.cc, tcp_store_server.cc).
// Not part of the public interface: include store.h instead.
#pragma once

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace trainyard::dist::store_internal {

using Clock = std::chrono::steady_clock;

// How long past a request's own timeout the client waits for the server's answer.
inline constexpr std::chrono::milliseconds kIoGrace{10000};

inline std::string Quote(const std::string& key) { return "\"" + key + "\""; }

inline std::string QuoteList(const std::vector<std::string>& keys) {
  std::string out;
  for (const std::string& k : keys) out += (out.empty() ? "" : ", ") + Quote(k);
  return out;
}

// Time left until `deadline`, never negative.
inline std::chrono::milliseconds Left(Clock::time_point deadline) {
  return std::max(std::chrono::milliseconds(0),
                  std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
}

// Parses all of `s` as a base-10 integer; false when it is not one.
inline bool ParseInt(const std::string& s, int64_t* v) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  *v = std::strtoll(s.c_str(), &end, 10);
  return errno == 0 && end == s.c_str() + s.size();
}

}  // namespace trainyard::dist::store_internal
