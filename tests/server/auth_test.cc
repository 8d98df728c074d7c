// The tokens file's grammar and worker-name binding (server/auth.h). The calls themselves, over
// real TLS channels, are tests/service/security_test.cc.
#include "server/auth.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "tests/testing/temp_dir.h"

namespace trainyard::server {
namespace {

using ::testing::HasSubstr;

TEST(ParseTokensTest, ReadsNamesRolesAndPatterns) {
  StatusOr<std::vector<TokenEntry>> t = ParseTokens(
      "# comment\n"
      "aaa alice\n"
      "bbb ci client   # trailing comment\n"
      "\n"
      "ccc w0 worker\n"
      "ddd nodes worker=gpu-*\n",
      "tokens");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->size(), 4u);
  EXPECT_EQ((*t)[0].name, "alice");
  EXPECT_EQ((*t)[0].role, Role::kClient);
  EXPECT_EQ((*t)[1].token, "bbb");
  EXPECT_EQ((*t)[1].role, Role::kClient);
  EXPECT_EQ((*t)[2].role, Role::kWorker);
  EXPECT_EQ((*t)[2].worker_pattern, "w0");
  EXPECT_EQ((*t)[3].role, Role::kWorker);
  EXPECT_EQ((*t)[3].worker_pattern, "gpu-*");
}

TEST(ParseTokensTest, RefusesWhatItCannotReadNamingTheLine) {
  struct Case {
    const char* text;
    const char* message;
  };
  for (const Case& c : {
           Case{"aaa\n", "line 1: has 1 field; expected TOKEN NAME"},
           Case{"aaa alice\nbbb bob admin\n", "line 2: role \"admin\""},
           Case{"aaa alice worker=\n", "role \"worker=\""},
           Case{"aaa a/b\n", "name \"a/b\" must be"},
           Case{"aaa alice\naaa bob\n", "line 2: repeats the token of line 1"},
           Case{"# only comments\n\n", "holds no token"},
           Case{"aaa b c d\n", "has 4 fields"},
       }) {
    StatusOr<std::vector<TokenEntry>> t = ParseTokens(c.text, "--tokens-file f");
    ASSERT_FALSE(t.ok()) << c.text;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(t.status().message(), HasSubstr(c.message)) << c.text;
    EXPECT_THAT(t.status().message(), HasSubstr("--tokens-file f"));
  }
}

TEST(WorkerNameTest, PatternsMatchWholeNamesOrAPrefixBeforeTheStar) {
  EXPECT_TRUE(WorkerNameMatches("w0", "w0"));
  EXPECT_FALSE(WorkerNameMatches("w0", "w01"));
  EXPECT_FALSE(WorkerNameMatches("w0", "w"));
  EXPECT_TRUE(WorkerNameMatches("gpu-*", "gpu-7"));
  EXPECT_TRUE(WorkerNameMatches("gpu-*", "gpu-"));
  EXPECT_FALSE(WorkerNameMatches("gpu-*", "cpu-7"));
  EXPECT_TRUE(WorkerNameMatches("*", "anything"));
}

TEST(IdentityTest, MayActOnlyAsTheWorkersItIsBoundTo) {
  Identity id;
  id.description = "certificate CN=w0";
  id.worker = true;
  id.worker_names = {"w0", "node-0.example"};
  EXPECT_TRUE(id.MayActAsWorker("w0").ok());
  EXPECT_TRUE(id.MayActAsWorker("node-0.example").ok());
  Status s = id.MayActAsWorker("w1");
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_THAT(s.message(), HasSubstr("worker name \"w1\" is not bound to certificate CN=w0"));
  EXPECT_THAT(s.message(), HasSubstr("w0, node-0.example"));

  Identity anyone;
  anyone.anonymous = true;
  EXPECT_TRUE(anyone.MayActAsWorker("w1").ok());
}

TEST(AuthenticatorTest, ReloadKeepsTheTableInUseWhenTheNewFileIsBad) {
  testing::TempDir dir;
  const std::string path = dir.File("tokens");
  { std::ofstream(path) << "aaa alice\n"; }
  StatusOr<std::unique_ptr<Authenticator>> a = Authenticator::Create(path, /*mtls=*/false);
  ASSERT_TRUE(a.ok()) << a.status();
  { std::ofstream(path) << "aaa alice\nbbb bob\nccc w0 worker\n"; }
  StatusOr<size_t> n = (*a)->Reload();
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 3u);
  { std::ofstream(path) << "broken\n"; }
  EXPECT_EQ((*a)->Reload().status().code(), StatusCode::kInvalidArgument);

  EXPECT_EQ(Authenticator::Create(dir.File("missing"), false).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace trainyard::server
