#include "proto/rpc.h"

#include <gtest/gtest.h>

namespace trainyard::rpc {
namespace {

TEST(RpcTest, LoopbackIsTheWhole127NetworkIpv6OneAndLocalhostOnly) {
  for (const char* a :
       {"127.0.0.1:7600", "127.1.2.3:1", "localhost:7600", "[::1]:7600", "::1", "127.0.0.1"}) {
    EXPECT_TRUE(IsLoopback(a)) << a;
  }
  for (const char* a :
       {"127.evil.example:7600", "10.0.0.1:7600", "coordinator:7600", "[::2]:1", "128.0.0.1"}) {
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
  EXPECT_NE(c.status().message().find("CA certificate /nonexistent/ca.pem: cannot read"),
            std::string::npos);
}

}  // namespace
}  // namespace trainyard::rpc

namespace trainyard::rpc {
namespace {

Status WithViolations(size_t n, const std::string& message) {
  std::vector<FieldViolation> v;
  for (size_t i = 0; i < n; ++i)
    v.push_back({"f" + std::to_string(i), "bad value " + std::to_string(i)});
  return InvalidArgumentError(message).WithFieldViolations(std::move(v));
}

// Note [Errors that arrive whole]: the code, the message (cut at a line past the cap) and the
// BadRequest field violations (cut past theirs, counting what was left out) survive the trip.
TEST(RpcErrorsTest, FieldViolationsRoundTripAndAreCappedWithACount) {
  Status back = FromGrpc(ToGrpc(WithViolations(3, "three problems")));
  EXPECT_EQ(back.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(back.message(), "three problems");
  ASSERT_EQ(back.field_violations().size(), 3u);
  EXPECT_EQ(back.field_violations()[2].field, "f2");
  EXPECT_EQ(back.field_violations()[2].description, "bad value 2");

  std::string long_message;
  for (int i = 0; i < 500; ++i) long_message += "line " + std::to_string(i) + " of a long list\n";
  grpc::Status wire = ToGrpc(WithViolations(5000, long_message));
  EXPECT_LE(wire.error_message().size(), kMaxStatusMessageBytes);
  EXPECT_LE(wire.error_details().size(), kMaxViolationBytes + kMaxSummaryBytes + 128);
  back = FromGrpc(wire);
  const std::vector<FieldViolation>& v = back.field_violations();
  ASSERT_GT(v.size(), 10u);
  EXPECT_EQ(v.back().field, "");
  const size_t left_out = std::strtoull(v.back().description.c_str() + 4, nullptr, 10);
  EXPECT_EQ(v.size() - 1 + left_out, 5000u) << v.back().description;

  // A list that already ends in its own count keeps it in the total.
  std::vector<FieldViolation> capped;
  for (int i = 0; i < 1000; ++i) capped.push_back({"f" + std::to_string(i), "bad"});
  capped.push_back({"", "and 29000 more"});
  back = FromGrpc(ToGrpc(InvalidArgumentError("x").WithFieldViolations(std::move(capped))));
  const size_t more =
      std::strtoull(back.field_violations().back().description.c_str() + 4, nullptr, 10);
  EXPECT_EQ(back.field_violations().size() - 1 + more, 30000u);
  // Codes without details pass as they are.
  EXPECT_EQ(FromGrpc(ToGrpc(PermissionDeniedError("no"))).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(FromGrpc(ToGrpc(UnauthenticatedError("who"))).code(), StatusCode::kUnauthenticated);
}

}  // namespace
}  // namespace trainyard::rpc
