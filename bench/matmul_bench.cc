// Matmul through the engine (ops::Matmul: tensor checks, output allocation, dispatch, GEMM)
// against a direct cblas_sgemm on the same buffers, n x n float32 at n = 512, 1024, 2048.
// Counter "GFLOPS" is 2 n^3 per iteration.
#include <benchmark/benchmark.h>

#include "kernels/cpu/gemm.h"
#include "worker/ops/linalg.h"
#include "worker/tensor/factories.h"

#ifdef TY_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace ty = trainyard;

static void SetFlops(benchmark::State& state, int64_t n) {
  state.counters["GFLOPS"] = benchmark::Counter(
      2.0 * static_cast<double>(n) * n * n * static_cast<double>(state.iterations()) / 1e9,
      benchmark::Counter::kIsRate);
}

static void BM_EngineMatmul(benchmark::State& state) {
  const int64_t n = state.range(0);
  ty::Tensor a = ty::Randn({n, n});
  ty::Tensor b = ty::Randn({n, n});
  for (auto _ : state) {
    ty::Tensor c = ty::ops::Matmul(a, b);
    benchmark::DoNotOptimize(c.raw_data());
  }
  SetFlops(state, n);
}

static void BM_DirectSgemm(benchmark::State& state) {
  const int64_t n = state.range(0);
  ty::Tensor a = ty::Randn({n, n});
  ty::Tensor b = ty::Randn({n, n});
  ty::Tensor c = ty::Empty({n, n});
  for (auto _ : state) {
#ifdef TY_HAVE_OPENBLAS
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data<float>(), n,
                b.data<float>(), n, 0.0f, c.data<float>(), n);
#else
    ty::kernels::cpu::Gemm<float>(false, false, n, n, n, 1.0f, a.data<float>(), n, b.data<float>(),
                                  n, 0.0f, c.data<float>(), n);
#endif
    benchmark::DoNotOptimize(c.raw_data());
  }
  SetFlops(state, n);
}

BENCHMARK(BM_DirectSgemm)
    ->Arg(512)
    ->Arg(1024)
    ->Arg(2048)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_EngineMatmul)
    ->Arg(512)
    ->Arg(1024)
    ->Arg(2048)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

BENCHMARK_MAIN();
