#include "worker/tensor/tensor.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kernels/cpu/parallel.h"
#include "worker/tensor/allocator.h"
#include "worker/tensor/factories.h"
#include "worker/tensor/storage.h"
#include "worker/tensor/views.h"

namespace trainyard {
namespace {

std::vector<float> Vec(const Tensor& t) { return ToVector<float>(t); }

TEST(DTypeTest, SizesNamesAndParsing) {
  EXPECT_EQ(ElementSize(DType::kFloat32), 4u);
  EXPECT_EQ(ElementSize(DType::kFloat64), 8u);
  EXPECT_EQ(ElementSize(DType::kBFloat16), 2u);
  EXPECT_EQ(ElementSize(DType::kFloat16), 2u);
  EXPECT_EQ(ElementSize(DType::kInt64), 8u);
  EXPECT_EQ(ElementSize(DType::kInt32), 4u);
  EXPECT_EQ(ElementSize(DType::kUInt8), 1u);
  EXPECT_EQ(ElementSize(DType::kBool), 1u);
  EXPECT_EQ(*ParseDType("bf16"), DType::kBFloat16);
  EXPECT_EQ(*ParseDType("float16"), DType::kFloat16);
  auto bad = ParseDType("float8");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("\"float8\""), std::string::npos);
}

TEST(DeviceTest, ParsesCpuAndCuda) {
  EXPECT_TRUE(Device::Parse("cpu")->is_cpu());
  EXPECT_EQ(Device::Parse("cuda:3")->index, 3);
  EXPECT_EQ(Device::Parse("cuda")->ToString(), "cuda:0");
  EXPECT_EQ(Device::Parse("gpu").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Device::Parse("cuda:x").status().code(), StatusCode::kInvalidArgument);
}

TEST(DeviceTest, AskingForACudaDeviceThatIsNotThereIsAClearError) {
  // Without libtrainyard_cuda.so: Unimplemented naming it; with it: FailedPrecondition naming
  // how many devices are visible.
  Status s = CheckDeviceAvailable(Device::Cuda(999));
  EXPECT_TRUE(s.code() == StatusCode::kFailedPrecondition || s.code() == StatusCode::kUnimplemented)
      << s;
  EXPECT_NE(s.message().find("cuda:999 is not available"), std::string::npos) << s;
  EXPECT_TRUE(CheckDeviceAvailable(Device::Cpu()).ok());
}

TEST(AllocatorTest, BlocksAreAlignedAndReusedBySizeClass) {
  CpuAllocator& a = CpuAllocator::Get();
  void* p = a.Allocate(1000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  a.Free(p, 1000);
  AllocatorStats before = a.Stats();
  void* q = a.Allocate(990);  // same class as 1000
  EXPECT_EQ(q, p);
  AllocatorStats after = a.Stats();
  EXPECT_EQ(after.num_os_allocs, before.num_os_allocs);
  EXPECT_EQ(after.cached_bytes,
            before.cached_bytes - static_cast<int64_t>(CpuAllocator::RoundSize(990)));
  a.Free(q, 990);
}

TEST(AllocatorTest, RoundsToAtMostAQuarterAbove) {
  for (size_t n : {1, 64, 65, 100, 1000, 4097, 100000, 12345678}) {
    size_t r = CpuAllocator::RoundSize(n);
    EXPECT_GE(r, n);
    EXPECT_EQ(r % 64, 0u);
    if (n > 256) {
      EXPECT_LE(r, n + n / 4 + 64) << n;
    }
  }
}

TEST(AllocatorTest, StatisticsTrackAllocatedCachedAndPeak) {
  CpuAllocator& a = CpuAllocator::Get();
  a.ResetPeak();
  AllocatorStats s0 = a.Stats();
  const size_t big = size_t{3} << 20;
  {
    Tensor t = Empty({static_cast<int64_t>(big / 4)});
    AllocatorStats s1 = a.Stats();
    EXPECT_EQ(s1.allocated_bytes - s0.allocated_bytes,
              static_cast<int64_t>(CpuAllocator::RoundSize(big)));
    EXPECT_GE(s1.peak_allocated_bytes, s1.allocated_bytes);
  }
  AllocatorStats s2 = a.Stats();
  EXPECT_EQ(s2.allocated_bytes, s0.allocated_bytes);
  EXPECT_GE(s2.cached_bytes, static_cast<int64_t>(CpuAllocator::RoundSize(big)));
  EXPECT_GE(s2.peak_allocated_bytes - s0.allocated_bytes, static_cast<int64_t>(big));
  EXPECT_EQ(s2.reserved_bytes, s2.allocated_bytes + s2.cached_bytes);
}

TEST(MemoryStatsTest, ThePeakCoversAFreedTensorUntilReset) {
  const Device cpu = Device::Cpu();
  ResetMemoryPeak(cpu);
  const MemoryStats before = DeviceMemoryStats(cpu);
  EXPECT_EQ(before.peak_allocated_bytes, before.allocated_bytes);
  { Tensor big = Empty({1 << 20}, Options(DType::kFloat32)); }  // 4 MiB, freed again
  const MemoryStats after = DeviceMemoryStats(cpu);
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
  EXPECT_GE(after.peak_allocated_bytes, before.allocated_bytes + (4 << 20));
  EXPECT_GE(after.reserved_bytes, after.peak_allocated_bytes);  // the CPU's cache keeps it
  ResetMemoryPeak(cpu);
  EXPECT_EQ(DeviceMemoryStats(cpu).peak_allocated_bytes, after.allocated_bytes);
}

TEST(TensorTest, ViewsShareStorage) {
  Tensor a = Arange(0, 12, 1, Options(DType::kFloat32));
  Tensor m = views::View(a, {3, 4});
  Tensor col = views::Select(m, 1, 2);  // a[2], a[6], a[10]
  EXPECT_EQ(col.shape(), Shape{3});
  EXPECT_EQ(col.stride(0), 4);
  FillInPlace(col, -1);
  EXPECT_EQ(Vec(a)[6], -1.0f);
  EXPECT_EQ(a.version(), col.version());
}

TEST(TensorTest, ViewShapesAndStrides) {
  Tensor a = Arange(0, 24, 1, Options(DType::kFloat32));
  Tensor m = views::View(a, {2, 3, 4});
  Tensor t = views::Transpose(m, 0, 2);
  EXPECT_EQ(t.shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(t.strides(), (Shape{1, 4, 12}));
  EXPECT_FALSE(t.is_contiguous());
  Tensor p = views::Permute(m, {1, 2, 0});
  EXPECT_EQ(p.shape(), (Shape{3, 4, 2}));
  Tensor s = views::Slice(m, 2, 1, 4, 2);
  EXPECT_EQ(s.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(Vec(s)[0], 1.0f);
  EXPECT_EQ(Vec(s)[1], 3.0f);
  Tensor n = views::Narrow(m, 1, 1, 2);
  EXPECT_EQ(Vec(n)[0], 4.0f);
  Tensor e =
      views::Expand(views::View(Arange(0, 3, 1, Options(DType::kFloat32)), {3, 1}), {2, 3, 5});
  EXPECT_EQ(e.shape(), (Shape{2, 3, 5}));
  EXPECT_EQ(e.strides(), (Shape{0, 1, 0}));
  EXPECT_EQ(Vec(e)[5], 1.0f);
  Tensor u = views::Unsqueeze(m, 1);
  EXPECT_EQ(u.shape(), (Shape{2, 1, 3, 4}));
  EXPECT_EQ(views::Squeeze(u).shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(views::Squeeze(u, 1).shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(views::Squeeze(u, 0).shape(), (Shape{2, 1, 3, 4}));
}

TEST(TensorTest, ViewOfAStridedTensorWorksWhereTheLayoutAllows) {
  Tensor m = views::View(Arange(0, 24, 1, Options(DType::kFloat32)), {2, 3, 4});
  // Merging dims 0-1 of a slice along dim 2 is a valid view.
  Tensor s = views::Slice(m, 2, 0, 2);
  EXPECT_TRUE(views::ViewStrides(s.shape(), s.strides(), {6, 2}).has_value());
  // Merging dims of a transposed tensor is not.
  Tensor t = views::Transpose(m, 1, 2);
  EXPECT_FALSE(views::ViewStrides(t.shape(), t.strides(), {2, 12}).has_value());
  EXPECT_EQ(views::InferSize({-1, 4}, 24, "view"), (Shape{6, 4}));
}

TEST(TensorDeathTest, BadViewsNameTheProblem) {
  Tensor m = Zeros({2, 3});
  EXPECT_DEATH(views::View(m, {4, 2}), "shape \\[4, 2\\] is invalid for 6 elements");
  EXPECT_DEATH(views::Transpose(m, 0, 2), "transpose: dim 2 is out of range; expected -2 to 1");
  EXPECT_DEATH(views::Expand(m, {2, 4}), "expand: dim 1 of shape \\[2, 3\\] has size 3");
}

TEST(TensorTest, EmptyTensorsAreContiguousWhateverTheirStrides) {
  EXPECT_TRUE(Empty({2, 0, 4}).is_contiguous());
  EXPECT_TRUE(views::Transpose(Empty({2, 0, 4}), 0, 2).is_contiguous());
}

TEST(TensorTest, ContiguousCopiesInRowMajorOrder) {
  Tensor m = views::View(Arange(0, 6, 1, Options(DType::kFloat32)), {2, 3});
  Tensor t = ContiguousData(views::Transpose(m, 0, 1));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(Vec(t), (std::vector<float>{0, 3, 1, 4, 2, 5}));
}

TEST(TensorTest, FactoriesFillValues) {
  EXPECT_EQ(Vec(Zeros({2})), (std::vector<float>{0, 0}));
  EXPECT_EQ(Vec(Ones({2})), (std::vector<float>{1, 1}));
  EXPECT_EQ(Vec(Full({3}, 2.5)), (std::vector<float>{2.5, 2.5, 2.5}));
  EXPECT_EQ(ToVector<int64_t>(Arange(5)), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(Vec(Arange(1, 2, 0.25, Options(DType::kFloat32))),
            (std::vector<float>{1, 1.25, 1.5, 1.75}));
  Tensor s = Scalar(3);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.item(), 3.0);
}

TEST(TensorTest, RandomFactoriesAreSeededAndHaveTheRightMoments) {
  Generator g1(42), g2(42);
  Tensor a = Randn({100000}, {}, &g1);
  Tensor b = Randn({100000}, {}, &g2);
  EXPECT_EQ(Vec(a), Vec(b));
  double mean = 0, sq = 0;
  for (float v : Vec(a)) mean += v, sq += double(v) * v;
  mean /= 100000;
  double var = sq / 100000 - mean * mean;
  EXPECT_NEAR(mean, 0, 0.02);
  EXPECT_NEAR(var, 1, 0.02);
  Tensor u = Uniform({100000}, -2, 3, {}, &g1);
  double lo = 1e9, hi = -1e9, sum = 0;
  for (float v : Vec(u)) lo = std::min<double>(lo, v), hi = std::max<double>(hi, v), sum += v;
  EXPECT_GE(lo, -2);
  EXPECT_LT(hi, 3);
  EXPECT_NEAR(sum / 100000, 0.5, 0.03);
  EXPECT_NE(Vec(Rand({4}, {}, &g1)), Vec(Rand({4}, {}, &g1)));  // the offset advances
}

TEST(TensorTest, RandomFillsOfStridedFloat64KeepFullPrecision) {
  Generator g1(9), g2(9);
  Tensor flat = Empty({3, 4}, Options(DType::kFloat64));
  NormalInPlace(flat, 0, 1, &g1);
  Tensor base = Empty({4, 3}, Options(DType::kFloat64));
  Tensor strided = views::Transpose(base, 0, 1);  // (3, 4), not contiguous
  NormalInPlace(strided, 0, 1, &g2);
  EXPECT_EQ(ToVector<double>(strided), ToVector<double>(flat));
}

TEST(TensorTest, RandomValuesDoNotDependOnTheThreadCount) {
  int threads = kernels::cpu::GetNumThreads();
  kernels::cpu::SetNumThreads(1);
  Generator g1(7);
  std::vector<float> one = Vec(Randn({1 << 18}, {}, &g1));
  kernels::cpu::SetNumThreads(3);
  Generator g2(7);
  std::vector<float> three = Vec(Randn({1 << 18}, {}, &g2));
  kernels::cpu::SetNumThreads(threads);
  EXPECT_EQ(one, three);
}

TEST(TensorTest, ToDTypeRoundTripsThroughHalfAndBFloat16) {
  Tensor x = FromVector<float>({1.0f, -2.5f, 65504.0f, 1e-3f, 0.1f});
  Tensor h = ConvertTo(x, DType::kFloat16);
  std::vector<float> back = Vec(h);
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_EQ(back[1], -2.5f);
  EXPECT_EQ(back[2], 65504.0f);
  EXPECT_NEAR(back[3], 1e-3f, 1e-6f);
  Tensor b = ConvertTo(x, DType::kBFloat16);
  std::vector<float> bb = Vec(b);
  EXPECT_EQ(bb[0], 1.0f);
  EXPECT_NEAR(bb[4], 0.1f, 0.1f / 128);
  EXPECT_EQ(ToVector<int64_t>(ConvertTo(FromVector<float>({2.7f, -1.2f}), DType::kInt64)),
            (std::vector<int64_t>{2, -1}));
  Tensor inf = ConvertTo(FromVector<float>({1e6f}), DType::kFloat16);
  EXPECT_TRUE(std::isinf(Vec(inf)[0]));
}

TEST(TensorTest, PrintsLikePyTorch) {
  Tensor m = views::View(Arange(0, 4, 1, Options(DType::kFloat32)), {2, 2});
  EXPECT_EQ(m.ToString(), "tensor([[0.0000, 1.0000],\n        [2.0000, 3.0000]])");
  Tensor w = Ones({2});
  w.set_requires_grad(true);
  EXPECT_EQ(w.ToString(), "tensor([1.0000, 1.0000], requires_grad=True)");
  EXPECT_EQ(Arange(3).ToString(), "tensor([0, 1, 2])");
  EXPECT_EQ(Scalar(2, Options(DType::kFloat64)).ToString(), "tensor(2.0000, dtype=float64)");
}

TEST(TensorTest, BroadcastShapesFollowNumpy) {
  EXPECT_EQ(BroadcastShapes({3, 1, 5}, {4, 1}, "t"), (Shape{3, 4, 5}));
  EXPECT_EQ(BroadcastShapes({}, {2}, "t"), (Shape{2}));
  EXPECT_DEATH(BroadcastShapes({2}, {3}, "t"), "cannot be broadcast");
}

TEST(TensorDeathTest, OnlyFloatingLeavesCanRequireGrad) {
  Tensor i = Arange(3);
  EXPECT_DEATH(i.set_requires_grad(true), "only floating-point tensors can require gradients");
}

}  // namespace
}  // namespace trainyard
