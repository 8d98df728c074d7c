#include "common/flags.h"

#include <gtest/gtest.h>

namespace trainyard {
namespace {

Flags Make() {
  Flags f("usage: test");
  f.Value("listen", "127.0.0.1:7600", "address")
      .Value("set", "", "override")
      .Switch("insecure", "plaintext");
  f.Alias("-l", "listen");
  return f;
}

TEST(FlagsTest, ReadsValuesSwitchesAliasesRepeatsAndPositionals) {
  Flags f = Make();
  ASSERT_TRUE(
      f.Parse({"spec.yaml", "--listen=0.0.0.0:1", "--insecure", "--set", "a=1", "--set", "b=2"})
          .ok());
  EXPECT_EQ(f.Get("listen"), "0.0.0.0:1");
  EXPECT_TRUE(f.On("insecure"));
  EXPECT_EQ(f.All("set"), (std::vector<std::string>{"a=1", "b=2"}));
  EXPECT_EQ(f.positional(), (std::vector<std::string>{"spec.yaml"}));
  Flags g = Make();
  ASSERT_TRUE(g.Parse({"-l", "h:2"}).ok());
  EXPECT_EQ(g.Get("listen"), "h:2");
  EXPECT_FALSE(g.On("insecure"));
}

TEST(FlagsTest, NamesAnUnknownFlagAMissingValueAndABadNumber) {
  Flags f = Make();
  Status s = f.Parse({"--lisen", "x"});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("unknown flag --lisen"), std::string::npos);
  Flags g = Make();
  EXPECT_NE(g.Parse({"--listen"}).message().find("--listen needs a value"), std::string::npos);
  Flags h = Make();
  ASSERT_TRUE(h.Parse({"--set", "12x"}).ok());
  StatusOr<int64_t> n = h.Int("set", 0, 10);
  EXPECT_FALSE(n.ok());
  EXPECT_NE(n.status().message().find("--set \"12x\": must be an integer in [0, 10]"),
            std::string::npos);
}

}  // namespace
}  // namespace trainyard
