// Test helpers for the model zoo: the PyTorch references written by
// tests/golden/make_nn_golden.py (state dict listings and forward values) and checks that
// apply to every model.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/testing/golden.h"
#include "worker/autograd/engine.h"
#include "worker/nn/module.h"
#include "worker/ops/loss.h"
#include "worker/ops/views.h"

namespace trainyard::nn::testing {

using trainyard::testing::GoldenPath;

// The names of a state dict or parameter list, in order.
inline std::vector<std::string> Names(const NamedTensors& list) {
  std::vector<std::string> names;
  for (const auto& entry : list) names.push_back(entry.first);
  return names;
}

// One model of nn_state_dicts.txt: "key dtype [dims]" per state dict entry, in order.
struct StateDictListing {
  std::vector<std::string> entries;
  int64_t params = -1;  // sum of numel over model.parameters()
};

inline std::string DescribeEntry(const std::string& key, const Tensor& t) {
  return key + " " + DTypeName(t.dtype()) + " " + t.shape().ToString();
}

// Reads nn_state_dicts.txt; an unreadable file gives an empty map.
inline std::map<std::string, StateDictListing> ReadStateDictListings() {
  std::ifstream in(GoldenPath("nn_state_dicts.txt"));
  std::map<std::string, StateDictListing> out;
  std::string line, model;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string kind;
    words >> kind;
    if (kind == "model") {
      words >> model;
    } else if (kind == "entry") {
      std::string key, dtype;
      int ndim = 0;
      words >> key >> dtype >> ndim;
      std::vector<int64_t> dims(ndim);
      for (int64_t& d : dims) words >> d;
      out[model].entries.push_back(key + " " + dtype + " " + Shape(dims).ToString());
    } else if (kind == "params") {
      words >> out[model].params;
    }
  }
  return out;
}

// Expects module's state dict to list exactly what PyTorch listed for `config_name`, in the
// same order, and its parameter count to match.
inline void ExpectStateDictMatchesTorch(const Module& module, const std::string& config_name) {
  static const std::map<std::string, StateDictListing> listings = ReadStateDictListings();
  auto it = listings.find(config_name);
  ASSERT_NE(it, listings.end()) << "no listing \"" << config_name << "\" in "
                                << GoldenPath("nn_state_dicts.txt");
  std::vector<std::string> ours;
  for (const auto& [key, t] : module.StateDict()) ours.push_back(DescribeEntry(key, t));
  EXPECT_EQ(ours, it->second.entries);
  EXPECT_EQ(module.NumParameters(), it->second.params);
}

// max |a - b| / max |b| like ::trainyard::testing::RelativeError, but infinite when a and b
// differ in shape or when a holds a NaN or infinity where b is finite (which that function's
// std::max would skip).
inline double RelativeError(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return std::numeric_limits<double>::infinity();
  const std::vector<double> x = ToVector<double>(a), y = ToVector<double>(b);
  for (size_t i = 0; i < x.size(); ++i)
    if (!std::isfinite(x[i]) && std::isfinite(y[i])) return std::numeric_limits<double>::infinity();
  return ::trainyard::testing::RelativeError(a, b);
}

// The case called `name` of nn_parity.txt (fails the test when absent).
inline ::trainyard::testing::GoldenCase ParityCase(const std::string& name) {
  static const std::vector<::trainyard::testing::GoldenCase> cases =
      ::trainyard::testing::ReadGolden(GoldenPath("nn_parity.txt"));
  for (const auto& c : cases)
    if (c.name == name) return c;
  ADD_FAILURE() << "no case \"" << name << "\" in " << GoldenPath("nn_parity.txt");
  return {};
}

// The case's "state.<key>" tensors as a state dict, in file (PyTorch's) order.
inline NamedTensors StateOf(const ::trainyard::testing::GoldenCase& c) {
  NamedTensors state;
  const std::string prefix = "state.";
  for (const std::string& name : c.order)
    if (name.compare(0, prefix.size(), prefix) == 0)
      state.emplace_back(name.substr(prefix.size()), c.at(name));
  return state;
}

// Runs a cross-entropy loss on logits (*, classes) against label 0 and backward, then expects
// every parameter to have a gradient with a non-zero element.
inline void ExpectBackwardReachesEveryParameter(Module& module, const Tensor& input) {
  Tensor logits = module.Forward(input);
  const int64_t classes = logits.size(-1);
  Tensor flat = ops::Reshape(logits, {-1, classes});
  Tensor labels = Zeros({flat.size(0)}, Options(DType::kInt64));
  ASSERT_TRUE(autograd::Backward(ops::CrossEntropy(flat, labels)).ok());
  for (const auto& [name, p] : module.NamedParameters()) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(p.grad().defined());
    bool any_nonzero = false;
    for (float g : ToVector<float>(p.grad())) any_nonzero |= g != 0;
    EXPECT_TRUE(any_nonzero);
  }
}

// Whether two modules' state dicts hold the same names and values.
inline bool SameState(const Module& a, const Module& b) {
  const NamedTensors sa = a.StateDict(), sb = b.StateDict();
  if (sa.size() != sb.size()) return false;
  for (size_t i = 0; i < sa.size(); ++i) {
    if (sa[i].first != sb[i].first) return false;
    if (ToVector<double>(sa[i].second) != ToVector<double>(sb[i].second)) return false;
  }
  return true;
}

}  // namespace trainyard::nn::testing
