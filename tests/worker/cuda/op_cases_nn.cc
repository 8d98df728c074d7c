// The nn-level cases of op_cases.h: matmul, linear, conv2d, pooling, attention, optimizers,
// modules; and the tiny GPT training run.
#include <limits>
#include <memory>

#include "common/spec/model_graph.h"
#include "tests/worker/cuda/op_cases.h"
#include "worker/autograd/engine.h"
#include "worker/nn/gpt.h"
#include "worker/nn/graph.h"
#include "worker/nn/norm.h"
#include "worker/ops/activation.h"
#include "worker/ops/attention.h"
#include "worker/ops/conv.h"
#include "worker/ops/elementwise.h"
#include "worker/ops/linalg.h"
#include "worker/ops/loss.h"
#include "worker/ops/pool.h"
#include "worker/ops/reduction.h"
#include "worker/ops/views.h"
#include "worker/optim/adam.h"
#include "worker/optim/clip_grad.h"
#include "worker/optim/grad_scaler.h"
#include "worker/optim/sgd.h"
#include "worker/tensor/cuda_backend.h"

namespace trainyard::testing {
namespace internal {
namespace {

using ops::Transpose;

// out = f(inputs) for inputs of the given shapes in [-1, 1), then backward.
OpCase ForwardBackward(std::string name, bool gemm, std::vector<Shape> shapes,
                       std::function<Tensor(const std::vector<Tensor>&)> f) {
  return {std::move(name), true, gemm, [=](CaseBuilder& b) {
            std::vector<Tensor> in;
            for (const Shape& s : shapes) in.push_back(b.Input(s));
            Tensor out = f(in);
            b.Output("out", out);
            b.Backward(out);
            b.RecordGrads();
          }};
}

void AddMatmul(std::vector<OpCase>* v) {
  using In = const std::vector<Tensor>&;
  v->push_back(ForwardBackward("matmul_2d", true, {{7, 13}, {13, 33}},
                               [](In x) { return ops::Matmul(x[0], x[1]); }));
  v->push_back(ForwardBackward("matmul_batched", true, {{3, 7, 13}, {3, 13, 5}},
                               [](In x) { return ops::Matmul(x[0], x[1]); }));
  v->push_back(ForwardBackward("matmul_broadcast_batch", true, {{2, 1, 7, 13}, {3, 13, 5}},
                               [](In x) { return ops::Matmul(x[0], x[1]); }));
  v->push_back(ForwardBackward("matmul_transposed_views", true, {{13, 7}, {5, 13}}, [](In x) {
    return ops::Matmul(Transpose(x[0], 0, 1), Transpose(x[1], 0, 1));
  }));
  v->push_back(ForwardBackward("matmul_batched_transposed_by_2d", true, {{3, 13, 7}, {13, 5}},
                               [](In x) { return ops::Matmul(Transpose(x[0], 1, 2), x[1]); }));
  v->push_back(ForwardBackward("matmul_vector_matrix", true, {{13}, {13, 5}, {5, 13}}, [](In x) {
    return ops::Add(ops::Matmul(x[0], x[1]), ops::Matmul(x[2], x[0]));
  }));
  v->push_back(ForwardBackward("linear_with_bias", true, {{3, 7, 13}, {33, 13}, {33}},
                               [](In x) { return ops::Linear(x[0], x[1], x[2]); }));
  v->push_back(ForwardBackward("linear_without_bias", true, {{7, 13}, {5, 13}},
                               [](In x) { return ops::Linear(x[0], x[1]); }));
  v->push_back(
      ForwardBackward("linear_on_a_strided_input", true, {{7, 26}, {5, 13}, {5}},
                      [](In x) { return ops::Linear(ops::Slice(x[0], 1, 0, 26, 2), x[1], x[2]); }));
  // No input features: the output is the bias.
  v->push_back(ForwardBackward("linear_without_input_features", true, {{3, 0}, {5, 0}, {5}},
                               [](In x) { return ops::Linear(x[0], x[1], x[2]); }));
  // A wide head of a width off 16 bytes: on CUDA its output rows are padded (Note [Padded
  // rows]) and cross-entropy and the backward read them where they lie.
  v->push_back({"linear_wide_head_cross_entropy", true, false, [](CaseBuilder& b) {
                  Tensor x = b.Input({2, 3, 24}), w = b.Input({1029, 24}), bias = b.Input({1029});
                  Tensor logits = ops::Linear(x, w, bias);
                  Tensor target = b.Targets({6}, 1029, -100);
                  Tensor loss = ops::CrossEntropy(ops::Reshape(logits, {6, 1029}), target);
                  b.Output("logits", logits);
                  b.Output("loss", loss);
                  b.Backward(loss);
                  b.RecordGrads();
                }});
}

void AddConvPool(std::vector<OpCase>* v) {
  using In = const std::vector<Tensor>&;
  v->push_back(ForwardBackward("conv2d_groups_stride_padding_bias", true,
                               {{2, 6, 9, 11}, {4, 3, 3, 3}, {4}},
                               [](In x) { return ops::Conv2d(x[0], x[1], x[2], 2, 1, 1, 2); }));
  v->push_back(ForwardBackward(
      "conv2d_unbatched_dilation_no_bias", true, {{3, 13, 7}, {5, 3, 3, 2}}, [](In x) {
        return ops::Conv2d(x[0], x[1], Tensor(),
                           ops::Conv2dOptions().set_stride(1, 2).set_dilation(2));
      }));
  // Every geometry different along h and w, so that a swap of the two shows.
  v->push_back(ForwardBackward(
      "conv2d_rect_stride_padding_dilation", true, {{2, 4, 11, 9}, {6, 2, 3, 2}, {6}}, [](In x) {
        return ops::Conv2d(
            x[0], x[1], x[2],
            ops::Conv2dOptions().set_stride(2, 1).set_padding(1, 2).set_dilation(1, 3).set_groups(
                2));
      }));
  v->push_back(ForwardBackward("max_pool2d", false, {{2, 3, 9, 11}},
                               [](In x) { return ops::MaxPool2d(x[0], 3, 2, 1); }));
  v->push_back(ForwardBackward("max_pool2d_rect_dilated", false, {{2, 3, 9, 11}},
                               [](In x) { return ops::MaxPool2d(x[0], 2, 3, 1, 2, 0, 1, 2); }));
  for (bool include : {true, false}) {
    v->push_back(ForwardBackward(
        include ? "avg_pool2d_count_include_pad" : "avg_pool2d_exclude_pad", false, {{2, 3, 9, 11}},
        [include](In x) { return ops::AvgPool2d(x[0], 3, 2, 1, include); }));
  }
  v->push_back(ForwardBackward("adaptive_avg_pool2d", false, {{2, 3, 9, 11}},
                               [](In x) { return ops::AdaptiveAvgPool2d(x[0], 4, 5); }));
}

// A (l, s) uint8 mask where every query sees key 0 and some others.
Tensor AttentionMask(int64_t l, int64_t s, Device device) {
  std::vector<uint8_t> m(l * s);
  for (int64_t i = 0; i < l; ++i)
    for (int64_t j = 0; j < s; ++j) m[i * s + j] = j == 0 || (i * 7 + j * 3) % 4 != 0;
  Tensor host = FromVector(m, {l, s});
  return device.is_cpu() ? host : CopyToDevice(host, device);
}

void AddAttention(std::vector<OpCase>* v) {
  using In = const std::vector<Tensor>&;
  v->push_back(
      ForwardBackward("sdpa_fused", true, {{2, 3, 7, 16}, {2, 3, 9, 16}, {2, 3, 9, 16}},
                      [](In x) { return ops::ScaledDotProductAttention(x[0], x[1], x[2]); }));
  v->push_back(
      ForwardBackward("sdpa_fused_causal", true, {{2, 3, 13, 16}, {2, 3, 13, 16}, {2, 3, 13, 16}},
                      [](In x) { return ops::ScaledDotProductAttention(x[0], x[1], x[2], true); }));
  v->push_back(ForwardBackward("sdpa_fused_causal_transposed_heads", true,
                               {{2, 9, 3, 8}, {2, 9, 3, 8}, {2, 9, 3, 8}}, [](In x) {
                                 return ops::ScaledDotProductAttention(
                                     Transpose(x[0], 1, 2), Transpose(x[1], 1, 2),
                                     Transpose(x[2], 1, 2), true, Tensor(), 0.3);
                               }));
  // A model's heads: q, k and v read where they lie in one (B, T, 3 H E) projection, the output
  // and its gradient with the heads side by side (ops/attention.cc CudaOperand). Head size 64:
  // on CUDA the tensor-core kernels for bf16/f16, with rows of 3 H E elements; one more column
  // makes every row start off 16-byte alignment, which the scalar kernels take instead.
  for (int64_t pad : {0, 1}) {
    v->push_back(ForwardBackward(
        pad == 0 ? "sdpa_heads_of_qkv" : "sdpa_heads_of_qkv_unaligned", true, {{2, 70, 384 + pad}},
        [pad](In x) {
          const int64_t b = 2, t = 70, h = 2, e = 64, c = h * e;
          auto head = [&](int64_t i) {
            const Tensor m = ops::Narrow(x[0], 2, pad + i * c, c);
            return ops::Transpose(ops::View(m, {b, t, h, e}), 1, 2);  // (B, H, T, E)
          };
          const Tensor y = ops::ScaledDotProductAttention(head(0), head(1), head(2), true);
          return ops::Reshape(ops::Transpose(y, 1, 2), {b, t, c});
        }));
  }
  // Batch dims the kernels cannot address as one stride (copied), and none at all.
  v->push_back(ForwardBackward(
      "sdpa_fused_batch_dims_swapped", true, {{2, 3, 2, 7, 16}, {2, 3, 2, 9, 16}, {2, 3, 2, 9, 16}},
      [](In x) {
        auto swap = [](const Tensor& t) { return ops::Transpose(t, 0, 1); };
        return ops::ScaledDotProductAttention(swap(x[0]), swap(x[1]), swap(x[2]), true);
      }));
  v->push_back(
      ForwardBackward("sdpa_fused_one_matrix", true, {{11, 32}, {5, 32}, {5, 32}},
                      [](In x) { return ops::ScaledDotProductAttention(x[0], x[1], x[2]); }));
  // Head sizes 64 and 128 take the tensor-core kernels on CUDA for bf16/f16 (attention_tc.cu):
  // sizes that are not multiples of its 64-row tiles, causal with l != s.
  v->push_back(
      ForwardBackward("sdpa_fused_head64", true, {{1, 2, 70, 64}, {1, 2, 130, 64}, {1, 2, 130, 64}},
                      [](In x) { return ops::ScaledDotProductAttention(x[0], x[1], x[2]); }));
  v->push_back(ForwardBackward(
      "sdpa_fused_causal_head128", true, {{1, 2, 65, 128}, {1, 2, 65, 128}, {1, 2, 65, 128}},
      [](In x) { return ops::ScaledDotProductAttention(x[0], x[1], x[2], true); }));
  v->push_back(ForwardBackward(
      "sdpa_fused_causal_head64_rect", true, {{1, 1, 130, 64}, {1, 1, 70, 64}, {1, 1, 70, 64}},
      [](In x) { return ops::ScaledDotProductAttention(x[0], x[1], x[2], true); }));
  // Scale 4 spreads the scores so that a later key tile's maximum passes the running one by more
  // than the tensor-core forward's slack: the rows' in-loop rescale runs.
  v->push_back(ForwardBackward(
      "sdpa_fused_head64_spread_scores", true, {{1, 2, 70, 64}, {1, 2, 200, 64}, {1, 2, 200, 64}},
      [](In x) { return ops::ScaledDotProductAttention(x[0], x[1], x[2], false, Tensor(), 4.0); }));
  v->push_back(ForwardBackward(
      "sdpa_composed_large_head", true, {{1, 2, 5, 136}, {1, 2, 6, 136}, {1, 2, 6, 136}},
      [](In x) { return ops::ScaledDotProductAttention(x[0], x[1], x[2]); }));
  v->push_back({"sdpa_composed_bool_mask", true, true, [](CaseBuilder& b) {
                  Tensor q = b.Input({2, 5, 16}), k = b.Input({2, 9, 16}), vv = b.Input({2, 9, 8});
                  Tensor out = ops::ScaledDotProductAttention(q, k, vv, false,
                                                              AttentionMask(5, 9, b.device()));
                  b.Output("out", out);
                  b.Backward(out);
                  b.RecordGrads();
                }});
  v->push_back({"sdpa_composed_float_mask", true, true, [](CaseBuilder& b) {
                  Tensor q = b.Input({2, 5, 16}), k = b.Input({2, 9, 16}), vv = b.Input({2, 9, 16});
                  Tensor mask = b.Const({5, 9}, -2, 0);
                  Tensor out = ops::ScaledDotProductAttention(q, k, vv, false, mask);
                  b.Output("out", out);
                  b.Backward(out);
                  b.RecordGrads();
                }});
}

// Three steps of `opt` on loss = sum(p0^2 * c) + sum(exp(p1)); records the parameters.
void Train(CaseBuilder& b, optim::Optimizer& opt, const Tensor& p0, const Tensor& p1) {
  Tensor c = b.Const(p0.shape());
  for (int step = 0; step < 3; ++step) {
    opt.ZeroGrad();
    Tensor loss = ops::Add(ops::Sum(ops::Mul(ops::Mul(p0, p0), c)), ops::Sum(ops::Exp(p1)));
    const Status s = autograd::Backward(loss);
    TY_CHECK(s.ok()) << s.message();
    opt.Step();
  }
  b.Output("p0", p0);
  b.Output("p1", p1);
}

void AddOptim(std::vector<OpCase>* v) {
  v->push_back({"adam_three_steps", false, false, [](CaseBuilder& b) {
                  Tensor p0 = b.Input({7, 13}), p1 = b.Input({33});
                  optim::AdamOptions o;
                  o.lr = 0.05, o.weight_decay = 0.1;
                  auto opt = optim::Adam::Create({{"p0", p0}, {"p1", p1}}, o);
                  TY_CHECK(opt.ok());
                  Train(b, **opt, p0, p1);
                  b.Output("exp_avg_sq", (*opt)->state(0).buffers.at("exp_avg_sq"));
                }});
  v->push_back({"adamw_three_steps", false, false, [](CaseBuilder& b) {
                  Tensor p0 = b.Input({7, 13}), p1 = b.Input({33});
                  optim::AdamWOptions o;
                  o.lr = 0.05, o.weight_decay = 0.1;
                  auto opt = optim::AdamW::Create({{"p0", p0}, {"p1", p1}}, o);
                  TY_CHECK(opt.ok());
                  Train(b, **opt, p0, p1);
                  b.Output("exp_avg", (*opt)->state(1).buffers.at("exp_avg"));
                }});
  for (bool momentum : {true, false}) {
    v->push_back({momentum ? "sgd_nesterov_weight_decay" : "sgd_plain", false, false,
                  [momentum](CaseBuilder& b) {
                    Tensor p0 = b.Input({7, 13}), p1 = b.Input({33});
                    optim::SGDOptions o;
                    o.lr = 0.1;
                    if (momentum) o.momentum = 0.9, o.nesterov = true, o.weight_decay = 0.01;
                    auto opt = optim::SGD::Create({{"p0", p0}, {"p1", p1}}, o);
                    TY_CHECK(opt.ok());
                    Train(b, **opt, p0, p1);
                  }});
  }
  for (double norm : {2.0, std::numeric_limits<double>::infinity()}) {
    v->push_back({norm == 2 ? "clip_grad_norm_l2" : "clip_grad_norm_inf", false, false,
                  [norm](CaseBuilder& b) {
                    Tensor p0 = b.Input({7, 13}), p1 = b.Input({33});
                    b.Backward(ops::Add(ops::Sum(ops::Mul(p0, p0)), ops::Sum(ops::Exp(p1))));
                    b.Output("total_norm", optim::ClipGradNorm({p0, p1}, 0.5, norm));
                    b.RecordGrads();
                  }});
  }
  // The loss scaler's unscale and inf check (on CUDA one multi-tensor kernel for f32
  // gradients, Backend::UnscaleCheck); with overflow, p1's gradient is inf once scaled.
  for (bool overflow : {false, true}) {
    v->push_back({overflow ? "grad_scaler_overflow" : "grad_scaler_unscale", false, false,
                  [overflow](CaseBuilder& b) {
                    Tensor p0 = b.Input({7, 13}), p1 = b.Input({1000});
                    optim::GradScalerOptions o;
                    o.init_scale = 1024;
                    auto scaler = optim::GradScaler::Create(o);
                    TY_CHECK(scaler.ok());
                    Tensor loss = ops::Add(ops::Sum(ops::Mul(p0, p0)), ops::Sum(ops::Exp(p1)));
                    if (overflow) loss = ops::Add(loss, ops::MulScalar(ops::Sum(p1), 1e38));
                    const Status s = autograd::Backward((*scaler)->Scale(loss));
                    TY_CHECK(s.ok()) << s.message();
                    const bool found_inf = (*scaler)->UnscaleAndCheck({p0, p1});
                    b.Output("found_inf", Scalar(found_inf ? 1 : 0));
                    b.Output("grad_p0", p0.grad());
                    if (!overflow) b.Output("grad_p1", p1.grad());
                  }});
  }
  v->push_back({"batch_norm2d_module_training", false, false, [](CaseBuilder& b) {
                  nn::BatchNorm2d bn(7);
                  TY_CHECK(bn.To(b.device()).ok());
                  Tensor x = b.Input({5, 7, 3, 3}, -2, 2);
                  Tensor y = bn.Forward(x);
                  b.Backward(y);
                  b.Output("y", y);
                  for (const auto& [name, t] : bn.StateDict()) b.Output(name, t);
                  b.Output("weight_grad", bn.weight().grad());
                  b.RecordGrads();
                }});
}

}  // namespace

void AddNnCases(std::vector<OpCase>* cases) {
  AddMatmul(cases);
  AddConvPool(cases);
  AddAttention(cases);
  AddOptim(cases);
}

}  // namespace internal

std::string CompareTinyGptTraining(Device device, double dropout, int64_t vocab, double loss_rtol,
                                   double rtol) {
  const uint64_t seed = 4242;
  const CaseResult want = TrainTinyGpt(Device::Cpu(), dropout, 3, seed, vocab);
  const CaseResult got = TrainTinyGpt(device, dropout, 3, seed, vocab);
  if (got.size() != want.size()) return "the runs differ in what they return";
  const CaseResult got_losses(got.begin(), got.begin() + 3),
      want_losses(want.begin(), want.begin() + 3);
  std::string diff = CompareResults(got_losses, want_losses, loss_rtol);
  if (diff.empty()) diff = CompareResults(got, want, rtol);
  if (diff.empty() && !(got[2].second.item() < got[0].second.item()))
    diff = "the loss did not fall";
  return diff;
}

CaseResult TrainTinyGpt(Device device, double dropout, int steps, uint64_t seed, int64_t vocab) {
  Generator gen(seed);  // weights and dropout; outlives the model
  auto model = std::make_shared<nn::Gpt>(nn::GptConfig{vocab, 8, 2, 2, 16, dropout, true}, &gen);
  return TrainTinyModel(device, model, steps, seed, vocab);
}

// A tiny model.llama: rotary embeddings, grouped-query attention (2 query heads per key
// head), RMSNorm, a SwiGLU MLP and an untied head.
CaseResult TrainTinyLlama(Device device, int steps, uint64_t seed) {
  spec::LlamaSpec l;
  l.vocab_size = 11, l.context = 8, l.n_layer = 2, l.n_head = 4, l.n_kv_head = 2, l.n_embd = 16;
  l.intermediate_size = 24;
  StatusOr<spec::CompiledGraph> graph = spec::CompileGraph(spec::LlamaGraph(l, 0));
  TY_CHECK(graph.ok()) << graph.status().message();
  Generator gen(seed);
  auto model = std::make_shared<nn::GraphModel>(*graph, &gen);
  return TrainTinyModel(device, model, steps, seed, l.vocab_size);
}

std::string CompareTinyLlamaTraining(Device device, double loss_rtol, double rtol) {
  const CaseResult want = TrainTinyLlama(Device::Cpu(), 3, 4242);
  const CaseResult got = TrainTinyLlama(device, 3, 4242);
  if (got.size() != want.size()) return "the runs differ in what they return";
  std::string diff = CompareResults(CaseResult(got.begin(), got.begin() + 3),
                                    CaseResult(want.begin(), want.begin() + 3), loss_rtol);
  if (diff.empty()) diff = CompareResults(got, want, rtol);
  if (diff.empty() && !(got[2].second.item() < got[0].second.item()))
    diff = "the loss did not fall";
  return diff;
}

CaseResult TrainTinyModel(Device device, const std::shared_ptr<nn::Module>& model, int steps,
                          uint64_t seed, int64_t vocab) {
  const Status moved = model->To(device);
  TY_CHECK(moved.ok()) << moved.message();
  // eps 1e-4, not 1e-8: gradients that are zero up to rounding (the key bias's; softmax ignores
  // a shift shared by every key) would otherwise turn rounding noise into lr-sized steps.
  optim::AdamWOptions o;
  o.lr = 1e-2;
  o.eps = 1e-4;
  auto opt = optim::AdamW::Create(model->NamedParameters(), o);
  TY_CHECK(opt.ok()) << opt.status().message();
  Generator data(seed + 1);
  Tensor x = RandInt({3, 8}, 0, vocab, Options(DType::kInt64), &data);
  Tensor y = RandInt({3, 8}, 0, vocab, Options(DType::kInt64), &data);
  if (device.is_cuda()) x = CopyToDevice(x, device), y = CopyToDevice(y, device);
  CaseResult result;
  for (int step = 0; step < steps; ++step) {
    (*opt)->ZeroGrad();
    Tensor logits = model->Forward(x);
    Tensor loss = ops::CrossEntropy(ops::Reshape(logits, {-1, vocab}), ops::Reshape(y, {-1}));
    const Status s = autograd::Backward(loss);
    TY_CHECK(s.ok()) << s.message();
    (*opt)->Step();
    result.emplace_back("loss" + std::to_string(step), CopyToDevice(loss.detach(), Device::Cpu()));
  }
  for (const auto& [name, p] : model->NamedParameters())
    result.emplace_back(name, CopyToDevice(p.detach(), Device::Cpu()));
  return result;
}

std::string CompareGemmEpilogues(Device device) {
  std::string problems;
  const int64_t m = 29, k = 51;
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    for (int64_t n : {40, 37}) {
      for (int mode = 0; mode < 3; ++mode) {  // bias; bias + gelu; bias + gelu + saved input
        Generator gen(77 + n + mode);
        auto draw = [&](const Shape& shape) {
          return ConvertTo(Uniform(shape, -1, 1, Options(DType::kFloat32), &gen), dtype);
        };
        const Tensor a = draw({m, k}), b = draw({k, n}), bias = draw({n});
        const Tensor pre =
            ops::Add(ops::Matmul(ConvertTo(a, DType::kFloat32), ConvertTo(b, DType::kFloat32)),
                     ConvertTo(bias, DType::kFloat32));
        const Tensor da = CopyToDevice(a, device), db = CopyToDevice(b, device),
                     dbias = CopyToDevice(bias, device);
        const Tensor dc = Empty({m, n}, Options(dtype).set_device(device));
        const Tensor daux = Empty({m, n}, Options(dtype).set_device(device));
        cuda::GemmArgs g;
        g.in = g.out = ToScalarType(dtype);
        g.m = m, g.n = n, g.k = k;
        g.a = da.raw_data(), g.lda = k;
        g.b = db.raw_data(), g.ldb = n;
        g.c = dc.raw_data(), g.ldc = n;
        g.epilogue.bias = dbias.raw_data();
        g.epilogue.gelu = mode > 0;
        g.epilogue.gelu_input = mode == 2 ? daux.raw_data() : nullptr;
        CudaBackend().Gemm(g, ComputeStream(device));
        auto host = [](const Tensor& t) {
          return ConvertTo(CopyToDevice(t, Device::Cpu()), DType::kFloat32);
        };
        CaseResult got = {{"out", host(dc)}};
        CaseResult want = {{"out", mode == 0 ? pre : ops::Gelu(pre, "tanh")}};
        if (mode == 2) {
          got.push_back({"pre", host(daux)});
          want.push_back({"pre", pre});
        }
        // TF32 keeps 10 mantissa bits, bf16 storage 8.
        const std::string diff = CompareResults(got, want, dtype == DType::kFloat32 ? 2e-3 : 2e-2);
        if (!diff.empty()) {
          problems += std::string(DTypeName(dtype)) + " n " + std::to_string(n) + " mode " +
                      std::to_string(mode) + ": " + diff + "\n";
        }
      }
    }
  }
  return problems;
}

}  // namespace trainyard::testing
