// One test per autograd rule (issue "Engine core", section 3).
#include "worker/autograd/engine.h"

#include <gtest/gtest.h>
#include <pthread.h>

#include <thread>

#include "tests/testing/gradcheck.h"
#include "worker/autograd/function.h"
#include "worker/autograd/grad_mode.h"
#include "worker/autograd/hooks.h"
#include "worker/autograd/node.h"
#include "worker/ops/activation.h"
#include "worker/ops/elementwise.h"
#include "worker/ops/reduction.h"
#include "worker/ops/views.h"
#include "worker/tensor/factories.h"

namespace trainyard::autograd {
namespace {

using namespace trainyard::ops;  // NOLINT: the ops under test

Tensor Leaf(std::vector<float> v) {
  Tensor t = FromVector<float>(v);
  t.set_requires_grad(true);
  return t;
}

std::vector<float> Vec(const Tensor& t) { return ToVector<float>(t); }

TEST(AutogradTest, OpsRecordGradFnWithEdgesAndPropagateRequiresGrad) {
  Tensor x = Leaf({1, 2, 3});
  Tensor c = FromVector<float>({4, 5, 6});
  Tensor y = Mul(x, c);
  ASSERT_TRUE(y.requires_grad());
  ASSERT_NE(y.grad_fn(), nullptr);
  EXPECT_STREQ(y.grad_fn()->name(), "MulBackward0");
  ASSERT_EQ(y.grad_fn()->next_edges().size(), 2u);
  EXPECT_TRUE(y.grad_fn()->next_edges()[0].valid());  // x: its AccumulateGrad
  EXPECT_STREQ(y.grad_fn()->next_edges()[0].fn->name(), "AccumulateGrad");
  EXPECT_FALSE(y.grad_fn()->next_edges()[1].valid());  // c needs no gradient
  Tensor z = Exp(y);
  EXPECT_EQ(z.grad_fn()->next_edges()[0].fn, y.grad_fn());
  EXPECT_FALSE(y.is_leaf());
  EXPECT_TRUE(x.is_leaf());
  Tensor no = Mul(c, c);
  EXPECT_FALSE(no.requires_grad());
  EXPECT_EQ(no.grad_fn(), nullptr);
}

TEST(AutogradTest, LeafGradientsAccumulateAcrossBackwardCalls) {
  Tensor x = Leaf({1, 2});
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Backward(Sum(MulScalar(x, 2))).ok());
  EXPECT_EQ(Vec(x.grad()), (std::vector<float>{6, 6}));
}

TEST(AutogradTest, NonLeafKeepsGradOnlyAfterRetainGrad) {
  Tensor x = Leaf({1, 2});
  Tensor h = MulScalar(x, 3);
  Tensor kept = MulScalar(x, 5);
  RetainGrad(kept);
  Tensor loss = Sum(Add(Mul(h, h), kept));
  ASSERT_TRUE(Backward(loss).ok());
  EXPECT_FALSE(h.grad().defined());
  EXPECT_EQ(Vec(kept.grad()), (std::vector<float>{1, 1}));
  EXPECT_EQ(Vec(x.grad()), (std::vector<float>{2 * 3 * 3 * 1 + 5, 2 * 3 * 3 * 2 + 5}));
}

TEST(AutogradTest, SavedTensorsAreReleasedAfterBackward) {
  Tensor x = Leaf({1, 2, 3});
  Tensor y = Exp(x);  // ExpBackward0 saves its output
  std::weak_ptr<Storage> y_storage = y.storage();
  Tensor loss = Sum(Exp(y));
  y = Tensor();
  EXPECT_FALSE(y_storage.expired()) << "the graph must hold the saved tensor";
  ASSERT_TRUE(Backward(loss).ok());
  EXPECT_TRUE(y_storage.expired()) << "backward must free saved tensors";
  EXPECT_NE(loss.grad_fn(), nullptr);  // the graph itself is still alive
}

TEST(AutogradTest, BackwardOnANonScalarNeedsAGradient) {
  Tensor x = Leaf({1, 2, 3});
  Tensor y = Mul(x, x);
  Status s = Backward(y);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("only for scalar outputs"), std::string::npos) << s;
  EXPECT_NE(s.message().find("[3]"), std::string::npos) << s;
  // With a gradient it is a vector-Jacobian product: v * 2x.
  ASSERT_TRUE(Backward(y, FromVector<float>({1, 10, 100})).ok());
  EXPECT_EQ(Vec(x.grad()), (std::vector<float>{2, 40, 600}));
  EXPECT_EQ(Backward(y, FromVector<float>({1, 2})).code(), StatusCode::kInvalidArgument);
}

