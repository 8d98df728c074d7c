// The harness of op_cases.h and the tensor-level cases: elementwise, comparisons, reductions,
// softmax, cross-entropy, normalisation, indexing, views, dropout, random fills.
#include "tests/worker/cuda/op_cases.h"

#include <cmath>
#include <sstream>

#include "worker/autograd/engine.h"
#include "worker/ops/activation.h"
#include "worker/ops/dropout.h"
#include "worker/ops/elementwise.h"
#include "worker/ops/indexing.h"
#include "worker/ops/loss.h"
#include "worker/ops/norm.h"
#include "worker/ops/reduction.h"
#include "worker/ops/softmax.h"
#include "worker/ops/views.h"

namespace trainyard::testing {

// ---- CaseBuilder ----

CaseBuilder::CaseBuilder(Device device, DType dtype, uint64_t seed)
    : device_(device),
      dtype_(dtype),
      floating_(device.is_cuda() ? dtype : DType::kFloat32),
      gen_(seed) {}

Tensor CaseBuilder::Round(const Tensor& t) const {
  if (device_.is_cuda() || dtype_ == DType::kFloat32) return t;
  return ConvertTo(ConvertTo(t, dtype_), DType::kFloat32);
}

Tensor CaseBuilder::Const(const Shape& shape, double lo, double hi) {
  Tensor t = Uniform(shape, lo, hi, Options(DType::kFloat32), &gen_);
  if (device_.is_cpu()) return Round(t);
  return CopyToDevice(ConvertTo(t, dtype_), device_);
}

Tensor CaseBuilder::Input(const Shape& shape, double lo, double hi) {
  Tensor t = Const(shape, lo, hi);
  t.set_requires_grad(true);
  inputs_.push_back(t);
  return t;
}

Tensor CaseBuilder::Index(const Shape& shape, int64_t lo, int64_t hi) {
  Tensor t = RandInt(shape, lo, hi, Options(DType::kInt64), &gen_);
  return device_.is_cpu() ? t : CopyToDevice(t, device_);
}

Tensor CaseBuilder::Targets(const Shape& shape, int64_t classes, int64_t ignore) {
  std::vector<int64_t> t =
      ToVector<int64_t>(RandInt(shape, 0, classes, Options(DType::kInt64), &gen_));
  std::vector<float> u = ToVector<float>(Uniform(shape, 0, 1, Options(DType::kFloat32), &gen_));
  for (size_t i = 0; i < t.size(); ++i)
    if (u[i] < 0.2) t[i] = ignore;
  Tensor host = FromVector(t, shape);
  return device_.is_cpu() ? host : CopyToDevice(host, device_);
}

Tensor CaseBuilder::Mask(const Shape& shape, double p_true) {
  Tensor u = Uniform(shape, 0, 1, Options(DType::kFloat32), &gen_);
  Tensor m = ops::Lt(u, Scalar(p_true));
  return device_.is_cpu() ? m : CopyToDevice(m, device_);
}

void CaseBuilder::Backward(const Tensor& out) {
  Tensor v = ConvertTo(Const(out.shape()), out.dtype());
  const Status s = autograd::Backward(out, v);
  TY_CHECK(s.ok()) << s.message();
}

namespace {
Tensor ToHost(const Tensor& t) {
  if (!t.defined()) return t;
  Tensor h = CopyToDevice(t.detach(), Device::Cpu());
  return IsFloating(h.dtype()) ? ConvertTo(h, DType::kFloat32) : h;
}
}  // namespace

void CaseBuilder::Output(const std::string& name, const Tensor& t) {
  result_.emplace_back(name, ToHost(t));
}

void CaseBuilder::RecordGrads() {
  for (size_t i = 0; i < inputs_.size(); ++i) Output("grad" + std::to_string(i), inputs_[i].grad());
}

// ---- Running and comparing ----

CaseResult RunCase(const OpCase& c, Device device, DType dtype, uint64_t seed) {
  CaseBuilder b(device, dtype, seed);
  c.run(b);
  return b.Take();
}

const std::vector<OpCase>& OpCases() {
  static const std::vector<OpCase>* cases = [] {
    auto* v = new std::vector<OpCase>();
    internal::AddTensorCases(v);
    internal::AddNnCases(v);
    return v;
  }();
  return *cases;
}

const OpCase& FindCase(const std::string& name) {
  for (const OpCase& c : OpCases())
    if (c.name == name) return c;
  TY_CHECK(false) << "no op case " << name;
  return OpCases()[0];
}

std::vector<OpParam> AllOpParams(uint64_t first_seed) {
  std::vector<OpParam> params;
  uint64_t seed = first_seed;
  for (const OpCase& c : OpCases()) {
    params.push_back({c.name, DType::kFloat32, c.gemm, seed});
    if (c.half) {
      params.push_back({c.name, DType::kBFloat16, c.gemm, seed});
      params.push_back({c.name, DType::kFloat16, c.gemm, seed});
    }
    ++seed;
  }
  return params;
}

void PrintTo(const OpParam& p, std::ostream* os) {
  *os << p.name << " in " << DTypeName(p.dtype) << ", seed " << p.seed;
}

std::string OpParamName(const OpParam& p) { return p.name + "_" + DTypeName(p.dtype); }

namespace {
std::string CompareOne(const std::string& name, const Tensor& got, const Tensor& want,
                       double rtol) {
  std::ostringstream os;
  os << name << ": ";
  if (got.defined() != want.defined()) {
    os << (got.defined() ? "defined" : "undefined") << " but expected "
       << (want.defined() ? "defined" : "undefined");
    return os.str();
  }
  if (!got.defined()) return "";
  if (got.shape() != want.shape() || got.dtype() != want.dtype()) {
    os << got.shape() << " " << DTypeName(got.dtype()) << " but expected " << want.shape() << " "
       << DTypeName(want.dtype());
    return os.str();
  }
  const std::vector<double> g = ToVector<double>(got), w = ToVector<double>(want);
  const bool exact = !IsFloating(want.dtype());
  double scale = 0, worst = 0;
  for (double x : w) scale = std::isfinite(x) ? std::max(scale, std::fabs(x)) : scale;
  int64_t first_bad = -1;
  for (size_t i = 0; i < g.size(); ++i) {
    if (g[i] == w[i] || (std::isnan(g[i]) && std::isnan(w[i]))) continue;
    const double allowed = exact ? 0 : rtol * (std::fabs(w[i]) + scale);
    const double err = std::fabs(g[i] - w[i]);
    const double ratio = allowed > 0 ? err / allowed : INFINITY;
    worst = std::max(worst, std::isnan(ratio) ? INFINITY : ratio);
    if (!(err <= allowed) && first_bad < 0) first_bad = static_cast<int64_t>(i);
  }
  if (first_bad < 0) return "";
  os << "element " << first_bad << " is " << g[first_bad] << ", expected " << w[first_bad]
     << " (rtol " << rtol << ", max |expected| " << scale << "; worst error " << worst
     << " times the allowed)";
  return os.str();
}
}  // namespace

std::string CompareResults(const CaseResult& got, const CaseResult& want, double rtol) {
  if (got.size() != want.size())
    return std::to_string(got.size()) + " results, expected " + std::to_string(want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i].first != want[i].first)
      return "result " + got[i].first + ", expected " + want[i].first;
    std::string m = CompareOne(got[i].first, got[i].second, want[i].second, rtol);
    if (!m.empty()) return m;
  }
  return "";
}

