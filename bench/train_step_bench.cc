// One training step of a zoo model, timed: forward, cross-entropy, backward, optimizer step,
// zero_grad (set_to_none), on data fixed in memory once. bench/torch_train_step.py does the
// same in PyTorch and scripts/bench-train.sh prints the two side by side.
//
//   train_step_bench --model mlp|cnn|gpt [--threads N] [--steps S] [--warmup W] [--windows K]
//
// The S timed steps are split into K windows; each window gives a throughput and the line
// reports the median over windows ("throughput") and the best ("best"). Peak RSS is the
// process's (getrusage ru_maxrss), so run one model per process. Prints one JSON line.
//
// Models: mlp 784-1024-1024-10 at batch 128 (SGD, momentum 0.9, lr 0.01); the zoo cnn with its
// default config at batch 64 (same SGD); gpt with 4 layers, width 256, 4 heads, context 128,
// vocabulary 65, dropout 0, bias, at batch 16 (AdamW, lr 3e-4, weight decay 0.1).
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "worker/autograd/engine.h"
#include "worker/nn/zoo.h"
#include "worker/ops/loss.h"
#include "worker/ops/views.h"
#include "worker/optim/adam.h"
#include "worker/optim/sgd.h"
#include "worker/tensor/allocator.h"
#include "worker/tensor/factories.h"

namespace ty = trainyard;

namespace {

struct Flags {
  std::string model = "mlp";
  int threads = 1;
  int steps = 50;
  int warmup = 5;
  int windows = 5;
};

[[noreturn]] void Usage(const char* why) {
  std::fprintf(stderr,
               "train_step_bench: %s\nusage: train_step_bench --model mlp|cnn|gpt [--threads N] "
               "[--steps S] [--warmup W] [--windows K]\n",
               why);
  std::exit(2);
}

int IntFlag(const char* flag, const char* value, long min) {
  char* end = nullptr;
  long v = std::strtol(value, &end, 10);
  if (end == value || *end != '\0' || v < min || v > 1000000) {
    Usage((std::string(flag) + " is \"" + value +
           "\"; it must be a whole number >= " + std::to_string(min))
              .c_str());
  }
  return static_cast<int>(v);
}

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) Usage((a + " needs a value").c_str());
    const char* v = argv[++i];
    if (a == "--model") {
      f.model = v;
    } else if (a == "--threads") {
      f.threads = IntFlag("--threads", v, 1);
    } else if (a == "--steps") {
      f.steps = IntFlag("--steps", v, 1);
    } else if (a == "--warmup") {
      f.warmup = IntFlag("--warmup", v, 0);
    } else if (a == "--windows") {
      f.windows = IntFlag("--windows", v, 1);
    } else {
      Usage(("unknown flag " + a).c_str());
    }
  }
  if (f.model != "mlp" && f.model != "cnn" && f.model != "gpt") {
    Usage(("--model is \"" + f.model + "\"; it must be mlp, cnn or gpt").c_str());
  }
  f.windows = std::min(f.windows, f.steps);
  return f;
}

// A model with its fixed batch and optimizer, ready to step.
struct Setup {
  std::shared_ptr<ty::nn::Module> model;
  std::unique_ptr<ty::optim::Optimizer> optimizer;
  ty::Tensor input, target;
  int64_t batch = 0;
  int64_t items_per_step = 0;  // samples, or tokens for gpt
  const char* units = "samples";
};