TEST(AutogradTest, RetainGraphAllowsASecondBackward) {
  Tensor x = Leaf({2});
  Tensor loss = Sum(Mul(x, x));
  ASSERT_TRUE(Backward(loss, Tensor(), /*retain_graph=*/true).ok());
  ASSERT_TRUE(Backward(loss).ok());
  EXPECT_EQ(Vec(x.grad()), (std::vector<float>{8}));
}

TEST(AutogradTest, SecondBackwardThroughAFreedGraphIsAClearError) {
  Tensor x = Leaf({2});
  Tensor loss = Sum(Mul(x, x));
  ASSERT_TRUE(Backward(loss).ok());
  Status s = Backward(loss);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("second time"), std::string::npos) << s;
  EXPECT_NE(s.message().find("MulBackward0"), std::string::npos) << s;
  EXPECT_NE(s.message().find("retain_graph"), std::string::npos) << s;
}

TEST(AutogradTest, GradReturnsGradientsWithoutTouchingDotGrad) {
  Tensor x = Leaf({1, 2});
  Tensor w = Leaf({3, 4});
  Tensor h = Mul(x, w);
  Tensor loss = Sum(Mul(h, h));
  auto g = Grad({loss}, {x, h});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(Vec((*g)[0]), (std::vector<float>{2 * 3 * 3 * 1, 2 * 8 * 4}));  // 2 h w
  EXPECT_EQ(Vec((*g)[1]), (std::vector<float>{6, 16}));                     // 2 h
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(w.grad().defined());
}

TEST(AutogradTest, GradAppliesTheHooksOfLeafInputs) {
  Tensor x = Leaf({1, 2});
  RegisterHook(x, [](const Tensor& g) { return MulScalar(g, 10); });
  auto g = Grad({Sum(MulScalar(x, 3))}, {x});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(Vec((*g)[0]), (std::vector<float>{30, 30}));
  EXPECT_FALSE(x.grad().defined());
}

TEST(AutogradTest, GradOfAnUnusedInputIsAnErrorUnlessAllowed) {
  Tensor x = Leaf({1});
  Tensor unused = Leaf({1});
  Tensor y = Sum(Mul(x, x));
  auto g = Grad({y}, {x, unused}, {}, {true, false});
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  auto g2 = Grad({y}, {x, unused}, {}, {false, true});
  ASSERT_TRUE(g2.ok());
  EXPECT_TRUE((*g2)[0].defined());
  EXPECT_FALSE((*g2)[1].defined());
}

TEST(AutogradTest, NoGradGuardStopsRecording) {
  Tensor x = Leaf({1, 2});
  {
    NoGradGuard no_grad;
    Tensor y = Mul(x, x);
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
  }
  EXPECT_TRUE(Mul(x, x).requires_grad());
}

TEST(AutogradTest, DetachSharesStorageButCutsTheGraph) {
  Tensor x = Leaf({1, 2});
  Tensor y = MulScalar(x, 2);
  Tensor d = y.detach();
  EXPECT_EQ(d.raw_data(), y.raw_data());
  EXPECT_FALSE(d.requires_grad());
  Tensor loss = Sum(Add(Mul(d, x), y));
  ASSERT_TRUE(Backward(loss).ok());
  // d(d*x + 2x)/dx = d + 2, with no path through d.
  EXPECT_EQ(Vec(x.grad()), (std::vector<float>{4, 6}));
}

TEST(AutogradTest, ModifyingASavedTensorInPlaceIsAnErrorNamingTheOp) {
  Tensor w = Leaf({1, 2});
  Tensor a = FromVector<float>({3, 4});
  Tensor loss = Sum(Mul(w, a));  // MulBackward0 saves a
  AddScalarInPlace(a, 1);
  Status s = Backward(loss);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("modified by an in-place operation"), std::string::npos) << s;
  EXPECT_NE(s.message().find("MulBackward0"), std::string::npos) << s;
  EXPECT_NE(s.message().find("version 1; expected version 0"), std::string::npos) << s;
}

TEST(AutogradTest, TensorHooksSeeAndMayReplaceGradients) {
  Tensor x = Leaf({1, 2});
  Tensor h = MulScalar(x, 3);
  std::vector<float> seen;
  RegisterHook(h, [&](const Tensor& g) {
    seen = Vec(g);
    return MulScalar(g, 10);  // replace
  });
  RegisterHook(x, [](const Tensor& g) { return AddScalar(g, 1); });
  ASSERT_TRUE(Backward(Sum(h)).ok());
  EXPECT_EQ(seen, (std::vector<float>{1, 1}));
  EXPECT_EQ(Vec(x.grad()), (std::vector<float>{31, 31}));
}

