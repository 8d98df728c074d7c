// Op cases for CPU-vs-CUDA parity: every op family of worker/ops (and the optimizers), each
// building its inputs from a fixed seed, running forward and backward through the engine and
// returning its outputs and input gradients on the CPU. The same case on the CPU and on a CUDA
// device must agree within the dtype's tolerance; backend_parity.h runs every case on every
// backend a test binary has (ggml's tests/test-backend-ops.cpp, one harness for every op on
// every backend).
//
// Dtypes: a case runs with floating inputs in `dtype` on CUDA (f32, bf16 or f16). On the CPU,
// which computes in f32, the same inputs are drawn in f32 and rounded through `dtype`, so both
// sides see identical values and differ only by the device's arithmetic.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "worker/nn/module.h"
#include "worker/tensor/factories.h"
#include "worker/tensor/tensor.h"

namespace trainyard::testing {

// Named results of a case, on the CPU: floating values as f32, indices and masks as they are.
// An undefined tensor records a gradient that did not arrive.
using CaseResult = std::vector<std::pair<std::string, Tensor>>;

// What a case builds its inputs with. Draws happen in a fixed order from one generator, so a
// case draws the same values on every device.
class CaseBuilder {
 public:
  CaseBuilder(Device device, DType dtype, uint64_t seed);

  Device device() const { return device_; }
  // The floating dtype of tensors on this run's device: dtype on CUDA, f32 on the CPU.
  DType floating() const { return floating_; }
  TensorOptions options() const { return Options(floating_).set_device(device_); }
  Generator* gen() { return &gen_; }

  // Uniform [lo, hi) values on the device, rounded through the run's dtype.
  Tensor Const(const Shape& shape, double lo = -1, double hi = 1);
  // Const that requires grad; its gradient is recorded by RecordGrads.
  Tensor Input(const Shape& shape, double lo = -1, double hi = 1);
  // int64 in [lo, hi) on the device; ignore >= 0 replaces about a fifth of them by `ignore`.
  Tensor Index(const Shape& shape, int64_t lo, int64_t hi);
  Tensor Targets(const Shape& shape, int64_t classes, int64_t ignore);
  // A bool mask with about `p_true` true entries.
  Tensor Mask(const Shape& shape, double p_true);
  // A CPU f32 tensor rounded through the run's dtype (on the CPU run; unchanged on CUDA).
  Tensor Round(const Tensor& t) const;

  // Backpropagates a fixed random cotangent (drawn here) from `out`.
  void Backward(const Tensor& out);
  void Output(const std::string& name, const Tensor& t);
  // Records "grad<i>" for every Input so far.
  void RecordGrads();
  CaseResult Take() { return std::move(result_); }

 private:
  Device device_;
  DType dtype_, floating_;
  Generator gen_;
  std::vector<Tensor> inputs_;
  CaseResult result_;
};

struct OpCase {
  std::string name;   // a gtest parameter name: letters, digits, underscores
  bool half = true;   // also runs with bf16 and f16 inputs on CUDA
  bool gemm = false;  // goes through cuBLASLt or cuDNN (TF32 on a GPU)
  std::function<void(CaseBuilder&)> run;
};

// Every case, in a fixed order.
const std::vector<OpCase>& OpCases();
const OpCase& FindCase(const std::string& name);

// A parameter of the op-case test suites: a case, the dtype of its floating inputs, its seed.
struct OpParam {
  std::string name;
  DType dtype;
  bool gemm;  // the case's OpCase::gemm
  uint64_t seed;
};

// Every case in f32 and, where it runs in 16 bits (OpCase::half), in bf16 and f16; the i-th
// case draws from seed first_seed + i.
std::vector<OpParam> AllOpParams(uint64_t first_seed);
void PrintTo(const OpParam& p, std::ostream* os);  // how gtest shows a failing parameter
std::string OpParamName(const OpParam& p);         // "<case>_<dtype>", a gtest parameter name

// Runs `c` on `device` with `dtype` inputs and `seed`.
CaseResult RunCase(const OpCase& c, Device device, DType dtype, uint64_t seed);

// "" when every entry of got matches want: same names, shapes, dtypes; exact for integer and
// bool values; |got - want| <= rtol * (|want| + max |want| over the tensor) for floating ones.
// Else a description of the first mismatch and the largest error.
std::string CompareResults(const CaseResult& got, const CaseResult& want, double rtol);

// A tiny GPT (vocab 11, context 8, 2 layers, 2 heads, n_embd 16) built from `seed`, moved to
// `device` and trained `steps` AdamW steps on one fixed batch of 3 sequences of 8 tokens.
// Returns the loss of each step ("loss<i>", 0-dim) and the trained parameters, on the CPU. A
// vocabulary of 1029 gives it a head whose rows a device pads (ops::Linear, Note [Padded rows]).
CaseResult TrainTinyGpt(Device device, double dropout, int steps, uint64_t seed,
                        int64_t vocab = 11);

// `steps` AdamW steps of `model` on `device` on random tokens (seed + 1) of `vocab`: the losses,
// then the trained parameters.
CaseResult TrainTinyModel(Device device, const std::shared_ptr<nn::Module>& model, int steps,
                          uint64_t seed, int64_t vocab);

// Three steps of a tiny model.llama (spec::LlamaGraph) on `device` against the CPU, as
// CompareTinyGptTraining compares the GPT's.
std::string CompareTinyLlamaTraining(Device device, double loss_rtol, double rtol);

// TrainTinyGpt's three steps on `device` against the CPU (seed 4242): "" when the losses agree
// within loss_rtol, the parameters within rtol (CompareResults) and the loss falls; else what
// differs.
std::string CompareTinyGptTraining(Device device, double dropout, int64_t vocab, double loss_rtol,
                                   double rtol);

// The backend's GEMM epilogues (GemmEpilogue: bias; tanh GELU, with and without the
// pre-activation saved) on `device` against matmul, add and gelu on the CPU, in f32 and bf16,
// for an n that cuBLASLt fuses (40) and one it cannot (37: AUX_LD must be a multiple of 8).
// "" when all agree, else the mismatches.
std::string CompareGemmEpilogues(Device device);

namespace internal {
// The table's parts: op_cases.cc (elementwise to dropout), op_cases_nn.cc (matmul to optim).
void AddTensorCases(std::vector<OpCase>* cases);
void AddNnCases(std::vector<OpCase>* cases);
}  // namespace internal

}  // namespace trainyard::testing
