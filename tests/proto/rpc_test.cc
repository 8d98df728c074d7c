#include "proto/rpc.h"

#include <gtest/gtest.h>

namespace trainyard::rpc {
namespace {

TEST(RpcTest, LoopbackIsTheWhole127NetworkIpv6OneAndLocalhostOnly) {
  for (const char* a : {"127.0.0.1:7600", "127.1.2.3:1", "localhost:7600", "[::1]:7600", "::1", "127.0.0.1"}) {
    EXPECT_TRUE(IsLoopback(a)) << a;
  }
  for (const char* a : {"127.evil.example:7600", "10.0.0.1:7600", "coordinator:7600", "[::2]:1", "128.0.0.1"}) {
    EXPECT_FALSE(IsLoopback(a)) << a;
  }
}

TEST(RpcTest, PlaintextToARemoteAddressIsRefusedUnlessAllowed) {
  StatusOr<std::shared_ptr<grpc::Channel>> c = MakeChannel("10.0.0.1:7600", {});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("refusing plaintext to 10.0.0.1:7600"), std::string::npos);
  ChannelOptions allowed;
  allowed.plaintext_remote = true;
  EXPECT_TRUE(MakeChannel("10.0.0.1:7600", allowed).ok());
  EXPECT_TRUE(MakeChannel("127.0.0.1:7600", {}).ok());
}

TEST(RpcTest, TlsFilesThatAreNotPemAreNamed) {
  ChannelOptions o;
  o.tls.ca = "/nonexistent/ca.pem";
  StatusOr<std::shared_ptr<grpc::Channel>> c = MakeChannel("10.0.0.1:7600", o);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("CA certificate /nonexistent/ca.pem: cannot read"), std::string::npos);
}

}  // namespace
}  // namespace trainyard::rpc