TEST(AutogradTest, AHookReturningTheWrongShapeIsAnError) {
  Tensor x = Leaf({1, 2});
  Tensor h = MulScalar(x, 3);
  RegisterHook(h, [](const Tensor&) { return Ones({3}); });
  Status s = Backward(Sum(h));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("returned shape [3]"), std::string::npos) << s;
  Tensor y = Leaf({1});
  RegisterHook(y, [](const Tensor&) { return Ones({2}); });
  EXPECT_EQ(Backward(Sum(MulScalar(y, 2))).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(y.grad().defined());
}

TEST(AutogradTest, PostAccumulateGradHooksRunAfterDotGradIsUpdated) {
  Tensor x = Leaf({1, 2});
  std::vector<std::vector<float>> seen;
  RegisterPostAccumulateGradHook(x, [&](const Tensor& leaf) { seen.push_back(Vec(leaf.grad())); });
  ASSERT_TRUE(Backward(Sum(MulScalar(x, 2))).ok());
  ASSERT_TRUE(Backward(Sum(MulScalar(x, 2))).ok());
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], (std::vector<float>{2, 2}));
  EXPECT_EQ(seen[1], (std::vector<float>{4, 4}));
}

TEST(AutogradTest, AUsedTwiceLeafRunsItsPostAccumulateHookOncePerBackward) {
  Tensor x = Leaf({1});
  int calls = 0;
  RegisterPostAccumulateGradHook(x, [&](const Tensor&) { ++calls; });
  ASSERT_TRUE(Backward(Sum(Add(Mul(x, x), x))).ok());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(Vec(x.grad()), (std::vector<float>{3}));
}

struct Cube {
  static std::vector<Tensor> Forward(FunctionContext& ctx, const std::vector<Tensor>& in) {
    ctx.SaveForBackward({in[0]});
    ctx.data["k"] = 3;
    return {Mul(Mul(in[0], in[0]), in[0])};
  }
  static std::vector<Tensor> Backward(FunctionContext& ctx, const std::vector<Tensor>& g) {
    Tensor x = ctx.saved_tensors()[0];
    return {Mul(g[0], MulScalar(Mul(x, x), ctx.data["k"]))};
  }
};

TEST(AutogradTest, CustomFunctionsRunTheirOwnBackward) {
  Tensor x = Leaf({1, 2});
  Tensor y = ApplyFunction<Cube>({x})[0];
  EXPECT_STREQ(y.grad_fn()->name(), "CubeBackward");
  ASSERT_TRUE(Backward(Sum(y)).ok());
  EXPECT_EQ(Vec(x.grad()), (std::vector<float>{3, 12}));
  Generator gen(5);
  EXPECT_GRADCHECK([](auto& in) { return ApplyFunction<Cube>({in[0]})[0]; },
                   {testing::RandLeaf({4}, &gen)});
}

struct WrongCount {
  static std::vector<Tensor> Forward(FunctionContext&, const std::vector<Tensor>& in) {
    return {MulScalar(in[0], 2)};
  }
  static std::vector<Tensor> Backward(FunctionContext&, const std::vector<Tensor>& g) {
    return {g[0], g[0]};
  }
};

TEST(AutogradTest, ACustomFunctionReturningTooManyGradientsIsAnError) {
  Tensor x = Leaf({1});
  Status s = Backward(Sum(ApplyFunction<WrongCount>({x})[0]));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("WrongCountBackward returned 2 gradients"), std::string::npos) << s;
}

struct WrongDerivative {
  static std::vector<Tensor> Forward(FunctionContext&, const std::vector<Tensor>& in) {
    return {Mul(in[0], in[0])};
  }
  static std::vector<Tensor> Backward(FunctionContext&, const std::vector<Tensor>& g) {
    return {g[0]};  // should be 2x g
  }
};

TEST(AutogradTest, GradCheckCatchesAWrongBackward) {
  Generator gen(6);
  std::string msg =
      testing::GradCheckMessage([](auto& in) { return ApplyFunction<WrongDerivative>({in[0]})[0]; },
                                {testing::RandLeaf({3}, &gen)});
  EXPECT_NE(msg.find("analytic"), std::string::npos) << msg;
}

// Runs fn on a thread with a 256 KiB stack: deep recursion over 100 000 nodes would overflow.
void RunOnSmallStack(void (*fn)()) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  pthread_t thread;
  ASSERT_EQ(pthread_create(
                &thread, &attr,
                [](void* f) -> void* {
                  reinterpret_cast<void (*)()>(f)();
                  return nullptr;
                },
                reinterpret_cast<void*>(fn)),
            0);
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
}

