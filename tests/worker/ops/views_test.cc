#include "worker/ops/views.h"

#include <gtest/gtest.h>

#include "tests/testing/gradcheck.h"
#include "worker/ops/indexing.h"

namespace trainyard::ops {
namespace {

using testing::RandLeaf;

TEST(ViewGradTest, EveryViewOpPassesAGradientCheck) {
  Generator gen(21);
  Tensor x = RandLeaf({3, 4, 5}, &gen);
  EXPECT_GRADCHECK([](auto& in) { return Reshape(in[0], {4, -1}); }, {x});
  EXPECT_GRADCHECK([](auto& in) { return Reshape(Transpose(in[0], 0, 2), {-1}); }, {x});
  EXPECT_GRADCHECK([](auto& in) { return View(in[0], {12, 5}); }, {x});
  EXPECT_GRADCHECK([](auto& in) { return Flatten(in[0], 1); }, {x});
  EXPECT_GRADCHECK([](auto& in) { return Permute(in[0], {2, 0, 1}); }, {x});
  EXPECT_GRADCHECK([](auto& in) { return Slice(in[0], 2, 1, 5, 2); }, {x});
  EXPECT_GRADCHECK([](auto& in) { return Narrow(in[0], 1, 1, 2); }, {x});
  EXPECT_GRADCHECK([](auto& in) { return Select(in[0], 0, -1); }, {x});
  EXPECT_GRADCHECK([](auto& in) { return Expand(Unsqueeze(in[0], 1), {3, 2, 4, 5}); }, {x});
  EXPECT_GRADCHECK([](auto& in) { return Squeeze(Narrow(in[0], 1, 2, 1)); }, {x});
  EXPECT_GRADCHECK([](auto& in) { return Contiguous(Transpose(in[0], 1, 2)); }, {x});
  EXPECT_GRADCHECK([](auto& in) { return Clone(in[0]); }, {x});
}

TEST(ViewGradTest, ToFloat32AndBackKeepsTheGradientPath) {
  Tensor x = FromVector<double>({1, 2});
  x.set_requires_grad(true);
  Tensor y = To(MulScalar(To(x, DType::kFloat32), 3), DType::kFloat64);
  ASSERT_TRUE(autograd::Backward(Sum(y)).ok());
  EXPECT_EQ(x.grad().dtype(), DType::kFloat64);
  EXPECT_EQ(ToVector<double>(x.grad()), (std::vector<double>{3, 3}));
}

TEST(ViewTest, ReshapeCopiesOnlyWhenTheLayoutNeedsIt) {
  Tensor x = Arange(0, 6, 1, Options(DType::kFloat32));
  Tensor v = Reshape(x, {2, 3});
  EXPECT_EQ(v.raw_data(), x.raw_data());
  Tensor t = Transpose(v, 0, 1);
  Tensor r = Reshape(t, {6});
  EXPECT_NE(r.storage(), x.storage());
  EXPECT_EQ(ToVector<float>(r), (std::vector<float>{0, 3, 1, 4, 2, 5}));
}

TEST(ViewTest, MovingToADeviceThatIsNotThereIsAnErrorNamingIt) {
  // No backend library (Unimplemented), or a backend without that device (FailedPrecondition).
  auto r = To(Ones({2}), Device::Cuda(999));
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().code() == StatusCode::kFailedPrecondition ||
              r.status().code() == StatusCode::kUnimplemented)
      << r.status();
  EXPECT_NE(r.status().message().find("cuda:999"), std::string::npos) << r.status();
  EXPECT_TRUE(To(Ones({2}), Device::Cpu()).ok());
}

}  // namespace
}  // namespace trainyard::ops
