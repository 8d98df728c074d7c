// The parity suites of backend_parity.h on the emulated backend (the "Emulated" backend,
// tests/testing/cuda_emu/emu_backend.h), for machines without a GPU: libtrainyard_cuda.so's
// own code, its elementwise, reduction, softmax, cross-entropy, norm, indexing, random,
// optimizer, pooling and attention kernels (kernels/cuda/*.cu) run thread by thread on the
// host, its GEMMs and convolutions over a host cuBLASLt and cuDNN, against the CPU reference.
// tests/worker/cuda/cuda_parity_test.cc runs the same suites on a real GPU.
#include <string>

#include "tests/testing/cuda_emu/emu_backend.h"
#include "tests/worker/cuda/backend_parity.h"
#include "worker/tensor/cuda_backend.h"

namespace trainyard::testing {
namespace {

class EmulatedParity final : public ParityBackend {
 public:
  std::string name() const override { return "Emulated"; }
  void Install() override { SetCudaBackendForTesting(EmulatedCudaBackend()); }
  void Uninstall() override { SetCudaBackendForTesting(nullptr); }
  // The kernels order sums differently from the CPU's and use the device's formulas; the
  // products are the host cuBLASLt's (f32 sums, no TF32), so GEMM cases need no looser bound.
  double F32Tolerance(bool) const override { return 1e-4; }
  double GptLossTolerance() const override { return 1e-4; }
  double GptParamTolerance() const override { return 1e-2; }
};

ParityBackend* EmulatedParityBackend() {
  static auto* backend = new EmulatedParity();
  return backend;
}

}  // namespace

TY_PARITY_SUITES(Emulated, EmulatedParityBackend(), 5001);

}  // namespace trainyard::testing