TEST(AutogradTest, AChainOfOneHundredThousandOpsNeedsNoRecursion) {
  static std::vector<float> grad;
  RunOnSmallStack([] {
    Tensor x = Leaf({1});
    Tensor y = x;
    for (int i = 0; i < 100000; ++i) y = AddScalar(y, 1e-3);
    Status s = Backward(Sum(y));
    grad = s.ok() ? Vec(x.grad()) : std::vector<float>{};
    y = Tensor();  // destroying the chain must not recurse either
  });
  EXPECT_EQ(grad, (std::vector<float>{1}));
}

TEST(AutogradTest, DroppingALongChainOfOpsThatSaveInputsNeedsNoRecursion) {
  static bool done = false;
  RunOnSmallStack([] {
    Tensor w = Leaf({1});
    Tensor y = Leaf({1});
    for (int i = 0; i < 100000; ++i) y = Mul(y, w);  // each MulBackward0 saves its inputs
    y = Tensor();                                    // no backward: saved tensors still held
    done = true;
  });
  EXPECT_TRUE(done);
}

TEST(AutogradTest, GradDoesNotRunOrFreeTheCapturedNode) {
  Tensor x = Leaf({1, 2});
  Tensor w = Leaf({3, 4});
  Tensor h = Mul(x, w);
  auto g = Grad({Sum(Exp(h))}, {h});
  ASSERT_TRUE(g.ok()) << g.status();
  // MulBackward0 did not run in Grad(), so its saved tensors are still there.
  ASSERT_TRUE(Backward(Sum(h)).ok());
  EXPECT_EQ(Vec(x.grad()), (std::vector<float>{3, 4}));
}

TEST(AutogradTest, AHookMayRunItsOwnBackwardThroughSharedLeaves) {
  Tensor w = Leaf({2});
  Tensor a = MulScalar(w, 3);
  std::vector<float> inner;
  RegisterHook(a, [&](const Tensor& g) {
    auto r = Grad({Sum(Mul(w, w))}, {w});  // shares w's AccumulateGrad with the outer run
    inner = r.ok() ? Vec((*r)[0]) : std::vector<float>{};
    return g;
  });
  ASSERT_TRUE(Backward(Sum(a)).ok());
  EXPECT_EQ(inner, (std::vector<float>{4}));
  EXPECT_EQ(Vec(w.grad()), (std::vector<float>{3}));
}

TEST(AutogradTest, BackwardOnTwoThreadsThroughASharedParameterSumsBoth) {
  Tensor w = Leaf({1, 1, 1, 1});
  auto work = [&](float k) {
    for (int i = 0; i < 200; ++i) ASSERT_TRUE(Backward(Sum(MulScalar(w, k))).ok());
  };
  std::thread t1(work, 1.0f), t2(work, 2.0f);
  t1.join();
  t2.join();
  EXPECT_EQ(Vec(w.grad()), (std::vector<float>(4, 600)));
}

TEST(AutogradTest, ADiamondSumsTheGradientsOfBothPaths) {
  Tensor x = Leaf({2});
  Tensor a = MulScalar(x, 3);
  Tensor left = Mul(a, a);         // 9x^2
  Tensor right = MulScalar(a, 4);  // 12x
  ASSERT_TRUE(Backward(Sum(Add(left, right))).ok());
  EXPECT_EQ(Vec(x.grad()), (std::vector<float>{18 * 2 + 12}));
}

TEST(AutogradTest, BackwardFromSeveralRootsThatDependOnEachOther) {
  Tensor x = Leaf({1, 2});
  Tensor y = Sum(MulScalar(x, 2));
  Tensor z = MulScalar(y, 3);
  ASSERT_TRUE(Backward(std::vector<Tensor>{y, z}, {}).ok());
  EXPECT_EQ(Vec(x.grad()), (std::vector<float>{8, 8}));  // 2 + 6
}

TEST(AutogradTest, BackwardOnATensorThatNeedsNoGradIsAnError) {
  Status s = Backward(Sum(Ones({2})));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("does not require grad"), std::string::npos) << s;
}

TEST(AutogradTest, GradientsFlowThroughViews) {
  Tensor x = Leaf({1, 2, 3, 4, 5, 6});
  Tensor m = Reshape(x, {2, 3});
  Tensor t = Transpose(m, 0, 1);  // (3, 2)
  Tensor s = Slice(t, 0, 1, 3);   // rows 1..2
  Tensor e = Expand(Unsqueeze(Select(s, 1, 0), 0), {4, 2});
  ASSERT_TRUE(Backward(Sum(e)).ok());
  // Select(s, 1, 0) = m[0, 1:3] = x[1], x[2], each used 4 times by the expand.
  EXPECT_EQ(Vec(x.grad()), (std::vector<float>{0, 4, 4, 0, 0, 0}));
}

}  // namespace
}  // namespace trainyard::autograd
