// Replays the optimizer cases of tests/golden/optim.txt (written by
// tests/golden/make_optim_golden.py; the format is described there).
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tests/testing/golden.h"
#include "worker/optim/optimizer.h"

namespace trainyard::optim::test_util {

using trainyard::testing::GoldenCase;

inline std::string OptimGoldenPath() { return trainyard::testing::GoldenPath("optim.txt"); }

// The case named `name`; fails the calling test (and returns nullptr) when it is missing.
inline const GoldenCase* FindGoldenCase(const std::string& name) {
  static const auto* cases =
      new std::vector<GoldenCase>(trainyard::testing::ReadGolden(OptimGoldenPath()));
  for (const GoldenCase& c : *cases)
    if (c.name == name) return &c;
  ADD_FAILURE() << "no case " << name << " in " << OptimGoldenPath()
                << "; run python3 tests/golden/make_optim_golden.py";
  return nullptr;
}

using MakeOptimizer = std::function<std::unique_ptr<Optimizer>(std::vector<NamedTensor>)>;

// Builds the case's parameters, then for each step sets the recorded gradients (undefined where
// the case has none), calls Step() and compares every parameter with PyTorch's:
// max |ours - torch| / max |torch| <= 1e-6. (Measured: at most 3.3e-9, from PyTorch's MKL sqrt;
// see Note [Fused multiply-add] in kernels/cpu/optim.cc.)
inline void ExpectReplayMatchesTorch(const std::string& case_name, const MakeOptimizer& make) {
  SCOPED_TRACE(case_name);
  const GoldenCase* c = FindGoldenCase(case_name);
  if (c == nullptr) return;
  std::vector<NamedTensor> params;
  for (int i = 0; c->has("param." + std::to_string(i)); ++i) {
    Tensor p = ConvertTo(c->at("param." + std::to_string(i)), DType::kFloat32, true);
    params.emplace_back("p" + std::to_string(i), p.set_requires_grad(true));
  }
  ASSERT_EQ(params.size(), 3u);
  std::unique_ptr<Optimizer> opt = make(params);
  ASSERT_NE(opt, nullptr);
  int steps = 0;
  for (int t = 0; c->has("after." + std::to_string(t) + ".0"); ++t, ++steps) {
    const std::string prefix = std::to_string(t) + ".";
    for (size_t i = 0; i < params.size(); ++i) {
      const std::string key = "grad." + prefix + std::to_string(i);
      params[i].second.set_grad(c->has(key) ? c->at(key) : Tensor());
    }
    opt->Step();
    for (size_t i = 0; i < params.size(); ++i) {
      const Tensor& want = c->at("after." + prefix + std::to_string(i));
      EXPECT_LE(trainyard::testing::RelativeError(params[i].second, want), 1e-6)
          << "step " << t << ", parameter " << i;
    }
  }
  EXPECT_EQ(steps, 20);
}

}  // namespace trainyard::optim::test_util
