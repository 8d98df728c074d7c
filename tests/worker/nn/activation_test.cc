#include "worker/nn/activation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>

#include "worker/tensor/factories.h"

namespace trainyard::nn {
namespace {

TEST(ActivationTest, EachLayerAppliesItsFunctionElementwise) {
  const std::vector<float> xs = {-2.0f, -0.5f, 0.0f, 0.7f, 3.0f};
  const double k = std::sqrt(2 / M_PI);
  struct Case {
    std::shared_ptr<Module> layer;
    std::function<double(double)> f;
  };
  const Case cases[] = {
      {std::make_shared<ReLU>(), [](double x) { return x > 0 ? x : 0; }},
      {std::make_shared<GELU>(), [](double x) { return 0.5 * x * (1 + std::erf(x / M_SQRT2)); }},
      {std::make_shared<GELU>("tanh"),
       [k](double x) { return 0.5 * x * (1 + std::tanh(k * (x + 0.044715 * x * x * x))); }},
      {std::make_shared<Tanh>(), [](double x) { return std::tanh(x); }},
      {std::make_shared<Sigmoid>(), [](double x) { return 1 / (1 + std::exp(-x)); }},
      {std::make_shared<SiLU>(), [](double x) { return x / (1 + std::exp(-x)); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.layer->type_name());
    const std::vector<float> y = ToVector<float>(c.layer->Forward(FromVector<float>(xs)));
    for (size_t i = 0; i < xs.size(); ++i) EXPECT_NEAR(y[i], c.f(xs[i]), 1e-6);
    EXPECT_TRUE(c.layer->StateDict().empty());
  }
}

TEST(ActivationDeathTest, GeluRejectsAnUnknownApproximation) {
  EXPECT_DEATH(GELU("erf"), "approximate \"erf\" must be \"none\" or \"tanh\"");
}

}  // namespace
}  // namespace trainyard::nn
