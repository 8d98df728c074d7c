// Autograd overhead: a chain of 10 000 tiny (4-element) adds, y = y + x, forward plus
// backward. Reported per op (the "s_per_op" counter). bench/torch_reference.py measures the
// same chain in PyTorch.
#include <benchmark/benchmark.h>

#include "worker/autograd/engine.h"
#include "worker/ops/elementwise.h"
#include "worker/ops/reduction.h"
#include "worker/tensor/factories.h"

namespace ty = trainyard;

static void BM_AutogradChainOfAdds(benchmark::State& state) {
  const int64_t n = state.range(0);
  ty::Tensor x = ty::Randn({4});
  x.set_requires_grad(true);
  for (auto _ : state) {
    ty::Tensor y = x;
    for (int64_t i = 0; i < n; ++i) y = ty::ops::Add(y, x);
    ty::Status s = ty::autograd::Backward(ty::ops::Sum(y));
    if (!s.ok()) state.SkipWithError(s.ToString().c_str());
    benchmark::DoNotOptimize(x.grad().raw_data());
  }
  // Seconds per op (shown with an SI prefix: 500n is 0.5 us).
  state.counters["s_per_op"] =
      benchmark::Counter(static_cast<double>(n) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_AutogradChainOfAdds)->Arg(10000)->Unit(benchmark::kMillisecond);

// Forward only (no graph recorded), for the split between recording and the kernel.
static void BM_ForwardChainOfAddsNoGrad(benchmark::State& state) {
  const int64_t n = state.range(0);
  ty::Tensor x = ty::Randn({4});
  for (auto _ : state) {
    ty::Tensor y = x;
    for (int64_t i = 0; i < n; ++i) y = ty::ops::Add(y, x);
    benchmark::DoNotOptimize(y.raw_data());
  }
  state.SetItemsProcessed(n * state.iterations());
}
BENCHMARK(BM_ForwardChainOfAddsNoGrad)->Arg(10000)->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
