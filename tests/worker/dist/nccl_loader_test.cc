// LoadNcclProcessGroup without CUDA in this binary: a missing library is Unimplemented naming
// where it looked; a file that is not a library is FailedPrecondition; where this build made
// libtrainyard_nccl.so (TY_NCCL_LIB, its path), loading it works and creating a group on a
// machine without a GPU is a clear FailedPrecondition, not a crash. The collectives themselves
// are tested on GPUs by nccl_gpu_test (tests/worker/dist/nccl/).
#include "worker/dist/nccl_loader.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "tests/testing/temp_dir.h"

namespace trainyard::dist {
namespace {

namespace fs = std::filesystem;

// Sets (or with nullopt unsets) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      ::setenv(name, value->c_str(), 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

bool Contains(const Status& st, const std::string& what) {
  return st.message().find(what) != std::string::npos;
}

// Whether the NVIDIA driver lists a GPU (without loading any CUDA library here).
[[maybe_unused]] bool MachineHasGpu() {
  std::error_code ec;
  fs::directory_iterator it("/proc/driver/nvidia/gpus", ec);
  return !ec && it != fs::directory_iterator();
}

class NcclLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = TcpStoreServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    auto store = TcpStore::Connect(server_->address(), std::chrono::seconds(5));
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *store;
    options_.timeout = std::chrono::seconds(5);
  }
  testing::TempDir dir_;
  std::unique_ptr<TcpStoreServer> server_;
  std::shared_ptr<Store> store_;
  ProcessGroupOptions options_;
};

TEST_F(NcclLoaderTest, AMissingLibraryIsUnimplementedNamingItAndWhereItLooked) {
  const std::string path = dir_.File("nowhere/libtrainyard_nccl.so");
  ScopedEnv env(kNcclLibraryEnv, path);
  auto group = LoadNcclProcessGroup(store_, 0, 1, options_);
  ASSERT_EQ(group.status().code(), StatusCode::kUnimplemented) << group.status();
  EXPECT_TRUE(Contains(group.status(), "libtrainyard_nccl.so")) << group.status();
  EXPECT_TRUE(Contains(group.status(), "TY_WITH_CUDA")) << group.status();
  EXPECT_TRUE(Contains(group.status(), path)) << group.status();
}

TEST_F(NcclLoaderTest, AFileThatIsNotALibraryIsFailedPrecondition) {
  const std::string path = dir_.File("libtrainyard_nccl.so");
  std::ofstream(path) << "not an ELF file\n";
  ScopedEnv env(kNcclLibraryEnv, path);
  auto group = LoadNcclProcessGroup(store_, 0, 1, options_);
  ASSERT_EQ(group.status().code(), StatusCode::kFailedPrecondition) << group.status();
  EXPECT_TRUE(Contains(group.status(), path)) << group.status();
}

TEST_F(NcclLoaderTest, ANullStoreIsInvalidArgument) {
  EXPECT_EQ(LoadNcclProcessGroup(nullptr, 0, 1, options_).status().code(),
            StatusCode::kInvalidArgument);
}

// Without $TRAINYARD_NCCL_LIB the loader looks beside the binary and in its ../lib, where the
// build puts the library (this binary is <build>/tests/dist_test).
TEST_F(NcclLoaderTest, SearchesBesideTheBinaryAndItsLibDirectory) {
  ScopedEnv env(kNcclLibraryEnv, std::nullopt);
  auto group = LoadNcclProcessGroup(store_, 0, 1, options_);
#ifdef TY_NCCL_LIB
  EXPECT_NE(group.status().code(), StatusCode::kUnimplemented) << group.status();
#else
  ASSERT_EQ(group.status().code(), StatusCode::kUnimplemented) << group.status();
  const fs::path exe = fs::read_symlink("/proc/self/exe");
  EXPECT_TRUE(Contains(group.status(), (exe.parent_path() / kNcclLibraryName).string()))
      << group.status();
  EXPECT_TRUE(Contains(group.status(), "the loader's path")) << group.status();
#endif
}

TEST_F(NcclLoaderTest, TheBuiltLibraryLoadsAndNeedsAGpuToCreateAGroup) {
#ifndef TY_NCCL_LIB
  GTEST_SKIP() << "this build has no libtrainyard_nccl.so (TY_WITH_CUDA is off or the CUDA "
                  "toolkit or NCCL was not found)";
#else
  ScopedEnv env(kNcclLibraryEnv, std::string(TY_NCCL_LIB));
  auto group = LoadNcclProcessGroup(store_, 0, 1, options_);
  if (!MachineHasGpu()) {
    ASSERT_EQ(group.status().code(), StatusCode::kFailedPrecondition) << group.status();
    EXPECT_TRUE(Contains(group.status(), "no CUDA device")) << group.status();
    EXPECT_TRUE(Contains(group.status(), "rank 0")) << group.status();
    GTEST_SKIP() << "no GPU on this machine: checked the clear error; nccl_gpu_test runs the "
                    "collectives where there is one";
  }
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_STREQ((*group)->backend(), "nccl");
  EXPECT_EQ((*group)->size(), 1);
#endif
}

}  // namespace
}  // namespace trainyard::dist
