#include "worker/autograd/autocast.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "worker/autograd/engine.h"
#include "worker/autograd/function.h"
#include "worker/autograd/hooks.h"
#include "worker/ops/elementwise.h"
#include "worker/ops/reduction.h"
#include "worker/tensor/factories.h"

namespace trainyard::autograd {
namespace {

Tensor Leaf(std::vector<float> v) {
  Tensor t = FromVector<float>(v);
  t.set_requires_grad(true);
  return t;
}

TEST(AutocastTest, IsOffByDefault) {
  EXPECT_FALSE(AutocastEnabled());
  EXPECT_EQ(AutocastDType(), DType::kFloat32);
}

TEST(AutocastTest, GuardsNestAndEachRestoresTheStateItFound) {
  {
    AutocastGuard bf16(DType::kBFloat16);
    EXPECT_TRUE(AutocastEnabled());
    EXPECT_EQ(AutocastDType(), DType::kBFloat16);
    {
      AutocastGuard fp16(DType::kFloat16);
      EXPECT_EQ(AutocastDType(), DType::kFloat16);
      {
        AutocastGuard off(DType::kFloat32);
        EXPECT_FALSE(AutocastEnabled());
        EXPECT_EQ(AutocastDType(), DType::kFloat32);
      }
      EXPECT_EQ(AutocastDType(), DType::kFloat16);
    }
    EXPECT_EQ(AutocastDType(), DType::kBFloat16);
  }
  EXPECT_FALSE(AutocastEnabled());
}

TEST(AutocastTest, IsPerThreadSoAnotherThreadSeesItOff) {
  AutocastGuard bf16(DType::kBFloat16);
  DType seen = DType::kBFloat16;
  DType seen_inside_guard = DType::kFloat32;
  std::thread other([&] {
    seen = AutocastDType();
    AutocastGuard fp16(DType::kFloat16);
    seen_inside_guard = AutocastDType();
  });
  other.join();
  EXPECT_EQ(seen, DType::kFloat32);
  EXPECT_EQ(seen_inside_guard, DType::kFloat16);
  EXPECT_EQ(AutocastDType(), DType::kBFloat16);  // the other thread's guard did not touch ours
}

TEST(AutocastTest, AGuardForANonFloatingDTypeIsABug) {
  EXPECT_DEATH({ AutocastGuard bad(DType::kInt64); }, "AutocastGuard takes bfloat16, float16");
}

// Records the autocast dtype its forward and backward see.
struct RecordAutocast {
  static inline std::vector<DType> forward_saw;
  static inline std::vector<DType> backward_saw;
  static std::vector<Tensor> Forward(FunctionContext&, const std::vector<Tensor>& in) {
    forward_saw.push_back(AutocastDType());
    return {ops::MulScalar(in[0], 2)};
  }
  static std::vector<Tensor> Backward(FunctionContext&, const std::vector<Tensor>& g) {
    backward_saw.push_back(AutocastDType());
    return {ops::MulScalar(g[0], 2)};
  }
};

TEST(AutocastTest, BackwardRunsNodesAndHooksWithAutocastOff) {
  RecordAutocast::forward_saw.clear();
  RecordAutocast::backward_saw.clear();
  Tensor x = Leaf({1, 2});
  std::vector<bool> hook_saw_enabled;
  RegisterHook(x, [&](const Tensor&) {
    hook_saw_enabled.push_back(AutocastEnabled());
    return Tensor();
  });
  RegisterPostAccumulateGradHook(
      x, [&](const Tensor&) { hook_saw_enabled.push_back(AutocastEnabled()); });
  AutocastGuard fp16(DType::kFloat16);
  Tensor y = ApplyFunction<RecordAutocast>({x})[0];
  ASSERT_TRUE(Backward(ops::Sum(y)).ok());

  EXPECT_EQ(RecordAutocast::forward_saw, std::vector<DType>{DType::kFloat16});
  EXPECT_EQ(RecordAutocast::backward_saw, std::vector<DType>{DType::kFloat32});
  EXPECT_EQ(hook_saw_enabled, (std::vector<bool>{false, false}));
  EXPECT_EQ(AutocastDType(), DType::kFloat16) << "backward must give the caller its state back";
  EXPECT_EQ(ToVector<float>(x.grad()), (std::vector<float>{2, 2}));
}

TEST(AutocastTest, GradRunsWithAutocastOffToo) {
  RecordAutocast::backward_saw.clear();
  Tensor x = Leaf({3});
  AutocastGuard bf16(DType::kBFloat16);
  Tensor y = ApplyFunction<RecordAutocast>({x})[0];
  StatusOr<std::vector<Tensor>> g = Grad({ops::Sum(y)}, {x});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(RecordAutocast::backward_saw, std::vector<DType>{DType::kFloat32});
  EXPECT_EQ(AutocastDType(), DType::kBFloat16);
}

}  // namespace
}  // namespace trainyard::autograd
