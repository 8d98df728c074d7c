// Choosing a node's advertised address: from an interface ("lo" exists everywhere these tests
// run), an address given outright, or the route to the coordinator.
#include "common/net_address.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace trainyard::net {
namespace {

bool Has(const Status& s, const std::string& part) {
  return std::string(s.message()).find(part) != std::string::npos;
}

TEST(NetAddressTest, LoopbackInterfaceHasItsIpv4Address) {
  const std::vector<std::string> names = InterfaceNames();
  EXPECT_NE(std::find(names.begin(), names.end(), "lo"), names.end());
  StatusOr<std::string> ip = InterfaceIpv4("lo");
  ASSERT_TRUE(ip.ok()) << ip.status();
  EXPECT_EQ(*ip, "127.0.0.1");
}

TEST(NetAddressTest, AnUnknownInterfaceIsNamedWithTheOnesThatExist) {
  StatusOr<std::string> ip = InterfaceIpv4("nosuch0");
  EXPECT_EQ(ip.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Has(ip.status(), "\"nosuch0\" does not exist")) << ip.status();
  EXPECT_TRUE(Has(ip.status(), "lo")) << ip.status();
  AdvertiseRequest r;
  r.interface = "nosuch0";
  r.coordinator = "10.1.2.3:7600";
  StatusOr<AdvertiseChoice> c = ChooseAdvertiseAddress(r);
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Has(c.status(), "--interface")) << c.status();
}

TEST(NetAddressTest, InterfaceAndAddressTogetherAreAnError) {
  AdvertiseRequest r;
  r.interface = "lo";
  r.advertise_address = "10.0.0.5";
  StatusOr<AdvertiseChoice> c = ChooseAdvertiseAddress(r);
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Has(c.status(), "both given")) << c.status();
}

TEST(NetAddressTest, InterfaceGivesBothTheAdvertisedAndTheListenAddress) {
  AdvertiseRequest r;
  r.interface = "lo";
  r.coordinator = "127.0.0.1:7600";
  StatusOr<AdvertiseChoice> c = ChooseAdvertiseAddress(r);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->advertise, "127.0.0.1");
  EXPECT_EQ(c->listen, "127.0.0.1");
}

TEST(NetAddressTest, AGivenAddressIsKeptAndResolvedForListening) {
  AdvertiseRequest r;
  r.advertise_address = "localhost";
  r.coordinator = "127.0.0.1:7600";
  StatusOr<AdvertiseChoice> c = ChooseAdvertiseAddress(r);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->advertise, "localhost");
  EXPECT_TRUE(IsLoopbackHost(c->listen)) << c->listen;
  r.advertise_address = "10.78.0.3";
  r.coordinator = "10.78.0.1:7600";
  c = ChooseAdvertiseAddress(r);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->listen, "10.78.0.3");
}

TEST(NetAddressTest, ALoopbackAddressForARemoteCoordinatorIsAnError) {
  AdvertiseRequest r;
  r.advertise_address = "127.0.0.1";
  r.coordinator = "10.78.0.1:7600";
  StatusOr<AdvertiseChoice> c = ChooseAdvertiseAddress(r);
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Has(c.status(), "loopback")) << c.status();
}

TEST(NetAddressTest, NeitherGivenUsesLoopbackForALoopbackCoordinator) {
  AdvertiseRequest r;
  r.coordinator = "localhost:7600";
  StatusOr<AdvertiseChoice> c = ChooseAdvertiseAddress(r);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->advertise, "127.0.0.1");
}

TEST(NetAddressTest, TheRouteToALoopbackPeerStartsOnLoopback) {
  StatusOr<std::string> ip = RouteSourceAddress("127.0.0.7", "7600");
  ASSERT_TRUE(ip.ok()) << ip.status();
  EXPECT_TRUE(IsLoopbackHost(*ip)) << *ip;
}

TEST(NetAddressTest, NeitherGivenFallsBackToTheHostNameWhenNoRouteIsFound) {
  AdvertiseRequest r;
  r.coordinator = "no-such-host.invalid:7600";
  r.host_name = [] { return std::string("localhost"); };
  StatusOr<AdvertiseChoice> c = ChooseAdvertiseAddress(r);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->advertise, "localhost");
}

TEST(NetAddressTest, SplitsHostAndPort) {
  EXPECT_EQ(SplitHostPort("10.0.0.1:7600"),
            std::make_pair(std::string("10.0.0.1"), std::string("7600")));
  EXPECT_EQ(SplitHostPort("[::1]:7600"), std::make_pair(std::string("::1"), std::string("7600")));
  EXPECT_EQ(SplitHostPort("coordinator"),
            std::make_pair(std::string("coordinator"), std::string()));
}

}  // namespace
}  // namespace trainyard::net
