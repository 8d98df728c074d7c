// Memory-bound kernels on 16 M floats against a plain memcpy of the same bytes:
// elementwise add (reads 2 x 64 MB, writes 64 MB) and a row softmax (rows of 1024; reads and
// writes 64 MB each). "bytes_per_second" counts bytes read plus written, as memcpy's does.
#include <benchmark/benchmark.h>

#include <cstring>

#include "worker/ops/elementwise.h"
#include "worker/ops/softmax.h"
#include "worker/tensor/factories.h"

namespace ty = trainyard;

constexpr int64_t kN = 16 << 20;

static void BM_Memcpy(benchmark::State& state) {
  ty::Tensor a = ty::Randn({kN});
  ty::Tensor b = ty::Empty({kN});
  for (auto _ : state) {
    std::memcpy(b.raw_data(), a.raw_data(), kN * sizeof(float));
    benchmark::DoNotOptimize(b.raw_data());
  }
  state.SetBytesProcessed(state.iterations() * kN * sizeof(float) * 2);
}

static void BM_Add(benchmark::State& state) {
  ty::Tensor a = ty::Randn({kN});
  ty::Tensor b = ty::Randn({kN});
  for (auto _ : state) {
    ty::Tensor c = ty::ops::Add(a, b);
    benchmark::DoNotOptimize(c.raw_data());
  }
  state.SetBytesProcessed(state.iterations() * kN * sizeof(float) * 3);
}

static void BM_SoftmaxRows(benchmark::State& state) {
  const int64_t row = state.range(0);
  ty::Tensor a = ty::Randn({kN / row, row});
  for (auto _ : state) {
    ty::Tensor c = ty::ops::Softmax(a, -1);
    benchmark::DoNotOptimize(c.raw_data());
  }
  state.SetBytesProcessed(state.iterations() * kN * sizeof(float) * 2);
}

BENCHMARK(BM_Memcpy)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Add)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_SoftmaxRows)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