template <typename T>
T Must(ty::StatusOr<T> v) {
  if (!v.ok()) {
    std::fprintf(stderr, "train_step_bench: %s\n", v.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(v).value();
}

std::vector<ty::optim::NamedTensor> Params(const ty::nn::Module& m) {
  const ty::nn::NamedTensors named = m.NamedParameters();
  return std::vector<ty::optim::NamedTensor>(named.begin(), named.end());
}

Setup MakeSetup(const std::string& name, ty::Generator* gen) {
  const ty::TensorOptions kInt64 = ty::Options(ty::DType::kInt64);
  Setup s;
  ty::nn::ModelConfigs configs;
  configs.mlp.sizes = {784, 1024, 1024, 10};
  configs.gpt.n_layer = 4;
  configs.gpt.n_embd = 256;
  configs.gpt.n_head = 4;
  configs.gpt.context = 128;
  configs.gpt.vocab_size = 65;
  configs.gpt.dropout = 0;
  configs.gpt.bias = true;
  s.model = Must(ty::nn::BuildModel(name, configs, gen));
  s.model->Train(true);
  if (name == "gpt") {
    const int64_t b = 16, t = 128;
    ty::Tensor tokens = ty::RandInt({b, t + 1}, 0, configs.gpt.vocab_size, kInt64, gen);
    s.input = ty::ContiguousData(ty::ops::Narrow(tokens, 1, 0, t));
    s.target = ty::ContiguousData(ty::ops::Narrow(tokens, 1, 1, t));
    s.batch = b;
    s.items_per_step = b * t;
    s.units = "tokens";
    ty::optim::AdamWOptions o;
    o.lr = 3e-4;
    o.weight_decay = 0.1;
    s.optimizer = Must(ty::optim::AdamW::Create(Params(*s.model), o));
    return s;
  }
  s.batch = name == "mlp" ? 128 : 64;
  s.items_per_step = s.batch;
  s.input =
      name == "mlp" ? ty::Randn({s.batch, 784}, {}, gen) : ty::Randn({s.batch, 1, 28, 28}, {}, gen);
  s.target = ty::RandInt({s.batch}, 0, 10, kInt64, gen);
  ty::optim::SGDOptions o;
  o.lr = 0.01;
  o.momentum = 0.9;
  s.optimizer = Must(ty::optim::SGD::Create(Params(*s.model), o));
  return s;
}

// forward, loss, backward, step, zero_grad(set_to_none).
void TrainStep(Setup& s) {
  ty::Tensor logits = s.model->Forward(s.input);
  if (logits.dim() == 3) logits = ty::ops::Reshape(logits, {-1, logits.size(-1)});
  ty::Tensor loss = ty::ops::CrossEntropy(logits, ty::ops::Reshape(s.target, {-1}));
  ty::Status st = ty::autograd::Backward(loss);
  if (!st.ok()) {
    std::fprintf(stderr, "train_step_bench: backward failed: %s\n", st.ToString().c_str());
    std::exit(1);
  }
  s.optimizer->Step();
  s.optimizer->ZeroGrad(/*set_to_none=*/true);
}

// Under scripts/profile-train.sh, perf record starts with its events off and turns them on and
// off through the fifo named by TY_PERF_CONTROL, so that the profile holds the timed steps only.
void PerfControl(const char* command) {
  const char* path = std::getenv("TY_PERF_CONTROL");
  if (path == nullptr) return;
  const int fd = ::open(path, O_WRONLY | O_NONBLOCK);
  if (fd < 0) return;  // no perf reading it
  const ssize_t n = ::write(fd, command, std::strlen(command));
  (void)n;
  ::close(fd);
}

double PeakRssMiB() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

}  // namespace

int main(int argc, char** argv) {
  const Flags f = ParseFlags(argc, argv);
  ty::kernels::cpu::SetNumThreads(f.threads);
  ty::Generator gen(1234);
  Setup s = MakeSetup(f.model, &gen);
  for (int i = 0; i < f.warmup; ++i) TrainStep(s);

  using Clock = std::chrono::steady_clock;
  std::vector<double> rates;
  PerfControl("enable\n");
  for (int w = 0; w < f.windows; ++w) {
    const int n = f.steps / f.windows + (w < f.steps % f.windows ? 1 : 0);
    const auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) TrainStep(s);
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    rates.push_back(static_cast<double>(n * s.items_per_step) / secs);
  }
  PerfControl("disable\n");
  std::sort(rates.begin(), rates.end());
  const size_t k = rates.size();
  const double median = k % 2 ? rates[k / 2] : (rates[k / 2 - 1] + rates[k / 2]) / 2;
  const ty::AllocatorStats stats = ty::CpuAllocator::Get().Stats();
  std::printf(
      "{\"impl\": \"trainyard\", \"model\": \"%s\", \"threads\": %d, \"batch\": %lld, "
      "\"units\": \"%s\", \"throughput\": %.1f, \"best\": %.1f, \"stat\": \"median of %zu "
      "windows\", \"steps\": %d, \"peak_rss_mib\": %.1f, \"allocator_peak_mib\": %.1f}\n",
      f.model.c_str(), f.threads, static_cast<long long>(s.batch), s.units, median, rates.back(), k,
      f.steps, PeakRssMiB(), static_cast<double>(stats.peak_allocated_bytes) / (1 << 20));
  return 0;
}
