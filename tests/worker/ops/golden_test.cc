// Forward values and gradients of every op, a small MLP and a tiny transformer block against
// PyTorch (tests/golden/ops.txt, written by tests/golden/make_golden.py): relative error
// max |ours - torch| / max |torch| <= 1e-5 in float32.
#include "tests/testing/golden.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <set>

#include "worker/autograd/engine.h"
#include "worker/ops/activation.h"
#include "worker/ops/attention.h"
#include "worker/ops/conv.h"
#include "worker/ops/elementwise.h"
#include "worker/ops/indexing.h"
#include "worker/ops/linalg.h"
#include "worker/ops/loss.h"
#include "worker/ops/norm.h"
#include "worker/ops/pool.h"
#include "worker/ops/reduction.h"
#include "worker/ops/softmax.h"
#include "worker/ops/views.h"

namespace trainyard::ops {
namespace {

using testing::GoldenCase;
using In = std::map<std::string, Tensor>;
using OpFn = std::function<Tensor(In&)>;

Tensor Unary(In& in, Tensor (*f)(const Tensor&)) { return f(in["x"]); }

Tensor TransformerBlock(In& in) {
  const int64_t B = 2, T = 5, C = 8, H = 2;
  Tensor x = in["x"];
  Tensor h = LayerNorm(x, {C}, in["ln1_w"], in["ln1_b"]);
  std::vector<Tensor> qkv = Split(Linear(h, in["attn_w"], in["attn_b"]), C, 2);
  auto heads = [&](const Tensor& t) { return Transpose(View(t, {B, T, H, C / H}), 1, 2); };
  Tensor y = ScaledDotProductAttention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), true);
  y = Reshape(Transpose(y, 1, 2), {B, T, C});
  x = Add(x, Linear(y, in["proj_w"], in["proj_b"]));
  h = LayerNorm(x, {C}, in["ln2_w"], in["ln2_b"]);
  Tensor m = Gelu(Linear(h, in["fc_w"], in["fc_b"]), "tanh");
  return Add(x, Linear(m, in["fc2_w"], in["fc2_b"]));
}

// The ops by case name (tests/golden/ops/<name>.safetensors), in three tables.
std::map<std::string, OpFn> ElementwiseOps() {
  return {
      {"add", [](In& in) { return Add(in["a"], in["b"], 0.7); }},
      {"sub", [](In& in) { return Sub(in["a"], in["b"], 1.3); }},
      {"mul", [](In& in) { return Mul(in["a"], in["b"]); }},
      {"div", [](In& in) { return Div(in["a"], in["b"]); }},
      {"maximum", [](In& in) { return Maximum(in["input"], in["other"]); }},
      {"minimum", [](In& in) { return Minimum(in["input"], in["other"]); }},
      {"pow_tensor", [](In& in) { return Pow(in["input"], in["exponent"]); }},
      {"neg", [](In& in) { return Unary(in, Neg); }},
      {"exp", [](In& in) { return Unary(in, Exp); }},
      {"abs", [](In& in) { return Unary(in, Abs); }},
      {"relu", [](In& in) { return Unary(in, Relu); }},
      {"gelu", [](In& in) { return Gelu(in["x"]); }},
      {"gelu_tanh", [](In& in) { return Gelu(in["x"], "tanh"); }},
      {"sigmoid", [](In& in) { return Unary(in, Sigmoid); }},
      {"tanh", [](In& in) { return Unary(in, Tanh); }},
      {"silu", [](In& in) { return Unary(in, Silu); }},
      {"clamp", [](In& in) { return Clamp(in["x"], -0.5, 0.4); }},
      {"pow_scalar", [](In& in) { return Pow(in["x"], 2.0); }},
      {"affine", [](In& in) { return AddScalar(MulScalar(in["x"], 3.0), 1.5); }},
      {"log", [](In& in) { return Unary(in, Log); }},
      {"sqrt", [](In& in) { return Unary(in, Sqrt); }},
      {"rsqrt", [](In& in) { return Unary(in, Rsqrt); }},
      {"pow_frac", [](In& in) { return Pow(in["x"], 2.5); }},
      {"where", [](In& in) { return Where(To(in["c"], DType::kBool), in["a"], in["b"]); }},
  };
}

std::map<std::string, OpFn> ReductionOps() {
  return {
      {"sum_dim",
       [](In& in) {
         return Sum(in["x"], {0, 2}, true);
       }},
      {"sum_all", [](In& in) { return Sum(in["x"]); }},
      {"mean_dim", [](In& in) { return Mean(in["x"], {-1}); }},
      {"var_dim", [](In& in) { return Var(in["x"], {1}); }},
      {"max_dim", [](In& in) { return Max(in["x"], 1).first; }},
      {"min_dim", [](In& in) { return Min(in["x"], 2, true).first; }},
      {"max_all", [](In& in) { return Max(in["x"]); }},
      {"argmax", [](In& in) { return Argmax(in["x"], 1); }},
  };
}

