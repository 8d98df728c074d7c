#include "common/logging.h"

#include <gtest/gtest.h>

namespace trainyard {
namespace {

TEST(LoggingTest, WritesOneLineWithLevelFileAndMessage) {
  SetLogLevel(LogLevel::INFO);
  ::testing::internal::CaptureStderr();
  TY_LOG(INFO) << "loaded " << 3 << " files";
  std::string out = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(out.substr(0, 2), "I ");
  EXPECT_NE(out.find("logging_test.cc:"), std::string::npos) << out;
  EXPECT_NE(out.find("] loaded 3 files\n"), std::string::npos) << out;
}

TEST(LoggingTest, MessagesBelowTheLevelAreDroppedWithoutEvaluation) {
  SetLogLevel(LogLevel::WARNING);
  int evaluated = 0;
  auto count = [&] { return ++evaluated; };
  ::testing::internal::CaptureStderr();
  TY_LOG(INFO) << "hidden " << count();
  TY_LOG(ERROR) << "shown";
  std::string out = ::testing::internal::GetCapturedStderr();
  SetLogLevel(LogLevel::INFO);
  EXPECT_EQ(evaluated, 0);
  EXPECT_EQ(out.find("hidden"), std::string::npos);
  EXPECT_NE(out.find("shown"), std::string::npos);
}

}  // namespace
}  // namespace trainyard
