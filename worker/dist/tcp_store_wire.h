// The framing TcpStoreServer (tcp_store_server.cc) and TcpStore (tcp_store.cc) speak. Internal
// to the store; include store.h instead.
//
// Note [Store wire protocol]
// A frame is a list of byte strings: u32 count, then for each string u32 length and the bytes
// (integers little-endian). The client sends one request frame on a connection and reads one
// reply frame before it sends the next, so a connection has at most one request in flight:
//   {"set", key, value}        -> {"ok"}
//   {"get", key, timeout_ms}   -> {"ok", value} | {"timeout"}
//   {"wait", timeout_ms, keys} -> {"ok"} | {"timeout", missing keys...}
//   {"add", key, delta}        -> {"ok", sum}
// and any of them -> {"error", message, StatusCode as a decimal} when the store core
// (common/rendezvous.h) refuses it (a key or value over its limits, an add to a value that
// is not an integer or past int64). The server blocks a get or wait in the core until its
// keys are set or its timeout passes, so waiting costs no polling. The client bounds every
// exchange by the request's own timeout plus kIoGrace; a closed connection is Unavailable at
// once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainyard::dist::store_internal {

// One frame holding `fields`.
std::string EncodeFrame(const std::vector<std::string>& fields);

// Parses one frame at the front of `buf`: the bytes it took, 0 when incomplete, -1 when
// malformed.
int64_t DecodeFrame(const std::string& buf, std::vector<std::string>* fields);

}  // namespace trainyard::dist::store_internal
