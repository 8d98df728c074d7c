// Every job spec in examples/ reads and validates as it is: users copy them. The zoo's models
// written as graphs (examples/graph-*.yaml) are the zoo's models.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "client/spec_file.h"
#include "common/spec/model_graph.h"
#include "worker/autograd/engine.h"
#include "worker/nn/graph.h"
#include "worker/nn/zoo.h"
#include "worker/ops/loss.h"
#include "worker/ops/views.h"
#include "worker/optim/sgd.h"
#include "worker/tensor/factories.h"

namespace trainyard::client {
namespace {

TEST(ExamplesTest, EverySpecInExamplesIsValid) {
  std::vector<std::string> specs;
  for (const auto& entry : std::filesystem::directory_iterator(TY_SOURCE_DIR "/examples")) {
    if (entry.path().extension() == ".yaml") specs.push_back(entry.path().string());
  }
  ASSERT_GE(specs.size(), 4u) << "examples/ holds the fashion, kjv and gpu specs";
  for (const std::string& path : specs) {
    StatusOr<spec::JobSpec> spec = LoadJobSpec(path, {});
    EXPECT_TRUE(spec.ok()) << path << ": " << spec.status();
  }
}

TEST(ExamplesTest, TheGpuExampleAsksForCudaInBf16) {
  StatusOr<spec::JobSpec> spec = LoadJobSpec(TY_SOURCE_DIR "/examples/kjv-gpt-gpu.yaml", {});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->device, "cuda");
  EXPECT_EQ(spec->precision, "bf16");
  EXPECT_EQ(spec->model.gpt.n_layer, 12);
}

// ---- The zoo's models written as graphs (examples/graph-*.yaml) ----

std::shared_ptr<nn::Module> GraphOfExample(const std::string& file, Generator* gen) {
  StatusOr<spec::JobSpec> spec = LoadJobSpec(TY_SOURCE_DIR "/examples/" + file, {});
  TY_CHECK(spec.ok()) << spec.status();
  StatusOr<std::shared_ptr<nn::Module>> model = nn::BuildGraph(spec->model.graph, gen);
  TY_CHECK(model.ok()) << model.status();
  return *model;
}

std::vector<std::string> Names(const nn::Module& m) {
  std::vector<std::string> names;
  for (const auto& [name, t] : m.StateDict()) names.push_back(name);
  return names;
}

// The graph loads the zoo model's weights by name (the same names, in the same order), and
// three SGD steps on the same batches give both the same losses. Both generators are reseeded
// alike after the weights are drawn, so dropout masks agree too; `train_mode` false runs the
// steps in eval mode (no dropout), for the GPT, whose attention-weight dropout the graph lacks.
void ExpectGraphTrainsAsZoo(const std::string& file, const std::string& arch,
                            const nn::ModelConfigs& configs, const Tensor& input,
                            const Tensor& target, bool train_mode = true) {
  SCOPED_TRACE(file);
  Generator zoo_gen(1), graph_gen(2);
  StatusOr<std::shared_ptr<nn::Module>> zoo = nn::BuildModel(arch, configs, &zoo_gen);
  ASSERT_TRUE(zoo.ok()) << zoo.status();
  std::shared_ptr<nn::Module> graph = GraphOfExample(file, &graph_gen);
  EXPECT_EQ(Names(*graph), Names(**zoo));
  ASSERT_TRUE(graph->LoadStateDict((*zoo)->StateDict()).ok());
  zoo_gen.ManualSeed(7), graph_gen.ManualSeed(7);
  std::vector<double> losses[2];
  int i = 0;
  for (nn::Module* m : {zoo->get(), graph.get()}) {
    m->Train(train_mode);
    optim::SGDOptions o;
    o.lr = 0.01, o.momentum = 0.9;
    auto sgd = optim::SGD::Create(m->NamedParameters(), o);
    ASSERT_TRUE(sgd.ok()) << sgd.status();
    for (int step = 0; step < 3; ++step) {
      (*sgd)->ZeroGrad();
      const Tensor out = m->Forward(input);
      const Tensor loss =
          ops::CrossEntropy(ops::Reshape(out, {-1, out.size(-1)}), ops::Reshape(target, {-1}));
      ASSERT_TRUE(autograd::Backward(loss).ok());
      (*sgd)->Step();
      losses[i].push_back(loss.item());
    }
    ++i;
  }
  for (int step = 0; step < 3; ++step)
    EXPECT_NEAR(losses[1][step], losses[0][step], 1e-5 * std::abs(losses[0][step])) << step;
  EXPECT_LT(losses[0][2], losses[0][0]);
}

TEST(ExamplesTest, TheZooModelsWrittenAsGraphsTrainAsTheZooModelsFromTheSameWeights) {
  Generator data(3);
  const Tensor images = Randn({4, 1, 28, 28}, {}, &data);
  const Tensor labels = FromVector<int64_t>({3, 1, 4, 1});
  nn::ModelConfigs c;
  c.mlp.sizes = {784, 512, 256, 10};  // examples/fashion-mlp.yaml
  ExpectGraphTrainsAsZoo("graph-fashion-mlp.yaml", "mlp", c, images, labels);
  c.cnn = nn::CnnConfig{};  // examples/fashion-cnn.yaml: the defaults, dropout 0.25
  ExpectGraphTrainsAsZoo("graph-fashion-cnn.yaml", "cnn", c, images, labels);
  c.resnet.in_channels = 1;  // ResNet-18 for Fashion-MNIST
  ExpectGraphTrainsAsZoo("graph-fashion-resnet.yaml", "resnet", c, images, labels);
  c.gpt = nn::GptConfig{128, 128, 4, 4, 256, 0.1, true};  // examples/kjv-gpt.yaml, 128 tokens
  const Tensor ids = RandInt({2, 129}, 0, 128, Options(DType::kInt64), &data);
  ExpectGraphTrainsAsZoo("graph-kjv-gpt.yaml", "gpt", c,
                         ops::Contiguous(ops::Narrow(ids, 1, 0, 128)),
                         ops::Contiguous(ops::Narrow(ids, 1, 1, 128)), /*train_mode=*/false);
}

TEST(ExamplesTest, TheLlamaGraphExampleIsTheLlamaZooEntry) {
  StatusOr<spec::JobSpec> spec = LoadJobSpec(TY_SOURCE_DIR "/examples/graph-kjv-llama.yaml", {});
  ASSERT_TRUE(spec.ok()) << spec.status();
  spec::LlamaSpec l;
  l.vocab_size = 128, l.context = 128, l.n_layer = 4, l.n_head = 4, l.n_kv_head = 2;
  l.n_embd = 256, l.intermediate_size = 688;
  StatusOr<spec::CompiledGraph> example = spec::CompileGraph(spec->model.graph);
  StatusOr<spec::CompiledGraph> zoo = spec::CompileGraph(spec::LlamaGraph(l, 0));
  ASSERT_TRUE(example.ok()) << example.status();
  ASSERT_TRUE(zoo.ok()) << zoo.status();
  ASSERT_EQ(example->ops.size(), zoo->ops.size());
  for (size_t i = 0; i < zoo->ops.size(); ++i) {
    const spec::GraphOp &a = example->ops[i], &b = zoo->ops[i];
    EXPECT_EQ(a.node.op, b.node.op) << i;
    EXPECT_EQ(a.module, b.module) << i;
    EXPECT_EQ(a.inputs, b.inputs) << a.module;
    EXPECT_EQ(a.shape.ToString(), b.shape.ToString()) << a.module;
    EXPECT_EQ(a.key, b.key) << a.module;
  }
  EXPECT_EQ(example->parameters, zoo->parameters);
}

}  // namespace
}  // namespace trainyard::client