std::map<std::string, OpFn> NnOps() {
  return {
      {"matmul_2d", [](In& in) { return Matmul(in["input"], in["other"]); }},
      {"matmul_batched", [](In& in) { return Matmul(in["input"], in["other"]); }},
      {"matmul_vec", [](In& in) { return Matmul(in["input"], in["other"]); }},
      {"linear", [](In& in) { return Linear(in["input"], in["weight"], in["bias"]); }},
      {"softmax", [](In& in) { return Softmax(in["x"], -1); }},
      {"softmax_dim0", [](In& in) { return Softmax(in["x"], 0); }},
      {"log_softmax", [](In& in) { return LogSoftmax(in["x"], -1); }},
      {"cross_entropy", [](In& in) { return CrossEntropy(in["x"], in["t"]); }},
      {"cross_entropy_ignore_smooth",
       [](In& in) {
         return CrossEntropy(in["x"], in["t"], {-100, 0.1, "mean"});
       }},
      {"cross_entropy_sum",
       [](In& in) {
         return CrossEntropy(in["x"], in["t"], {-100, 0, "sum"});
       }},
      {"cross_entropy_none_3d",
       [](In& in) {
         return CrossEntropy(in["x"], in["t"], {-100, 0, "none"});
       }},
      {"mse_loss", [](In& in) { return MseLoss(in["input"], in["target"]); }},
      {"embedding", [](In& in) { return Embedding(in["w"], in["i"]); }},
      {"layer_norm", [](In& in) { return LayerNorm(in["x"], {6}, in["w"], in["b"]); }},
      {"batch_norm_train",
       [](In& in) { return BatchNorm(in["x"], Zeros({3}), Ones({3}), in["w"], in["b"], true); }},
      {"batch_norm_eval",
       [](In& in) { return BatchNorm(in["x"], in["m"], in["v"], in["w"], in["b"], false); }},
      {"conv2d", [](In& in) { return Conv2d(in["x"], in["w"], in["b"], 2, 1); }},
      {"conv2d_dilated_groups",
       [](In& in) { return Conv2d(in["x"], in["w"], Tensor(), 1, 2, 2, 2); }},
      {"max_pool2d", [](In& in) { return MaxPool2d(in["x"], 3, 2, 1); }},
      {"avg_pool2d", [](In& in) { return AvgPool2d(in["x"], 2, 2); }},
      {"avg_pool2d_pad", [](In& in) { return AvgPool2d(in["x"], 3, 2, 1); }},
      {"adaptive_avg_pool2d", [](In& in) { return AdaptiveAvgPool2d(in["x"], 3, 4); }},
      {"sdpa_causal",
       [](In& in) { return ScaledDotProductAttention(in["q"], in["k"], in["v"], true); }},
      {"cat",
       [](In& in) {
         return Cat({in["a"], in["b"]}, 1);
       }},
      {"stack",
       [](In& in) {
         return Stack({in["a"], in["b"]}, 1);
       }},
      {"split",
       [](In& in) {
         std::vector<Tensor> p = Split(in["x"], 2, 1);
         return Cat({p[2], p[1], p[0]}, 1);
       }},
      {"index_select", [](In& in) { return IndexSelect(in["x"], 1, in["i"]); }},
      {"gather", [](In& in) { return Gather(in["x"], 1, in["i"]); }},
      {"masked_fill", [](In& in) { return MaskedFill(in["x"], To(in["m"], DType::kBool), -2.0); }},
      {"one_hot", [](In& in) { return OneHot(in["i"], 5); }},
      {"mlp",
       [](In& in) {
         Tensor h = Gelu(Linear(in["x"], in["p0"], in["p1"]));
         return CrossEntropy(Linear(h, in["p2"], in["p3"]), in["t"]);
       }},
      {"transformer_block", TransformerBlock},
  };
}

const std::map<std::string, OpFn>& Ops() {
  static const auto* ops = [] {
    auto* all = new std::map<std::string, OpFn>(ElementwiseOps());
    for (const auto& table : {ReductionOps(), NnOps()}) all->insert(table.begin(), table.end());
    return all;
  }();
  return *ops;
}

class GoldenTest : public ::testing::TestWithParam<std::string> {};

std::vector<GoldenCase>& Cases() {
  static auto* cases =
      new std::vector<GoldenCase>(testing::ReadGolden(testing::GoldenPath("ops.txt")));
  return *cases;
}

TEST(GoldenFileTest, EveryCaseInTheFileHasAnOpAndEveryOpACase) {
  ASSERT_GT(Cases().size(), 60u) << "tests/golden/ops.txt missing or malformed";
  std::set<std::string> seen;
  for (const GoldenCase& c : Cases()) {
    EXPECT_TRUE(Ops().count(c.name)) << "no op for golden case " << c.name;
    seen.insert(c.name);
  }
  for (const auto& [name, fn] : Ops()) EXPECT_TRUE(seen.count(name)) << "no golden case " << name;
}

TEST(GoldenTest, ForwardAndGradientsMatchPyTorch) {
  constexpr double kTolerance = 1e-5;
  for (const GoldenCase& c : Cases()) {
    SCOPED_TRACE(c.name);
    auto op = Ops().find(c.name);
    if (op == Ops().end()) continue;
    In in;
    std::vector<std::string> leaves;
    for (const std::string& k : c.order) {
      if (k == "out" || k == "cot" || k.rfind("grad.", 0) == 0) continue;
      in[k] = c.at(k).detach();
      if (c.has("grad." + k)) {
        in[k].set_requires_grad(true);
        leaves.push_back(k);
      }
    }
    Tensor out = op->second(in);
    ASSERT_EQ(out.shape(), c.at("out").shape());
    EXPECT_LE(testing::RelativeError(out, c.at("out")), kTolerance) << "forward";
    if (leaves.empty()) continue;
    std::vector<Tensor> inputs;
    for (const auto& k : leaves) inputs.push_back(in[k]);
    auto grads = autograd::Grad({out}, inputs, {c.at("cot")});
    ASSERT_TRUE(grads.ok()) << grads.status();
    for (size_t i = 0; i < leaves.size(); ++i) {
      const Tensor& want = c.at("grad." + leaves[i]);
      ASSERT_EQ((*grads)[i].shape(), want.shape()) << leaves[i];
      EXPECT_LE(testing::RelativeError((*grads)[i], want), kTolerance) << "grad of " << leaves[i];
    }
  }
}

}  // namespace
}  // namespace trainyard::ops