// ---- Cases ----

namespace internal {
namespace {

using ops::Transpose;
using BinaryFn = Tensor (*)(const Tensor&, const Tensor&);

// out = f(a, b) for inputs a: sa in [-1, 1) and b: sb in [lo, hi), then backward.
OpCase BinaryCase(std::string name, Shape sa, Shape sb, double lo, double hi,
                  std::function<Tensor(const Tensor&, const Tensor&)> f, double a_lo = -1) {
  return {std::move(name), true, false, [=](CaseBuilder& b) {
            Tensor x = b.Input(sa, a_lo, 1), y = b.Input(sb, lo, hi);
            Tensor out = f(x, y);
            b.Output("out", out);
            b.Backward(out);
            b.RecordGrads();
          }};
}

// out = f(x) for x: `shape` in [lo, hi), then backward.
OpCase UnaryCase(std::string name, double lo, double hi, std::function<Tensor(const Tensor&)> f,
                 Shape shape = {7, 33}) {
  return {std::move(name), true, false, [=](CaseBuilder& b) {
            Tensor x = b.Input(shape, lo, hi);
            Tensor out = f(x);
            b.Output("out", out);
            b.Backward(out);
            b.RecordGrads();
          }};
}

// out = f(x) for x: (5, 7, 9), then backward.
OpCase ReduceCase(std::string name, std::function<Tensor(const Tensor&)> f) {
  return UnaryCase(std::move(name), -1, 1, std::move(f), {5, 7, 9});
}

void AddElementwise(std::vector<OpCase>* v) {
  v->push_back(BinaryCase("add_broadcast", {7, 13}, {13}, -1, 1,
                          [](auto& a, auto& b) { return ops::Add(a, b, 2); }));
  // On CUDA in bf16/f16: an f32 operand next to a 16-bit one, read as they are
  // (device::BinaryMixed), either side, broadcasting; the gradients go back in each input's type.
  // Same shapes (as a residual add) take the vectorised flat kernel, with a tail.
  for (const Shape& sb : {Shape{67}, Shape{9, 67}}) {
    v->push_back(BinaryCase(sb.size() == 1 ? "add_f32_and_16_bit_broadcast" : "add_f32_and_16_bit",
                            {9, 67}, sb, -1, 1, [](auto& a, auto& b) {
                              const Tensor b32 = ops::To(b, DType::kFloat32);
                              return ops::Add(ops::Add(a, b32), ops::Add(b32, a, -0.75));
                            }));
  }
  v->push_back(BinaryCase("sub_broadcast_both", {3, 1, 13}, {7, 1}, -1, 1,
                          [](auto& a, auto& b) { return ops::Sub(a, b, 0.5); }));
  v->push_back(BinaryCase("mul_broadcast", {5, 7, 3}, {7, 1}, -1, 1, ops::Mul));
  v->push_back(BinaryCase("div_broadcast", {33, 7}, {7}, 0.5, 2, ops::Div));
  v->push_back(BinaryCase("pow_tensor", {7, 13}, {13}, -1.5, 1.5, BinaryFn(ops::Pow), 0.5));
  v->push_back(BinaryCase("maximum_minimum", {7, 13}, {7, 13}, -1, 1, [](auto& a, auto& b) {
    return ops::Add(ops::Maximum(a, b), ops::Minimum(a, ops::MulScalar(b, 0.5)));
  }));
  v->push_back(BinaryCase(
      "scalar_ops_and_transposed_operand", {13, 7}, {7, 13}, -1, 1, [](auto& a, auto& b) {
        return ops::MulScalar(ops::AddScalar(ops::Mul(Transpose(a, 0, 1), b), 0.5), -3);
      }));
  const std::vector<std::pair<const char*, Tensor (*)(const Tensor&)>> unary = {
      {"exp", ops::Exp},   {"tanh", ops::Tanh}, {"sigmoid", ops::Sigmoid}, {"relu", ops::Relu},
      {"silu", ops::Silu}, {"abs", ops::Abs},   {"neg", ops::Neg}};
  for (const auto& [name, f] : unary) v->push_back(UnaryCase(name, -2, 2, f));
  v->push_back(UnaryCase("log", 0.1, 3, ops::Log));
  v->push_back(UnaryCase("sqrt", 0.1, 3, ops::Sqrt));
  v->push_back(UnaryCase("rsqrt", 0.1, 3, ops::Rsqrt));
  v->push_back(UnaryCase("gelu_erf", -3, 3, [](auto& x) { return ops::Gelu(x); }));
  v->push_back(UnaryCase("gelu_tanh", -3, 3, [](auto& x) { return ops::Gelu(x, "tanh"); }));
  v->push_back(UnaryCase("clamp", -1, 1, [](auto& x) { return ops::Clamp(x, -0.5, 0.4); }));
  v->push_back(UnaryCase("pow_scalar", 0.1, 2, [](auto& x) { return ops::Pow(x, 2.5); }));
  v->push_back(UnaryCase("unary_on_strided_views", -1, 1, [](auto& x) {
    Tensor s = ops::Slice(Transpose(x, 0, 1), 0, 1, 33, 3);  // (11, 7), strided both ways
    return ops::Add(ops::Exp(s), ops::Sqrt(ops::AddScalar(s, 2)));
  }));
  v->push_back({"in_place_ops", true, false, [](CaseBuilder& b) {
                  Tensor c = b.Const({7, 13}), d = b.Const({13}), e = b.Const({7, 13});
                  ops::AddInPlace(c, d, 0.5);
                  ops::MulInPlace(c, e);
                  ops::MulScalarInPlace(c, 3);
                  ops::AddScalarInPlace(c, -1);
                  ops::ZeroInPlace(ops::Slice(c, 1, 2, 13, 4));
                  ops::CopyInPlace(ops::Slice(c, 0, 0, 7, 3), ops::Slice(e, 0, 1, 4));
                  b.Output("c", c);
                }});
  v->push_back(BinaryCase("compare_and_where", {7, 13}, {13}, -1, 1, [](auto& a, auto& b) {
    Tensor c = ops::Gt(a, b);
    return ops::Where(c, a, ops::MulScalar(b, 2));
  }));
  v->push_back({"comparisons", true, false, [](CaseBuilder& b) {
                  Tensor x = b.Const({7, 13}), y = b.Const({13});
                  b.Output("eq", ops::Eq(x, ops::Maximum(x, y)));
                  b.Output("ne", ops::Ne(x, y));
                  b.Output("lt", ops::Lt(x, y));
                  b.Output("le", ops::Le(Transpose(x, 0, 1), ops::Reshape(y, {13, 1})));
                  b.Output("ge", ops::Ge(x, y));
                  b.Output("gt_scalar", ops::GtScalar(x, 0.25));
                  b.Output("masked_fill", ops::MaskedFill(x, ops::Lt(x, y), -7));
                }});
}

void AddReductions(std::vector<OpCase>* v) {
  v->push_back(ReduceCase("sum_over_dims_0_2", [](auto& x) { return ops::Sum(x, {0, 2}); }));
  v->push_back(ReduceCase("sum_all", [](auto& x) { return ops::Sum(x); }));
  v->push_back(ReduceCase("mean_last_keepdim", [](auto& x) { return ops::Mean(x, {-1}, true); }));
  v->push_back(ReduceCase("mean_all", [](auto& x) { return ops::Mean(x); }));
  v->push_back(ReduceCase("var_dim_1", [](auto& x) { return ops::Var(x, {1}); }));
  v->push_back(ReduceCase("var_dims_0_2_biased_keepdim", [](auto& x) {
    return ops::Var(x, {0, 2}, 0, true);
  }));
  // Long reductions split over blocks on CUDA and combine their partials in a second kernel
  // (kernels/cuda/reduce.cu LaunchReduce): along columns, over all, and with ties to break.
  v->push_back(
      UnaryCase("sum_long_columns", -1, 1, [](auto& x) { return ops::Sum(x, {0}); }, {300, 5}));
  v->push_back(UnaryCase("sum_all_long", -1, 1, [](auto& x) { return ops::Sum(x); }, {9000}));
  v->push_back({"max_min_long_rows", true, false, [](CaseBuilder& b) {
                  Tensor x = b.Input({2, 9000});
                  auto [values, indices] = ops::Max(x, 1);
                  auto [mins, where] = ops::Min(x, 1);
                  b.Output("values", values);
                  b.Output("indices", indices);
                  b.Output("min_indices", where);
                  b.Backward(ops::Add(ops::Sum(values), ops::Sum(mins)));
                  b.RecordGrads();
                }});
  v->push_back(ReduceCase("max_all", [](auto& x) { return ops::Max(x); }));
  v->push_back(ReduceCase("min_all", [](auto& x) { return ops::Min(x); }));
  v->push_back({"max_min_over_a_dim", true, false, [](CaseBuilder& b) {
                  Tensor x = b.Input({5, 7, 9});
                  auto [values, indices] = ops::Max(x, 1);
                  auto [mins, where] = ops::Min(x, -1, true);
                  b.Output("values", values);
                  b.Output("indices", indices);
                  b.Output("min_indices", where);
                  b.Output("argmax", ops::Argmax(x, 2));
                  b.Output("argmax_all", ops::Argmax(x));
                  b.Backward(ops::Add(ops::Sum(values), ops::Sum(mins)));
                  b.RecordGrads();
                }});
}

void AddSoftmaxLoss(std::vector<OpCase>* v) {
  v->push_back({"softmax_middle_dim", true, false, [](CaseBuilder& b) {
                  Tensor x = b.Input({5, 33, 7}, -3, 3);
                  Tensor out = ops::Softmax(x, 1);
                  b.Output("out", out);
                  b.Backward(out);
                  b.RecordGrads();
                }});
  v->push_back(UnaryCase("log_softmax_last_dim", -3, 3,
                         [](auto& x) { return ops::LogSoftmax(x, -1); }, {7, 129}));
  // Rows past 1024 take a block each on CUDA (256 threads, and 512 past 8192).
  v->push_back(UnaryCase("softmax_wide_rows", -3, 3, [](auto& x) { return ops::Softmax(x, -1); },
                         {3, 1500}));
  v->push_back(UnaryCase("log_softmax_very_wide_rows", -3, 3,
                         [](auto& x) { return ops::LogSoftmax(x, -1); }, {2, 9000}));
  v->push_back({"cross_entropy_ignore_index_and_smoothing", true, false, [](CaseBuilder& b) {
                  Tensor logits = b.Input({13, 7}, -3, 3);
                  Tensor target = b.Targets({13}, 7, -100);
                  ops::CrossEntropyOptions o;
                  o.label_smoothing = 0.1;
                  Tensor loss = ops::CrossEntropy(logits, target, o);
                  b.Output("loss", loss);
                  b.Backward(loss);
                  b.RecordGrads();
                }});
  v->push_back({"cross_entropy_spatial_sum", true, false, [](CaseBuilder& b) {
                  Tensor logits = b.Input({3, 7, 5}, -3, 3);
                  Tensor target = b.Index({3, 5}, 0, 7);
                  ops::CrossEntropyOptions o;
                  o.reduction = "sum";
                  Tensor loss = ops::CrossEntropy(logits, target, o);
                  b.Output("loss", loss);
                  b.Backward(loss);
                  b.RecordGrads();
                }});
  v->push_back({"cross_entropy_per_row", true, false, [](CaseBuilder& b) {
                  Tensor logits = b.Input({9, 33}, -3, 3);
                  Tensor target = b.Targets({9}, 33, 3);
                  ops::CrossEntropyOptions o;
                  o.reduction = "none";
                  o.ignore_index = 3;
                  o.label_smoothing = 0.25;
                  Tensor loss = ops::CrossEntropy(logits, target, o);
                  b.Output("loss", loss);
                  b.Backward(loss);
                  b.RecordGrads();
                }});
}

void AddLayerNorm(std::vector<OpCase>* v) {
  v->push_back({"layer_norm_affine", true, false, [](CaseBuilder& b) {
                  Tensor x = b.Input({7, 13, 33}, -2, 2);
                  Tensor w = b.Input({33}, 0.5, 1.5), bias = b.Input({33});
                  Tensor y = ops::LayerNorm(x, {33}, w, bias);
                  b.Output("y", y);
                  b.Backward(y);
                  b.RecordGrads();
                }});
  v->push_back({"layer_norm_wide_rows", true, false, [](CaseBuilder& b) {
                  Tensor x = b.Input({3, 1100}, -2, 2);
                  Tensor w = b.Input({1100}, 0.5, 1.5), bias = b.Input({1100});
                  Tensor y = ops::LayerNorm(x, {1100}, w, bias);
                  b.Output("y", y);
                  b.Backward(y);
                  b.RecordGrads();
                }});
  v->push_back({"layer_norm_two_dims_no_affine", true, false, [](CaseBuilder& b) {
                  Tensor x = b.Input({5, 13, 7}, -2, 2);
                  Tensor y = ops::LayerNorm(ops::Transpose(x, 1, 2), {7, 13});
                  b.Output("y", y);
                  b.Backward(y);
                  b.RecordGrads();
                }});
}

void AddBatchNorm(std::vector<OpCase>* v) {
  // On a GPU, training batch norm runs cuDNN for inputs with more than one value per channel
  // and sample and a weight, and our kernels otherwise (kernels/cuda/dnn.cc Note [cuDNN batch
  // norm]); a backward without x's gradient takes our kernels after cuDNN's forward. These cases
  // take every path: cuDNN with a zero bias, without running stats, with strided running stats,
  // with no parameter gradient wanted; ours for no affine and for 2-d input; the mixed one.
  enum : int {
    kWeight = 1,
    kBias = 2,
    kRunning = 4,
    kStrided = 8,
    kFrozenX = 16,
    kFrozenParams = 32
  };
  struct BnCase {
    const char* name;
    Shape x;
    int flags;
  };
  for (const BnCase& k :
       {BnCase{"batch_norm_training_weight_only", {6, 5, 11}, kWeight | kRunning},
        BnCase{"batch_norm_training_no_running_stats", {9, 3, 4, 5}, kWeight | kBias},
        BnCase{"batch_norm_training_strided_running",
               {7, 5, 6},
               kWeight | kBias | kRunning | kStrided},
        BnCase{"batch_norm_training_frozen_params", {5, 4, 9}, kWeight | kBias | kFrozenParams},
        BnCase{"batch_norm_training_frozen_input", {5, 4, 9}, kWeight | kBias | kFrozenX},
        BnCase{"batch_norm_training_no_affine", {4, 6, 7}, kRunning},
        BnCase{"batch_norm_training_2d", {33, 13}, kWeight | kBias | kRunning}}) {
    v->push_back({k.name, false, false, [k](CaseBuilder& b) {
                    const int64_t c = k.x[1];
                    auto param = [&](bool wanted, double lo, double hi) {
                      if (!wanted) return Tensor();
                      return (k.flags & kFrozenParams) ? b.Const({c}, lo, hi)
                                                       : b.Input({c}, lo, hi);
                    };
                    Tensor x = (k.flags & kFrozenX) ? b.Const(k.x, -3, 1) : b.Input(k.x, -3, 1);
                    Tensor w = param(k.flags & kWeight, 0.5, 1.5);
                    Tensor bias = param(k.flags & kBias, -1, 1);
                    Tensor mean, var;
                    if (k.flags & kRunning) {
                      // Strided: every other element of a (2c) buffer.
                      const bool strided = k.flags & kStrided;
                      Tensor stats = b.Const({strided ? 2 * c : c}, 0.5, 2);
                      Tensor vars = b.Const({strided ? 2 * c : c}, 0.5, 2);
                      mean = strided ? ops::Slice(stats, 0, 0, 2 * c, 2) : stats;
                      var = strided ? ops::Slice(vars, 0, 1, 2 * c, 2) : vars;
                    }
                    Tensor y = ops::BatchNorm(x, mean, var, w, bias, true, 0.3, 1e-3);
                    b.Output("y", y);
                    if (mean.defined())
                      b.Output("running_mean", mean), b.Output("running_var", var);
                    b.Backward(y);
                    b.RecordGrads();
                  }});
  }
  for (bool training : {true, false}) {
    v->push_back({training ? "batch_norm_training" : "batch_norm_eval", false, false,
                  [training](CaseBuilder& b) {
                    Tensor x = b.Input({5, 7, 3, 3}, -2, 2);
                    Tensor w = b.Input({7}, 0.5, 1.5), bias = b.Input({7});
                    Tensor mean = b.Const({7}), var = b.Const({7}, 0.5, 2);
                    Tensor y = ops::BatchNorm(x, mean, var, w, bias, training, 0.1, 1e-5);
                    b.Output("y", y);
                    b.Output("running_mean", mean);
                    b.Output("running_var", var);
                    b.Backward(y);
                    b.RecordGrads();
                  }});
  }
}

void AddIndexing(std::vector<OpCase>* v) {
  v->push_back({"embedding_with_repeats", true, false, [](CaseBuilder& b) {
                  Tensor w = b.Input({13, 7});
                  Tensor out = ops::Embedding(w, b.Index({5, 3}, 0, 13));
                  b.Output("out", out);
                  b.Backward(out);
                  b.RecordGrads();
                }});
  // Each of two rows gathered ~1000 times, every gradient the same: a 16-bit running sum of
  // them would stall (bf16's spacing above 256 is 2), so the sum must be kept in f32.
  v->push_back({"embedding_rows_gathered_a_thousand_times", true, false, [](CaseBuilder& b) {
                  Tensor w = b.Input({2, 3});
                  Tensor out = ops::Embedding(w, b.Index({2048}, 0, 2));
                  b.Output("out", out);
                  b.Backward(ops::Sum(out));
                  b.RecordGrads();
                }});
  v->push_back({"index_select_middle_dim", true, false, [](CaseBuilder& b) {
                  Tensor x = b.Input({7, 13, 5});
                  Tensor out = ops::IndexSelect(x, 1, b.Index({9}, 0, 13));
                  b.Output("out", out);
                  b.Backward(out);
                  b.RecordGrads();
                }});
  v->push_back({"gather_and_scatter_add", true, false, [](CaseBuilder& b) {
                  Tensor x = b.Input({7, 13}), self = b.Input({7, 13}), src = b.Input({7, 5});
                  Tensor idx = b.Index({7, 5}, 0, 13);
                  Tensor g = ops::Gather(x, 1, idx);
                  Tensor s = ops::ScatterAdd(self, 1, idx, src);
                  b.Output("gather", g);
                  b.Output("scatter_add", s);
                  b.Backward(ops::Add(ops::Sum(ops::Mul(g, g)), ops::Sum(ops::Mul(s, s))));
                  b.RecordGrads();
                }});
  v->push_back(
      {"cat_split_stack_views", true, false, [](CaseBuilder& b) {
         Tensor x = b.Input({3, 7}), y = b.Input({5, 7}), z = b.Input({1, 7, 5});
         std::vector<Tensor> parts = ops::Split(ops::Cat({x, y}, 0), 3, 0);
         Tensor c = ops::Cat({ops::MulScalar(parts[2], 3), parts[0], ops::Exp(parts[1])}, 0);
         Tensor e = ops::Contiguous(ops::Permute(ops::Expand(z, {8, 7, 5}), {2, 0, 1}));
         Tensor out = ops::Mul(ops::Stack({c, c}, 0), ops::Select(e, 0, 4));
         b.Output("out", out);
         b.Backward(out);
         b.RecordGrads();
       }});
  v->push_back({"gradients_accumulate_over_two_backwards", true, false, [](CaseBuilder& b) {
                  Tensor x = b.Input({7, 13});
                  b.Backward(ops::Mul(x, x));
                  b.Backward(ops::Exp(x));
                  b.RecordGrads();
                }});
}

void AddRandom(std::vector<OpCase>* v) {
  v->push_back({"dropout_same_seed_same_mask", true, false, [](CaseBuilder& b) {
                  Tensor x = b.Input({33, 13});
                  Generator g(b.gen()->seed() + 1);
                  Tensor out = ops::Dropout(x, 0.3, /*training=*/true, &g);
                  b.Output("out", out);
                  b.Backward(out);
                  b.RecordGrads();
                }});
  v->push_back({"random_fills_and_factories", true, false, [](CaseBuilder& b) {
                  Generator g(b.gen()->seed() + 2);
                  b.Output("uniform", b.Round(Uniform({33, 7}, -1, 2, b.options(), &g)));
                  b.Output("normal", b.Round(Normal({129}, 0.5, 2, b.options(), &g)));
                  b.Output("rand", b.Round(Rand({5}, b.options(), &g)));
                  b.Output("full", Full({7, 3}, 2.5, b.options()));
                  b.Output("arange", Arange(1, 13, 2, b.options()));
                  b.Output("ones_int", Ones({5}, Options(DType::kInt64).set_device(b.device())));
                  Tensor u = Empty({9, 4}, b.options());
                  UniformInPlace(ops::Transpose(u, 0, 1), 0, 1, &g);  // strided target
                  b.Output("uniform_strided", b.Round(u));
                }});
}

}  // namespace

void AddTensorCases(std::vector<OpCase>* cases) {
  AddElementwise(cases);
  AddReductions(cases);
  AddSoftmaxLoss(cases);
  AddLayerNorm(cases);
  AddBatchNorm(cases);
  AddIndexing(cases);
  AddRandom(cases);
}

}  // namespace internal
}  // namespace trainyard::testing
