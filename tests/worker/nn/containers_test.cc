#include "worker/nn/containers.h"

#include <gtest/gtest.h>

#include "tests/worker/nn/golden_util.h"
#include "worker/nn/activation.h"
#include "worker/nn/linear.h"
#include "worker/tensor/factories.h"

namespace trainyard::nn {
namespace {

using testing::Names;

TEST(SequentialTest, NamesChildrenByIndexAndChainsThem) {
  Sequential seq(
      {std::make_shared<Linear>(FromVector<float>({2}, {1, 1}), Tensor()), std::make_shared<ReLU>(),
       std::make_shared<Linear>(FromVector<float>({3}, {1, 1}), FromVector<float>({1}, {1}))});
  EXPECT_EQ(seq.size(), 3u);
  EXPECT_EQ(Names(seq.StateDict()), (std::vector<std::string>{"0.weight", "2.weight", "2.bias"}));
  EXPECT_EQ(ToVector<float>(seq.Forward(FromVector<float>({1, -1}, {2, 1}))),
            (std::vector<float>{7, 1}));  // 3 * relu(2 x) + 1
  EXPECT_EQ(seq.at(1)->type_name(), "ReLU");
}

TEST(SequentialTest, EmptySequentialIsTheIdentity) {
  Sequential seq;
  Tensor x = Randn({3});
  EXPECT_EQ(ToVector<float>(seq.Forward(x)), ToVector<float>(x));
}

TEST(ModuleListTest, NestsNamesUnderItsOwner) {
  Sequential outer;
  auto list = std::make_shared<ModuleList>();
  list->Append(std::make_shared<Linear>(2, 2));
  list->Append(std::make_shared<Linear>(2, 1, false));
  outer.Append(list);
  EXPECT_EQ(Names(outer.StateDict()),
            (std::vector<std::string>{"0.0.weight", "0.0.bias", "0.1.weight"}));
  EXPECT_EQ(list->at(1)->type_name(), "Linear");
}

TEST(ModuleDictTest, KeepsInsertionOrderAndFindsByName) {
  ModuleDict dict;
  auto b = dict.Insert("b", std::make_shared<Linear>(1, 1));
  dict.Insert("a", std::make_shared<Linear>(1, 1));
  EXPECT_EQ(Names(dict.StateDict()),
            (std::vector<std::string>{"b.weight", "b.bias", "a.weight", "a.bias"}));
  EXPECT_EQ(dict.at("b").get(), b.get());
}

TEST(ContainersDeathTest, OutOfRangeLookupsAreBugs) {
  ModuleList list;
  EXPECT_DEATH(list.at(0), "index 0 is out of range for 0 modules");
  ModuleDict dict;
  EXPECT_DEATH(dict.at("x"), "no module called \"x\"");
}

}  // namespace
}  // namespace trainyard::nn
