// The parity suites of backend_parity.h on a real GPU through libtrainyard_cuda.so (the "Gpu"
// backend): every op case in f32 and, where the op supports it, bf16 and f16, the GEMM
// epilogues, the deferred index check, the device's properties and a tiny GPT's training steps,
// against the CPU reference. Where no NVIDIA driver is installed the op cases are not
// instantiated; every other test skips itself, saying why, where the library cannot be loaded
// or no GPU is visible. tools/gpu_check.sh runs them on a lent GPU machine.
//
// The library is found through $TRAINYARD_CUDA_LIB, which defaults to the build's own
// (TY_CUDA_LIB, set by tests/CMakeLists.txt when the build makes it).
#include <cstdlib>
#include <string>

#include "tests/worker/cuda/backend_parity.h"
#include "worker/tensor/cuda_backend.h"

namespace trainyard::testing {
namespace {

class GpuParity final : public ParityBackend {
 public:
  std::string name() const override { return "Gpu"; }
  bool Present() const override { return NvidiaDriverPresent(); }
  std::string WhyUnavailable() const override {
    if (!NvidiaDriverPresent()) {
      return "no NVIDIA driver here (/proc/driver/nvidia/gpus and /dev/nvidia0 are absent), so "
             "Gpu/OpParityTest has no cases";
    }
#ifdef TY_CUDA_LIB
    setenv(kernels::cuda::kCudaLibraryEnv, TY_CUDA_LIB, /*overwrite=*/0);
#endif
    StatusOr<cuda::Backend*> backend = LoadCudaBackend();
    if (!backend.ok()) return "the CUDA backend cannot be loaded: " + backend.status().message();
    if ((*backend)->DeviceCount() == 0) return "the CUDA backend loaded but sees no GPU";
    return "";
  }
  // The library as loaded: nothing to install.
  void Install() override {}
  void Uninstall() override {}
  // f32 kernels reorder sums (1e-4); TF32 tensor cores keep 10 mantissa bits (2e-3).
  double F32Tolerance(bool gemm) const override { return gemm ? 2e-3 : 1e-4; }
  double GptLossTolerance() const override { return 2e-3; }  // TF32 products
  double GptParamTolerance() const override { return 1e-2; }
};

ParityBackend* GpuParityBackend() {
  static auto* backend = new GpuParity();
  return backend;
}

}  // namespace

TY_PARITY_SUITES(Gpu, GpuParityBackend(), 9001);

}  // namespace trainyard::testing
