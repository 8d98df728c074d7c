// Connecting Gloo's mesh (gloo_connect.cc): a peer that cannot be reached is named by rank with
// both ends of the pair. Rank 1 is faked: it joins and publishes, as its pair address for rank
// 0, a port nothing listens on, on another loopback address (127.0.0.x), as a peer on a wrong
// interface or behind a firewall would look.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <thread>

#include "worker/dist/process_group.h"
#include "worker/dist/store.h"

#ifdef TY_HAVE_GLOO
#include "gloo/transport/tcp/address.h"

namespace trainyard::dist {
namespace {

using std::chrono::milliseconds;

// ip:port where nothing listens: bound, read, closed.
sockaddr_in ClosedPort(const char* ip) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  ::inet_pton(AF_INET, ip, &a.sin_addr);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  socklen_t len = sizeof(a);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << ip;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return a;
}

// Rank 0 (listening on 127.0.0.5) joining a group of 2 whose rank 1 published `peer`.
Status ConnectToFakePeer(const sockaddr_in& peer, milliseconds timeout) {
  auto server = TcpStoreServer::Start();
  EXPECT_TRUE(server.ok()) << server.status();
  auto client = TcpStore::Connect((*server)->address(), std::chrono::seconds(5));
  EXPECT_TRUE(client.ok()) << client.status();
  auto store = std::make_shared<PrefixStore>("connect/", *client);
  std::thread fake([&] {
    EXPECT_TRUE(JoinGroup(*store, "gloo", 1, 2, timeout).ok());
    sockaddr_storage ss{};
    std::memcpy(&ss, &peer, sizeof(peer));
    const std::vector<char> bytes = gloo::transport::tcp::Address(ss, 0).bytes();
    EXPECT_TRUE(store->Set("gloo/1", std::string(bytes.begin(), bytes.end())).ok());
  });
  ProcessGroupOptions options;
  options.timeout = timeout;
  options.hostname = "127.0.0.5";
  auto group = CreateProcessGroup("gloo", store, 0, 2, options);
  fake.join();
  return group.status();
}

std::string Where(const sockaddr_in& a) {
  char ip[INET_ADDRSTRLEN] = {0};
  ::inet_ntop(AF_INET, &a.sin_addr, ip, sizeof(ip));
  return std::string(ip) + ":" + std::to_string(ntohs(a.sin_port));
}

TEST(GlooConnectTest, APeerRefusingTheConnectionIsNamedWithBothAddresses) {
  // 127.0.0.4 < 127.0.0.5: rank 0 dials (Gloo's lower address listens).
  const sockaddr_in peer = ClosedPort("127.0.0.4");
  const Status st = ConnectToFakePeer(peer, milliseconds(2000));
  std::printf("%s\n", st.ToString().c_str());
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st;
  const std::string msg(st.message());
  EXPECT_NE(msg.find("gloo: rank 0 at 127.0.0.5:"), std::string::npos) << st;
  EXPECT_NE(msg.find("could not connect to rank 1 at " + Where(peer) + ": Connection refused"),
            std::string::npos)
      << st;
}

TEST(GlooConnectTest, APeerThatNeverDialsIsNamedAfterTheTimeout) {
  // 127.0.0.9 > 127.0.0.5: rank 0 listens for rank 1, which never comes.
  const sockaddr_in peer = ClosedPort("127.0.0.9");
  const Status st = ConnectToFakePeer(peer, milliseconds(100));
  std::printf("%s\n", st.ToString().c_str());
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st;
  const std::string msg(st.message());
  EXPECT_NE(msg.find("gloo: rank 0 at 127.0.0.5:"), std::string::npos) << st;
  EXPECT_NE(msg.find("could not connect to rank 1 at " + Where(peer) + ": timed out"),
            std::string::npos)
      << st;
}

}  // namespace
}  // namespace trainyard::dist
#endif  // TY_HAVE_GLOO
