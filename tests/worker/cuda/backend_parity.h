// One parity suite for every CUDA backend a test binary has (ggml's test-backend-ops: one
// harness, every op, every backend): the op cases of op_cases.h, the GEMM epilogues, the
// deferred index check, the device's properties and a tiny GPT's training steps, each run on
// cuda:0 backed by the backend and compared with the CPU reference. The tests are written
// once, in backend_parity_test.cc; a backend is a ParityBackend plus one TY_PARITY_SUITES line
// in the file that defines it:
//   Host      HostBackend, the CPU kernels behind the Backend interface, in every build
//             (host_backend_test.cc): the engine's dispatch, which kernels it launches
//   Emulated  libtrainyard_cuda.so's own code over the CUDA emulation, where the build has
//             the toolkit's headers (tests/worker/cuda_emu/cuda_emu_test.cc): the kernels
//   Gpu       the real library on a real GPU (cuda_parity_test.cc), skipped with the reason
//             elsewhere; tools/gpu_check.sh runs it on a lent GPU machine
// Test names say the backend first: Host/OpParityTest.MatchesTheCpuReference/add_float32,
// Emulated/BackendParityTest.TinyGptTrainingStepsMatchTheCpu/cuda0.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "tests/worker/cuda/op_cases.h"

namespace trainyard::testing {

// A CUDA backend the parity suites run on.
class ParityBackend {
 public:
  virtual ~ParityBackend() = default;

  // "Host", "Emulated" or "Gpu", as the suites' prefix.
  virtual std::string name() const = 0;
  // False where the backend is certainly absent, known without loading anything (no NVIDIA
  // driver): its op cases are then not instantiated, and its BackendParityTest tests skip
  // saying why. Evaluated when the tests are registered, so it must be cheap.
  virtual bool Present() const { return true; }
  // Why the suites cannot run on it here (each test skips with this), or "" when they can.
  virtual std::string WhyUnavailable() const { return ""; }
  // Makes it the process's CUDA backend for one test, and undoes that once the test's
  // tensors are gone.
  virtual void Install() = 0;
  virtual void Uninstall() = 0;
  // Launches of `kernel` since Install (HostBackend::launches' names; "" counts every kernel,
  // as HostBackend::kernel_launches), where the backend counts them; nullopt elsewhere.
  virtual std::optional<int64_t> Launches(const std::string& /*kernel*/) const {
    return std::nullopt;
  }
  // Relative tolerance of an f32 op case against the CPU (`gemm`: through cuBLASLt or cuDNN).
  // 16-bit cases take OpTolerance's, the same on every backend.
  virtual double F32Tolerance(bool gemm) const = 0;
  // Relative tolerances of the tiny GPT's losses and trained parameters (CompareTinyGptTraining).
  virtual double GptLossTolerance() const = 0;
  virtual double GptParamTolerance() const = 0;
};

// The relative tolerance of an op case on `backend` in `dtype`: 16-bit storage rounds every
// op's output (bf16 keeps 8 bits, f16 11); f32 is the backend's.
double OpTolerance(const ParityBackend& backend, DType dtype, bool gemm);

// A parameter of OpParityTest: a backend and one of its op cases.
struct OpParityParam {
  ParityBackend* backend;
  OpParam op;
};
void PrintTo(const OpParityParam& p, std::ostream* os);  // how gtest shows a failing parameter

// Every op case on `backend` (AllOpParams(first_seed)), or none where it is not Present().
std::vector<OpParityParam> OpParityParams(ParityBackend* backend, uint64_t first_seed);
std::string OpParityName(const ::testing::TestParamInfo<OpParityParam>& info);
// BackendParityTest's one parameter per backend is named for the device the tests run on,
// "cuda0" (the prefix names the backend); gtest shows the backend by its name.
std::string BackendParityName(const ::testing::TestParamInfo<ParityBackend*>& info);
void PrintTo(ParityBackend* backend, std::ostream* os);

// Installs the backend for each test, or skips the test saying why it cannot run here.
class BackendParityTest : public ::testing::TestWithParam<ParityBackend*> {
 protected:
  void SetUp() override;
  void TearDown() override;
  ParityBackend& backend() const { return *GetParam(); }

 private:
  bool installed_ = false;
};

class OpParityTest : public ::testing::TestWithParam<OpParityParam> {
 protected:
  void SetUp() override;
  void TearDown() override;
  ParityBackend& backend() const { return *GetParam().backend; }

 private:
  bool installed_ = false;
};

}  // namespace trainyard::testing

// Runs both suites on `backend` (a ParityBackend*, evaluated when the tests are
// registered) under the prefix `name`, its op cases drawing from seeds first_seed, + 1, ...
// Used once per backend, at namespace scope in trainyard::testing.
#define TY_PARITY_SUITES(name, backend, first_seed)                                      \
  INSTANTIATE_TEST_SUITE_P(name, OpParityTest,                                           \
                           ::testing::ValuesIn(OpParityParams((backend), (first_seed))), \
                           OpParityName);                                                \
  INSTANTIATE_TEST_SUITE_P(name, BackendParityTest, ::testing::Values(backend), BackendParityName)
