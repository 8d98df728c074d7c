#include "worker/nn/module.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/worker/nn/golden_util.h"
#include "worker/autograd/engine.h"
#include "worker/autograd/grad_mode.h"
#include "worker/nn/containers.h"
#include "worker/nn/linear.h"
#include "worker/ops/elementwise.h"
#include "worker/ops/reduction.h"
#include "worker/tensor/factories.h"

namespace trainyard::nn {
namespace {

using ::testing::HasSubstr;

// A module with parameters, a buffer and a child, to check the listing order:
// "a", "b" (parameters), "stat" (buffer), then the child's entries.
class Leaf : public Module {
 public:
  explicit Leaf(float fill) : Module("Leaf") {
    a = RegisterParameter("a", Full({2}, fill));
    stat = RegisterBuffer("stat", Zeros({3}));
    b = RegisterParameter("b", Full({2, 2}, fill));
  }
  Tensor Forward(const Tensor& x) override { return ops::Add(ops::Mul(x, a), ops::Sum(b)); }
  Tensor a, b, stat;
};

class Tree : public Module {
 public:
  Tree() : Module("Tree") {
    w = RegisterParameter("w", Ones({1}));
    left = RegisterModule("left", std::make_shared<Leaf>(1));
    count = RegisterBuffer("count", Zeros(Shape{}, Options(DType::kInt64)));
    right = RegisterModule("right", std::make_shared<Leaf>(2));
  }
  Tensor Forward(const Tensor& x) override { return right->Forward(left->Forward(ops::Mul(x, w))); }
  Tensor w, count;
  std::shared_ptr<Leaf> left, right;
};

using testing::Names;

TEST(ModuleTest, StateDictListsParametersThenBuffersThenChildrenLikePyTorch) {
  Tree tree;
  EXPECT_EQ(Names(tree.StateDict()),
            (std::vector<std::string>{"w", "count", "left.a", "left.b", "left.stat", "right.a",
                                      "right.b", "right.stat"}));
  EXPECT_EQ(Names(tree.NamedParameters()),
            (std::vector<std::string>{"w", "left.a", "left.b", "right.a", "right.b"}));
  EXPECT_EQ(Names(tree.NamedBuffers()),
            (std::vector<std::string>{"count", "left.stat", "right.stat"}));
  EXPECT_EQ(tree.NumParameters(), 1 + 2 * (2 + 4));
  EXPECT_EQ(tree.Parameters().size(), 5u);
}

TEST(ModuleTest, StateDictHoldsTheModulesOwnTensors) {
  Tree tree;
  EXPECT_EQ(tree.StateDict()[2].second.impl(), tree.left->a.impl());
}

TEST(ModuleTest, RegisterParameterMakesTheTensorRequireGradButNotABuffer) {
  Tree tree;
  EXPECT_TRUE(tree.w.requires_grad());
  EXPECT_TRUE(tree.left->b.requires_grad());
  EXPECT_FALSE(tree.left->stat.requires_grad());
}

TEST(ModuleTest, TiedTensorIsOneParameterButTwoStateDictEntries) {
  auto seq = std::make_shared<Sequential>();
  auto first = std::make_shared<Linear>(3, 4);
  seq->Append(first);
  seq->Append(std::make_shared<Linear>(first->weight(), Tensor()));
  EXPECT_EQ(Names(seq->StateDict()), (std::vector<std::string>{"0.weight", "0.bias", "1.weight"}));
  EXPECT_EQ(Names(seq->NamedParameters()), (std::vector<std::string>{"0.weight", "0.bias"}));
  EXPECT_EQ(seq->NumParameters(), 12 + 4);
}

TEST(ModuleTest, TrainAndEvalReachEveryDescendant) {
  Tree tree;
  EXPECT_TRUE(tree.is_training());
  tree.Eval();
  EXPECT_FALSE(tree.is_training());
  EXPECT_FALSE(tree.left->is_training());
  EXPECT_FALSE(tree.right->is_training());
  tree.Train();
  EXPECT_TRUE(tree.right->is_training());
}

TEST(ModuleTest, ApplyVisitsChildrenBeforeTheirParent) {
  Tree tree;
  std::vector<std::string> order;
  tree.Apply([&](Module& m) { order.push_back(m.type_name()); });
  EXPECT_EQ(order, (std::vector<std::string>{"Leaf", "Leaf", "Tree"}));
}

TEST(ModuleTest, ZeroGradDropsOrZeroesEveryGradient) {
  Tree tree;
  ASSERT_TRUE(autograd::Backward(ops::Sum(tree.Forward(Ones({2})))).ok());
  for (const Tensor& p : tree.Parameters()) ASSERT_TRUE(p.grad().defined());
  tree.ZeroGrad(/*set_to_none=*/false);
  for (const Tensor& p : tree.Parameters()) {
    ASSERT_TRUE(p.grad().defined());
    for (float g : ToVector<float>(p.grad())) EXPECT_EQ(g, 0.0f);
  }
  tree.ZeroGrad();
  for (const Tensor& p : tree.Parameters()) EXPECT_FALSE(p.grad().defined());
}

TEST(ModuleTest, LoadStateDictCopiesIntoTheExistingTensors) {
  Tree source, target;
  NoGradGuard no_grad;
  FillInPlace(source.left->b, 7);
  FillInPlace(source.count, 5);
  const TensorImpl* held = target.left->b.impl();  // as an optimizer would hold it
  ASSERT_TRUE(target.LoadStateDict(source.StateDict()).ok());
  EXPECT_EQ(target.left->b.impl(), held);
  EXPECT_EQ(ToVector<float>(target.left->b), std::vector<float>(4, 7.0f));
  EXPECT_EQ(target.count.item(), 5);
  EXPECT_TRUE(target.left->b.requires_grad());
  EXPECT_NE(source.left->b.storage(), target.left->b.storage());
}

TEST(ModuleTest, LoadStateDictReportsEveryProblemAtOnceAndCopiesNothing) {
  Tree target;
  NamedTensors state = target.StateDict();
  state.erase(state.begin() + 3);                 // left.b missing
  state.erase(state.begin() + 3);                 // left.stat missing
  state.emplace_back("left.extra", Zeros({1}));   // unexpected
  state[0].second = Full({2}, 9.0);               // w: wrong shape
  state[1].second = Zeros(Shape{});               // count: wrong dtype
  state.emplace_back("right.a", Full({2}, 3.0));  // duplicate
  state[3].second = Full({2}, 4.0);               // right.a: valid, yet not copied
  Status s = target.LoadStateDict(state);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("missing keys: left.b, left.stat"));
  EXPECT_THAT(s.message(), HasSubstr("unexpected keys: left.extra"));
  EXPECT_THAT(s.message(), HasSubstr("duplicate keys: right.a"));
  EXPECT_THAT(s.message(), HasSubstr("w is [2] float32 in the state dict but [1] float32"));
  EXPECT_THAT(s.message(), HasSubstr("count is [] float32 in the state dict but [] int64"));
  EXPECT_EQ(ToVector<float>(target.right->a), std::vector<float>(2, 2.0f));
}

TEST(ModuleTest, NonStrictLoadSkipsMissingAndUnexpectedKeysButNotMismatches) {
  Tree target;
  NamedTensors state = {{"left.a", Full({2}, 6.0)}, {"nope", Zeros({1})}};
  ASSERT_TRUE(target.LoadStateDict(state, /*strict=*/false).ok());
  EXPECT_EQ(ToVector<float>(target.left->a), std::vector<float>(2, 6.0f));
  EXPECT_FALSE(target.LoadStateDict(state, /*strict=*/true).ok());
  state.emplace_back("right.a", Zeros({5}));
  Status s = target.LoadStateDict(state, /*strict=*/false);
  EXPECT_THAT(s.message(), HasSubstr("right.a is [5] float32"));
}

TEST(ModuleTest, LoadStateDictAcceptsATiedTensorStoredOnce) {
  Sequential seq;
  auto first = std::make_shared<Linear>(3, 4);
  seq.Append(first);
  seq.Append(std::make_shared<Linear>(first->weight(), Tensor()));
  NamedTensors state = {{"0.weight", Full({4, 3}, 0.5)}, {"0.bias", Zeros({4})}};
  ASSERT_TRUE(seq.LoadStateDict(state).ok());
  EXPECT_EQ(ToVector<float>(first->weight()), std::vector<float>(12, 0.5f));
  state.pop_back();
  EXPECT_THAT(seq.LoadStateDict(state).message(), HasSubstr("missing keys: 0.bias"));
}

class NeedsPairs : public Module {
 public:
  NeedsPairs() : Module("NeedsPairs") {}
  Tensor Forward(const Tensor& x) override { return x; }
  Status CheckInput(const Tensor& x) const override {
    if (x.numel() % 2 == 0) return OkStatus();
    return InvalidArgumentError("odd input");
  }
};

TEST(ModuleTest, TryForwardReturnsTheInputCheckError) {
  NeedsPairs m;
  EXPECT_TRUE(m.TryForward(Zeros({4})).ok());
  StatusOr<Tensor> bad = m.TryForward(Zeros({3}));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "odd input");
}

TEST(ModuleDeathTest, ForwardOfAModuleWithoutOneNamesItsType) {
  ModuleList list;
  EXPECT_DEATH(list.Forward(Zeros({1})), "ModuleList has no Forward");
}

TEST(ModuleDeathTest, RegisteringANameTwiceIsABug) {
  Tree tree;
  EXPECT_DEATH(tree.RegisterBuffer("w", Zeros({1})), "\"w\" is already registered");
  EXPECT_DEATH(tree.RegisterParameter("a.b", Zeros({1})), "contain no '.'");
}

}  // namespace
}  // namespace trainyard::nn
