// Acceptance of the service with the real binaries on loopback: `trainyard local` trains
// Fashion-MNIST on two workers, and a GPT in pipeline stages and with ZeRO-3; a job's metrics reach
// WatchJob and every /metrics endpoint.
#include <gtest/gtest.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>

#include "common/json.h"
#include "tests/testing/cluster.h"
#include "tests/testing/generic_call.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"
#include "worker/tensor/safetensors.h"

namespace trainyard {
namespace {

using namespace std::chrono_literals;

using testing::Cluster;
using testing::JobWatch;
using testing::TempDir;

const std::string kSource = TY_SOURCE_DIR;
const std::string kTrainyard = std::string(TY_BIN_DIR) + "/trainyard";

TEST(ServiceTest, LocalTrainsFashionMlpOnTwoWorkersToEightyFivePercent) {
  TempDir dir;
  const std::string checkpoints = dir.File("runs");
  testing::ProcessResult r = testing::RunProcess(
      {kTrainyard, "local", kSource + "/examples/fashion-mlp.yaml", "--workers", "2", "-o", "json",
       "--state-dir", dir.File("state"), "--set", "checkpoint.dir=" + checkpoints},
      std::chrono::minutes(5));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  StatusOr<Json> job = Json::Parse(r.out);
  ASSERT_TRUE(job.ok()) << r.out;
  EXPECT_EQ(job->Find("state")->string_value(), "SUCCEEDED");
  EXPECT_EQ(job->Find("world_size")->int_value(), 2);  // every local slot
  const Json* eval = job->Find("last_eval");
  ASSERT_NE(eval, nullptr);
  EXPECT_GE(eval->Find("accuracy")->number_value(), 0.85) << r.out;
  // Both ranks ran, on the two workers.
  const Json& ranks = *job->Find("attempts")->items().back().Find("ranks");
  ASSERT_EQ(ranks.size(), 2u);
  EXPECT_NE(ranks[0].Find("worker")->string_value(), ranks[1].Find("worker")->string_value());
  // The checkpoint is under the spec's dir, in the job's own directory, and loads.
  const std::string ckpt = job->Find("checkpoint")->string_value();
  EXPECT_EQ(ckpt.rfind(checkpoints + "/" + job->Find("id")->string_value() + "/step-", 0), 0u)
      << ckpt;
  auto file = LoadSafetensors(ckpt + "/model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status().message();
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& [name, t] : file->tensors) {
    for (int64_t d = 0; d < t.dim(); ++d) shapes[name].push_back(t.size(d));
  }
  EXPECT_EQ(shapes["fc1.weight"], (std::vector<int64_t>{512, 784}));  // PyTorch's [out, in]
  EXPECT_EQ(shapes["fc3.bias"], (std::vector<int64_t>{10}));
}

// Pipeline stages and ZeRO-3 through the service: a tiny GPT on two local workers ends with
// the evaluation loss of one process with the same global batch (16 windows a step).
TEST(ServiceTest, LocalTrainsPipelineStagesAndZeroThreeAsOneProcessDoes) {
  TempDir dir;
  const std::string spec = dir.File("gpt.yaml");
  std::ofstream(spec)
      << "name: gpt\nmodel: {gpt: {context: 16, n_layer: 2, n_head: 2, n_embd: 32, dropout: 0, "
         "bias: false}}\ndata: {text: {path: "
      << kSource << "/data/kjv.txt, vocabulary: char, eval_fraction: 0.01}, num_workers: 0}\n"
      << "optimizer: {adamw: {lr: 0.001}}\ngrad_clip_norm: 1.0\nbatch_size: 8\nsteps: 20\n"
      << "seed: 3\neval: {max_batches: 1, batch_size: 8}\nparallelism: {grad_accumulation_steps: "
         "2}\n";
  testing::ProcessResult one =
      testing::RunProcess({kTrainyard, "train", spec, "--quiet", "-o", "json", "--set",
                           "checkpoint.dir=" + dir.File("one")},
                          std::chrono::minutes(2));
  ASSERT_EQ(one.exit_code, 0) << one.err;
  StatusOr<Json> want = Json::Parse(one.out);
  ASSERT_TRUE(want.ok()) << one.out;
  const double want_loss = want->Find("eval")->Find("loss")->number_value();
  const std::vector<std::vector<std::string>> layouts = {
      {"parallelism.pipeline_stages=2"}, {"parallelism.zero_stage=3", "batch_size=4"}};
  for (const std::vector<std::string>& sets : layouts) {
    SCOPED_TRACE(sets[0]);
    std::vector<std::string> args = {kTrainyard,
                                     "local",
                                     spec,
                                     "--workers",
                                     "2",
                                     "-o",
                                     "json",
                                     "--state-dir",
                                     dir.File("state-" + sets[0]),
                                     "--set",
                                     "checkpoint.dir=" + dir.File("runs-" + sets[0])};
    for (const std::string& set : sets) args.insert(args.end(), {"--set", set});
    testing::ProcessResult r = testing::RunProcess(args, std::chrono::minutes(3));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    StatusOr<Json> job = Json::Parse(r.out);
    ASSERT_TRUE(job.ok()) << r.out;
    EXPECT_EQ(job->Find("state")->string_value(), "SUCCEEDED");
    EXPECT_EQ(job->Find("world_size")->int_value(), 2);
    const Json& ranks = *job->Find("attempts")->items().back().Find("ranks");
    ASSERT_EQ(ranks.size(), 2u);
    EXPECT_NE(ranks[0].Find("worker")->string_value(), ranks[1].Find("worker")->string_value());
    EXPECT_NEAR(job->Find("last_eval")->Find("loss")->number_value(), want_loss, 1e-5 * want_loss);
  }
}

// Models users define: a GPT and a LLaMA-style decoder, each written as a graph, train on two
// local workers to the evaluation loss of one `trainyard train` process with the same global batch.
TEST(ServiceTest, LocalTrainsGptAndLlamaGraphsAsOneProcessDoes) {
  TempDir dir;
  const std::string common =
      "data: {text: {path: " + kSource +
      "/data/kjv.txt, vocabulary: char, eval_fraction: 0.01}, num_workers: 0}\n"
      "optimizer: {adamw: {lr: 0.001}}\nbatch_size: 8\nsteps: 12\nseed: 3\n"
      "eval: {max_batches: 1, batch_size: 8}\nparallelism: {grad_accumulation_steps: 2}\n";
  const std::string graph =
      "name: graph\nmodel:\n  graph:\n    input: {name: idx, dtype: int64, shape: [16]}\n"
      "    blocks:\n      - name: block\n        nodes:\n"
      "          - {name: ln_1, op: layer_norm, inputs: [x]}\n"
      "          - {name: attn.c_attn, op: linear, inputs: [ln_1], out_features: 96}\n"
      "          - {name: attn.sdpa, op: attention, inputs: [attn.c_attn], heads: 2, causal: "
      "true}\n"
      "          - {name: attn.c_proj, op: linear, inputs: [attn.sdpa], out_features: 32}\n"
      "          - {name: out, op: add, inputs: [x, attn.c_proj]}\n"
      "    nodes:\n"
      "      - {name: wte, op: embedding, inputs: [idx], num_embeddings: 128, embedding_dim: 32}\n"
      "      - {name: wpe, op: position_embedding, inputs: [idx], num_embeddings: 16, "
      "embedding_dim: 32}\n"
      "      - {name: sum, op: add, inputs: [wte, wpe]}\n"
      "      - {name: h, op: block, block: block, repeat: 2, inputs: [sum]}\n"
      "      - {name: ln_f, op: layer_norm, inputs: [h]}\n"
      "      - {name: lm_head, op: linear, inputs: [ln_f], share: wte, bias: false}\n";
  // LLaMA's layer (examples/graph-kjv-llama.yaml), 32 wide: RMSNorm, rotary, 4 query heads
  // over 2 key/value heads, SwiGLU.
  const std::string llama =
      "name: llama\nmodel:\n  graph:\n    input: {name: ids, dtype: int64, shape: [16]}\n"
      "    blocks:\n      - name: layer\n        output: out\n        nodes:\n"
      "          - {name: q, op: linear, inputs: [norm1], out_features: 32, bias: false}\n"
      "          - {name: k, op: linear, inputs: [norm1], out_features: 16, bias: false}\n"
      "          - {name: v, op: linear, inputs: [norm1], out_features: 16, bias: false}\n"
      "          - {name: q_rot, op: rotary, inputs: [q], heads: 4}\n"
      "          - {name: k_rot, op: rotary, inputs: [k], heads: 2}\n"
      "          - {name: attn, op: attention, inputs: [q_rot, k_rot, v], heads: 4, kv_heads: 2, "
      "causal: true}\n"
      "          - {name: o, op: linear, inputs: [attn], out_features: 32, bias: false}\n"
      "          - {name: h, op: add, inputs: [x, o]}\n"
      "          - {name: gate, op: linear, inputs: [norm2], out_features: 64, bias: false}\n"
      "          - {name: up, op: linear, inputs: [norm2], out_features: 64, bias: false}\n"
      "          - {name: act, op: silu, inputs: [gate]}\n"
      "          - {name: gated, op: mul, inputs: [act, up]}\n"
      "          - {name: down, op: linear, inputs: [gated], out_features: 32, bias: false}\n"
      "          - {name: out, op: add, inputs: [h, down]}\n"
      "          - {name: norm1, op: rms_norm, inputs: [x]}\n"
      "          - {name: norm2, op: rms_norm, inputs: [h]}\n"
      "    nodes:\n"
      "      - {name: embed, op: embedding, inputs: [ids], num_embeddings: 128, embedding_dim: "
      "32}\n"
      "      - {name: layers, op: block, block: layer, repeat: 2, inputs: [embed]}\n"
      "      - {name: norm, op: rms_norm, inputs: [layers]}\n"
      "      - {name: lm_head, op: linear, inputs: [norm], out_features: 128, bias: false}\n";
  for (const std::string& model : {graph, llama}) {
    const std::string name = model.substr(6, model.find('\n') - 6);
    SCOPED_TRACE(name);
    const std::string spec = dir.File(name + ".yaml");
    std::ofstream(spec) << model << common;
    testing::ProcessResult one =
        testing::RunProcess({kTrainyard, "train", spec, "--quiet", "-o", "json", "--set",
                             "checkpoint.dir=" + dir.File("one-" + name)},
                            std::chrono::minutes(2));
    ASSERT_EQ(one.exit_code, 0) << one.err;
    StatusOr<Json> want = Json::Parse(one.out);
    ASSERT_TRUE(want.ok()) << one.out;
    const double want_loss = want->Find("eval")->Find("loss")->number_value();
    testing::ProcessResult r =
        testing::RunProcess({kTrainyard, "local", spec, "--workers", "2", "-o", "json",
                             "--state-dir", dir.File("state-" + name), "--set",
                             "checkpoint.dir=" + dir.File("runs-" + name), "--set", "batch_size=4"},
                            std::chrono::minutes(3));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    StatusOr<Json> job = Json::Parse(r.out);
    ASSERT_TRUE(job.ok()) << r.out;
    EXPECT_EQ(job->Find("state")->string_value(), "SUCCEEDED");
    EXPECT_EQ(job->Find("world_size")->int_value(), 2);
    EXPECT_NEAR(job->Find("last_eval")->Find("loss")->number_value(), want_loss, 1e-5 * want_loss);
    EXPECT_NE(r.err.find("trainyard local: " + name + ": graph ("), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(" forward FLOPs per sample)"), std::string::npos) << r.err;
  }
}

TEST(ServiceTest, MetricsReachWatchJobAndEveryMetricsEndpoint) {
  TempDir dir;
  Cluster cluster(dir.path(), {});
  std::string error;
  ASSERT_TRUE(cluster.Start(&error)) << error;
  const std::string spec =
      R"({"name":"metrics","model":{"mlp":{"sizes":[784,64,10]}},"data":{"fashion_mnist":{"limit":6400}},)"
      R"("optimizer":{"sgd":{"lr":0.05}},"batch_size":32,"steps":60,"parallelism":{"world_size":2}})";
  auto job = cluster.client().Submit(spec);
  ASSERT_TRUE(job.ok()) << job.status().message();
  JobWatch watch(cluster.client(), job->id());
  ASSERT_TRUE(watch.WaitForState(v1::SUCCEEDED, 120s)) << watch.Describe() << cluster.Logs();
  // Per-step metrics in the stream, in order, from rank 0.
  int64_t last = 0, steps = 0;
  for (const auto& e : watch.events()) {
    if (!e.has_step()) continue;
    EXPECT_GT(e.step().step(), last);
    EXPECT_EQ(e.step().total_steps(), 60);
    EXPECT_GT(e.step().samples_per_second(), 0);
    // The rank's tensor memory (on CPU the process's allocator): the model and optimizer state
    // at least, with the step's peak and the reserve above them.
    EXPECT_GT(e.step().tensor_memory_allocated_bytes(), 0);
    EXPECT_GE(e.step().tensor_memory_peak_bytes(), e.step().tensor_memory_allocated_bytes());
    EXPECT_GE(e.step().tensor_memory_reserved_bytes(), e.step().tensor_memory_peak_bytes());
    last = e.step().step();
    ++steps;
  }
  EXPECT_EQ(last, 60);
  EXPECT_GT(steps, 10);
  // The coordinator's endpoint: the job's step and state; every worker's: its rank's step
  // and phase times.
  std::string coordinator;
  auto scraped = [&](const std::string& needle) {
    return testing::WaitUntil(
        [&] {
          coordinator = testing::HttpGet(cluster.metrics_address(), "/metrics");
          return coordinator.find(needle) != std::string::npos;
        },
        5s);  // the coordinator refreshes its gauges ten times a second
  };
  EXPECT_TRUE(scraped("trainyard_job_step{job=\"" + job->id() + "\"} 60")) << coordinator;
  EXPECT_TRUE(scraped("trainyard_jobs{state=\"SUCCEEDED\"} 1")) << coordinator;
  EXPECT_TRUE(scraped("trainyard_workers_alive 2")) << coordinator;
  EXPECT_TRUE(scraped("trainyard_job_hung{job=\"" + job->id() + "\"} 0")) << coordinator;
  auto workers = cluster.client().ListWorkers();
  ASSERT_TRUE(workers.ok());
  std::set<std::string> ranks_seen;
  for (const auto& w : *workers) {
    const std::string text = testing::HttpGet(w.metrics_address(), "/metrics");
    EXPECT_NE(text.find("trainyard_rank_step{job=\"" + job->id()), std::string::npos)
        << w.name() << text;
    EXPECT_NE(text.find("trainyard_rank_phase_seconds{"), std::string::npos) << text;
    EXPECT_NE(text.find("phase=\"allreduce_wait\""), std::string::npos) << text;
    EXPECT_NE(text.find("trainyard_rank_tensor_memory_bytes{"), std::string::npos) << text;
    EXPECT_NE(text.find("kind=\"peak\""), std::string::npos) << text;
    for (const char* rank : {"rank=\"0\"", "rank=\"1\""}) {
      if (text.find(rank) != std::string::npos) ranks_seen.insert(rank);
    }
  }
  EXPECT_EQ(ranks_seen.size(), 2u);
}

TEST(ServiceTest, ASecondCoordinatorOnTheSameStateDirectoryIsRefused) {
  TempDir dir;
  Cluster cluster(dir.path(), {1, 1, 10, {}, {}, {}});
  std::string error;
  ASSERT_TRUE(cluster.StartCoordinator(&error)) << error;
  testing::ProcessResult r = testing::RunProcess(
      {std::string(TY_BIN_DIR) + "/trainyard-coordinator", "--listen", "127.0.0.1:0",
       "--metrics-listen", "127.0.0.1:0", "--state-dir", dir.File("state")},
      20s);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("another trainyard-coordinator uses"), std::string::npos) << r.err;
  EXPECT_TRUE(cluster.coordinator().running());
}

// A worker bound to every address (as in Kubernetes, --metrics-listen 0.0.0.0:9601) tells the
// coordinator, and so `trainyard workers` and Prometheus, its --host (the old name of
// --advertise-address, kept working), where it can be reached.
TEST(ServiceTest, AWorkerListeningOnEveryAddressReportsItsMetricsAtItsHost) {
  TempDir dir;
  Cluster cluster(dir.path(),
                  {1, 1, 10, {}, {"--metrics-listen", "0.0.0.0:0", "--host", "localhost"}, {}});
  std::string error;
  ASSERT_TRUE(cluster.Start(&error)) << error;
  auto workers = cluster.client().ListWorkers();
  ASSERT_TRUE(workers.ok()) << workers.status().message();
  ASSERT_EQ(workers->size(), 1u);
  const std::string address = (*workers)[0].metrics_address();
  ASSERT_EQ(address.rfind("localhost:", 0), 0u) << address;
  const std::string port = address.substr(address.rfind(':'));  // ":N"
  EXPECT_NE(testing::HttpGet("127.0.0.1" + port, "/metrics").find("trainyard_worker_slots"),
            std::string::npos);
}

// gRPC health checking and reflection, called as any gRPC tool would (generic calls with
// hand-encoded messages, so the test needs neither service's generated code).
TEST(ServiceTest, ServesHealthCheckingAndReflection) {
  TempDir dir;
  Cluster cluster(dir.path(), {1, 1, 10, {}, {}, {}});
  std::string error;
  ASSERT_TRUE(cluster.StartCoordinator(&error)) << error;
  auto channel = grpc::CreateChannel(cluster.address(), grpc::InsecureChannelCredentials());
  // HealthCheckRequest{service: ""} is empty; HealthCheckResponse{status: SERVING} is 08 01.
  std::string health;
  grpc::Status s = testing::GenericUnary(channel, "/grpc.health.v1.Health/Check", "", &health);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(health, std::string("\x08\x01", 2));

  // Reflection: ServerReflectionRequest{list_services: ""} (field 7) on the bidi stream.
  const std::string services = testing::ReflectionExchange(
      channel, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
      std::string("\x3a\x00", 2));
  EXPECT_NE(services.find("trainyard.v1.Coordinator"), std::string::npos);
  EXPECT_NE(services.find("trainyard.v1.Worker"), std::string::npos);
  EXPECT_NE(services.find("grpc.health.v1.Health"), std::string::npos);
}

}  // namespace
}  // namespace trainyard
