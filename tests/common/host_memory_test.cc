#include "common/host_memory.h"

#include <gtest/gtest.h>

namespace trainyard {
namespace {

TEST(HostMemoryTest, TheSmallerOfTheMachineAndItsCgroupLimit) {
  const std::string meminfo = "MemTotal:       16384000 kB\nMemFree:  100 kB\n";
  EXPECT_EQ(UsableMemoryBytes(meminfo, "max\n"), 16384000LL * 1024);
  EXPECT_EQ(UsableMemoryBytes(meminfo, ""), 16384000LL * 1024);
  EXPECT_EQ(UsableMemoryBytes(meminfo, "4294967296\n"), 4294967296LL);
  EXPECT_EQ(UsableMemoryBytes(meminfo, "9223372036854771712\n"), 16384000LL * 1024);  // v1 "none"
  EXPECT_EQ(UsableMemoryBytes("", ""), 0);
  EXPECT_GT(UsableMemoryBytes(), 0);  // this machine's
}

}  // namespace
}  // namespace trainyard
