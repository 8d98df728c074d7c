#include "common/spec/job_spec.h"

#include <limits>
#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/spec/spec_test_util.h"

namespace trainyard::spec {
namespace {

using ::testing::HasSubstr;

using testing::Minimal;
using testing::ParseOrDie;
using testing::ProblemsOf;
using testing::SetPath;

TEST(JobSpecTest, MinimalSpecGetsTheDocumentedDefaults) {
  StatusOr<JobSpec> spec = ParseJobSpec(Minimal());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name, "job");
  EXPECT_EQ(spec->model.arch, "mlp");
  EXPECT_EQ(spec->model.mlp.sizes, (std::vector<int64_t>{784, 128, 10}));
  EXPECT_EQ(spec->model.mlp.activation, "relu");
  EXPECT_EQ(spec->data.source, "fashion_mnist");
  EXPECT_EQ(spec->data.fashion_mnist.dir, kDefaultFashionMnistDir);
  EXPECT_TRUE(spec->data.shuffle);
  EXPECT_EQ(spec->data.num_workers, 1);
  EXPECT_EQ(spec->optimizer.kind, "sgd");
  EXPECT_DOUBLE_EQ(spec->optimizer.lr(), 0.1);
  EXPECT_DOUBLE_EQ(spec->optimizer.sgd.momentum, 0.9);
  EXPECT_EQ(spec->schedule.kind, "constant");
  EXPECT_EQ(spec->batch_size, 32);
  EXPECT_EQ(spec->steps, 0);
  EXPECT_EQ(spec->epochs, 1);  // neither set: one epoch
  EXPECT_EQ(spec->precision, "fp32");
  EXPECT_EQ(spec->device, "cpu");
  EXPECT_EQ(spec->checkpoint.keep_last, 3);
  EXPECT_TRUE(spec->checkpoint.resume);
  EXPECT_TRUE(spec->checkpoint.async);
  EXPECT_DOUBLE_EQ(spec->optimizer.adamw.weight_decay, 0.01);
  EXPECT_DOUBLE_EQ(spec->optimizer.adam.weight_decay, 0);

  const ParallelismSpec& p = spec->parallelism;
  EXPECT_EQ(p.world_size, 1);
  EXPECT_EQ(p.ranks_per_node, 0);
  EXPECT_EQ(p.backend, "auto");
  EXPECT_EQ(ResolvedBackend(*spec), "gloo");  // auto on cpu
  EXPECT_DOUBLE_EQ(p.bucket_size_mb, 25);
  EXPECT_DOUBLE_EQ(p.first_bucket_size_mb, 1);
  EXPECT_EQ(p.grad_accumulation_steps, 1);
  EXPECT_EQ(p.zero_stage, 0);
  EXPECT_FALSE(p.activation_checkpointing);
  EXPECT_DOUBLE_EQ(p.collective_timeout_seconds, 600);
  EXPECT_FALSE(p.find_unused_parameters);
  EXPECT_EQ(p.grad_compression, "none");
  EXPECT_EQ(p.all_reduce_algorithm, "auto");
}

TEST(JobSpecTest, ReadsEveryKindOfField) {
  Json json = ParseOrDie(R"({
    "name": "kjv-gpt",
    "model": {"gpt": {"context": 64, "n_layer": 2, "n_head": 2, "n_embd": 32, "dropout": 0.1,
                      "bias": false}},
    "data": {"text": {"path": "kjv.txt", "vocabulary": "byte", "eval_fraction": 0.05},
             "shuffle": false, "num_workers": 0, "drop_last": true},
    "optimizer": {"adamw": {"lr": 3e-4, "beta2": 0.95, "weight_decay": 0.1}},
    "schedule": {"cosine": {"warmup_steps": 10, "min_lr": 3e-5}},
    "batch_size": "16",
    "steps": 200,
    "eval": {"every_steps": 50, "max_batches": 4},
    "seed": "18446744073709551615",
    "checkpoint": {"dir": "runs/x", "every_steps": 100, "keep_last": 0, "resume": false,
                   "async": false},
    "grad_clip_norm": 1.0,
    "num_threads": 2
  })");
  StatusOr<JobSpec> spec = ParseJobSpec(json);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name, "kjv-gpt");
  EXPECT_EQ(spec->model.arch, "gpt");
  EXPECT_EQ(spec->model.gpt.context, 64);
  EXPECT_EQ(spec->model.gpt.vocab_size, 0);
  EXPECT_FALSE(spec->model.gpt.bias);
  EXPECT_DOUBLE_EQ(spec->model.gpt.dropout, 0.1);
  EXPECT_EQ(spec->data.text.vocabulary, "byte");
  EXPECT_FALSE(spec->data.shuffle);
  EXPECT_TRUE(spec->data.drop_last);
  EXPECT_EQ(spec->optimizer.kind, "adamw");
  EXPECT_DOUBLE_EQ(spec->optimizer.adamw.beta2, 0.95);
  EXPECT_DOUBLE_EQ(spec->optimizer.adamw.beta1, 0.9);
  EXPECT_EQ(spec->schedule.kind, "cosine");
  EXPECT_EQ(spec->schedule.cosine.warmup_steps, 10);
  EXPECT_EQ(spec->batch_size, 16);  // an int64 may be a string in the proto JSON mapping
  EXPECT_EQ(spec->steps, 200);
  EXPECT_EQ(spec->epochs, 0);
  EXPECT_EQ(spec->seed, UINT64_MAX);
  EXPECT_EQ(spec->checkpoint.every_steps, 100);
  EXPECT_EQ(spec->checkpoint.keep_last, 0);
  EXPECT_FALSE(spec->checkpoint.resume);
  EXPECT_FALSE(spec->checkpoint.async);
  EXPECT_EQ(spec->num_threads, 2);
}

TEST(JobSpecTest, AcceptsLowerCamelCaseNamesAsProtobufDoes) {
  Json json = Minimal();
  json.Set("batchSize", 64);
  json.Set("gradClipNorm", 0.5);
  SetPath(&json, "data.numWorkers", 3);
  StatusOr<JobSpec> spec = ParseJobSpec(json);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->batch_size, 64);
  EXPECT_DOUBLE_EQ(spec->grad_clip_norm, 0.5);
  EXPECT_EQ(spec->data.num_workers, 3);

  json.Set("batch_size", 64);
  EXPECT_THAT(ProblemsOf(json), HasSubstr("batch_size: set twice, as batch_size and batchSize"));
}

TEST(JobSpecTest, NullIsAbsent) {
  Json json = Minimal();
  json.Set("batch_size", nullptr);
  json.Set("schedule", nullptr);
  StatusOr<JobSpec> spec = ParseJobSpec(json);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->batch_size, 32);
}

TEST(JobSpecTest, ListsEveryProblemWithItsPathValueAndRange) {
  Json json = Minimal();
  json.Set("batch_size", 0);
  json.Set("epochs", "many");
  SetPath(&json, "model.mlp.sizes", Json::Array({784, -3, 10}));
  SetPath(&json, "model.mlp.dropout", 1.0);
  SetPath(&json, "optimizer.sgd.lr", -0.5);
  SetPath(&json, "data.num_workers", 65);
  json.Set("device", "tpu");
  std::string text = ProblemsOf(json);
  EXPECT_THAT(text, HasSubstr("invalid job spec (7 problems):"));
  EXPECT_THAT(text, HasSubstr("batch_size = 0: must be in [1, 1048576]"));
  EXPECT_THAT(text, HasSubstr("epochs = \"many\": expected an integer"));
  EXPECT_THAT(text, HasSubstr("model.mlp.sizes[1] = -3: must be in [1, 1048576]"));
  EXPECT_THAT(text, HasSubstr("model.mlp.dropout = 1.0: must be in [0, 1)"));
  EXPECT_THAT(text, HasSubstr("optimizer.sgd.lr = -0.5: must be finite and >= 0"));
  EXPECT_THAT(text, HasSubstr("data.num_workers = 65: must be in [0, 64]"));
  EXPECT_THAT(text, HasSubstr("device = \"tpu\": allowed: one of \"cpu\", \"cuda\""));
}

TEST(JobSpecTest, PrecisionIsFp32Bf16OrFp16AndDeviceIsCpuOrCuda) {
  for (const char* precision : {"fp32", "bf16", "fp16"}) {
    for (const char* device : {"cpu", "cuda"}) {
      Json json = Minimal();
      json.Set("precision", precision);
      json.Set("device", device);
      StatusOr<JobSpec> spec = ParseJobSpec(json);
      ASSERT_TRUE(spec.ok()) << precision << " on " << device << ": " << spec.status();
      EXPECT_EQ(spec->precision, precision);
      EXPECT_EQ(spec->device, device);
      EXPECT_EQ(ResolvedBackend(*spec), std::string(device) == "cuda" ? "nccl" : "gloo");
      EXPECT_EQ(*ToJson(*spec).Find("precision"), Json(precision));
    }
  }
  Json json = Minimal();
  json.Set("precision", "fp8");
  json.Set("device", "cuda:0");
  std::string text = ProblemsOf(json);
  EXPECT_THAT(text, HasSubstr("invalid job spec (2 problems):"));
  EXPECT_THAT(text, HasSubstr("precision = \"fp8\": allowed: one of \"fp32\", \"bf16\", "
                              "\"fp16\""));
  EXPECT_THAT(text, HasSubstr("device = \"cuda:0\": allowed: one of \"cpu\", \"cuda\""));
}

TEST(JobSpecTest, Fp16CombinesWithEveryZeroStage) {
  for (int stage : {1, 2, 3}) {
    Json json = Minimal();
    json.Set("precision", "fp16");
    SetPath(&json, "parallelism.world_size", 2);
    SetPath(&json, "parallelism.zero_stage", stage);
    EXPECT_TRUE(ParseJobSpec(json).ok()) << "zero_stage " << stage;
  }
}

TEST(JobSpecTest, NamesMissingRequiredParts) {
  std::string text = ProblemsOf(Json::Object());
  EXPECT_THAT(text, HasSubstr("model: required"));
  EXPECT_THAT(text, HasSubstr("data: required"));
  EXPECT_THAT(text, HasSubstr("optimizer: required"));

  Json json = Minimal();
  json.Set("model", Json::Object());
  EXPECT_THAT(ProblemsOf(json), HasSubstr("model: required: set one of mlp, cnn, resnet, gpt"));
  SetPath(&json, "model.mlp", Json::Object({{"sizes", Json::Array({784, 10})}}));
  SetPath(&json, "model.cnn", Json::Object());
  EXPECT_THAT(
      ProblemsOf(json),
      HasSubstr("model: set only one of mlp, cnn, resnet, gpt, llama, graph (found mlp and cnn)"));
}

TEST(JobSpecTest, UnknownFieldsAreErrorsWithASuggestion) {
  Json json = Minimal();
  json.Set("batchsize", 64);
  SetPath(&json, "optimizer.sgd.momentun", 0.9);
  std::string text = ProblemsOf(json);
  EXPECT_THAT(text, HasSubstr("unknown field batchsize (did you mean batch_size?)"));
  EXPECT_THAT(text, HasSubstr("unknown field optimizer.sgd.momentun (did you mean momentum?); "
                              "allowed: lr, momentum, dampening, nesterov, weight_decay"));
}

TEST(JobSpecTest, IntegersBeyondInt64SayTheyAreOutOfRange) {
  Json spec = Minimal();
  spec.Set("steps", Json(1180591620717411303424.0));  // 2^70
  spec.Set("seed", "99999999999999999999999");
  SetPath(&spec, "model.mlp.sizes", Json::Array({784, "123456789012345678901234567890", 10}));
  SetPath(&spec, "eval.every_steps", Json(std::numeric_limits<double>::infinity()));
  const std::string problems = ProblemsOf(spec);
  EXPECT_THAT(problems, HasSubstr("steps = 1180591620717411303424.0: out of range: must be in [1, "
                                  "1000000000000]"));
  EXPECT_THAT(problems, HasSubstr("seed = \"99999999999999999999999\": out of range"));
  EXPECT_THAT(problems, HasSubstr("model.mlp.sizes[1] = \"123456789012345678901234567890\": out "
                                  "of range: must be in [1, 1048576]"));
  EXPECT_THAT(problems, HasSubstr("eval.every_steps = inf: out of range"));
  EXPECT_THAT(problems, ::testing::Not(HasSubstr("expected an integer")));
  // A fraction is still not an integer.
  spec = Minimal();
  spec.Set("steps", 2.5);
  EXPECT_THAT(ProblemsOf(spec), HasSubstr("steps = 2.5: expected an integer"));
}

TEST(JobSpecTest, EachProblemIsAFieldViolationWithItsPath) {
  Json spec = Minimal();
  spec.Set("batch_size", 0);
  spec.Set("stpes", 10);
  SetPath(&spec, "model.mlp.activation", "swish");
  StatusOr<JobSpec> parsed = ParseJobSpec(spec);
  ASSERT_FALSE(parsed.ok());
  const std::vector<FieldViolation>& v = parsed.status().field_violations();
  ASSERT_EQ(v.size(), 3u) << parsed.status();
  std::map<std::string, std::string> by_field;
  for (const FieldViolation& f : v) by_field[f.field] = f.description;
  EXPECT_EQ(by_field["model.mlp.activation"],
            "allowed: one of \"relu\", \"gelu\", \"tanh\" (got \"swish\")");
  EXPECT_EQ(by_field["batch_size"], "must be in [1, 1048576] (got 0)");
  EXPECT_EQ(by_field["stpes"], "unknown field (did you mean steps?)");
}

// Note [Errors that arrive whole]: 80 unknown fields (and 30 000) give a message of bounded
// size that names the first and counts the rest, with every problem a field violation.
TEST(JobSpecTest, ManyProblemsKeepTheMessageShortAndListEveryViolation) {
  for (int n : {80, 30000}) {
    Json::Members members = Minimal().members();
    for (int i = 0; i < n; ++i) members.emplace_back("unknown_field_" + std::to_string(i), i);
    const Json spec = Json::Object(std::move(members));
    StatusOr<JobSpec> parsed = ParseJobSpec(spec);
    ASSERT_FALSE(parsed.ok());
    const std::string& message = parsed.status().message();
    EXPECT_LT(message.size(), 1500u) << n;
    EXPECT_THAT(message, HasSubstr("invalid job spec (" + std::to_string(n) + " problems)"));
    EXPECT_THAT(message, HasSubstr("unknown field unknown_field_0;"));
    EXPECT_THAT(message, ::testing::ContainsRegex("and [0-9]+ more$"));
    const auto& v = parsed.status().field_violations();
    const size_t listed = std::min<size_t>(n, 1000);
    ASSERT_EQ(v.size(), listed + (n > 1000 ? 1 : 0)) << n;
    EXPECT_EQ(v[listed - 1].field, "unknown_field_" + std::to_string(listed - 1));
    if (n > 1000) {
      EXPECT_EQ(v.back().description, "and " + std::to_string(n - 1000) + " more");
    }
  }
}

TEST(JobSpecTest, ChecksRelationsBetweenFields) {
  Json json = Minimal();
  json.Set("steps", 10);
  json.Set("epochs", 2);
  SetPath(&json, "model.mlp.sizes", Json::Array({100, 5}));
  SetPath(&json, "optimizer.sgd.nesterov", true);
  SetPath(&json, "optimizer.sgd.momentum", 0);
  SetPath(&json, "checkpoint.every_steps", 5);
  std::string text = ProblemsOf(json);
  EXPECT_THAT(text, HasSubstr("steps = 10 and epochs = 2: set only one"));
  EXPECT_THAT(text, HasSubstr("model.mlp.sizes[0] = 100: must be 784 for data.fashion_mnist"));
  EXPECT_THAT(text, HasSubstr("model.mlp.sizes[1] = 5: must be 10 for data.fashion_mnist"));
  EXPECT_THAT(text, HasSubstr("optimizer.sgd.nesterov = true: needs momentum > 0"));
  EXPECT_THAT(text, HasSubstr("checkpoint.every_steps = 5: needs checkpoint.dir"));

  Json gpt = ParseOrDie(R"({"model": {"gpt": {"n_head": 3}}, "data": {"fashion_mnist": {}},
                            "optimizer": {"adamw": {"lr": 0.001}},
                            "schedule": {"cosine": {"min_lr": 0.01, "warmup_steps": 5,
                                                    "total_steps": 5}},
                            "name": "Bad Name"})");
  text = ProblemsOf(gpt);
  EXPECT_THAT(text, HasSubstr("model.gpt.n_head = 3: must divide model.gpt.n_embd = 256"));
  EXPECT_THAT(text, HasSubstr("model.gpt: cannot train on data.fashion_mnist"));
  EXPECT_THAT(
      text, HasSubstr("schedule.cosine.min_lr = 0.01: must be in [0, optimizer.adamw.lr = 0.001]"));
  EXPECT_THAT(text,
              HasSubstr("schedule.cosine.total_steps = 5: must be greater than warmup_steps = 5"));
  EXPECT_THAT(text, HasSubstr("name = \"Bad Name\": must be 1 to 63 characters"));
}

TEST(JobSpecTest, RejectsNonObjects) {
  StatusOr<JobSpec> spec = ParseJobSpec(Json::Array({1, 2}));
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("expected an object"));
  Json json = Minimal();
  json.Set("model", 3);
  EXPECT_THAT(ProblemsOf(json), HasSubstr("model = 3: expected an object"));
}

TEST(JobSpecTest, ToJsonWritesEveryFieldAndReadsBack) {
  Json json = ParseOrDie(R"({
    "model": {"cnn": {"channels1": 8}},
    "data": {"fashion_mnist": {"limit": 1000}},
    "optimizer": {"adam": {"lr": 0.002}},
    "schedule": {"step": {"step_size": 100}},
    "steps": 300,
    "seed": "18446744073709551615"
  })");
  StatusOr<JobSpec> spec = ParseJobSpec(json);
  ASSERT_TRUE(spec.ok()) << spec.status();
  Json out = ToJson(*spec);
  EXPECT_EQ(out.Find("epochs"), nullptr);
  ASSERT_NE(out.Find("model"), nullptr);
  EXPECT_EQ(out.Find("model")->Find("mlp"), nullptr);  // only the selected oneof member
  EXPECT_EQ(*out.Find("model")->Find("cnn")->Find("dropout"), Json(0.25));
  EXPECT_EQ(*out.Find("seed"), Json("18446744073709551615"));
  StatusOr<JobSpec> back = ParseJobSpec(out);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(ToJson(*back), out);
  EXPECT_EQ(back->model.cnn.channels1, 8);
  EXPECT_EQ(back->schedule.step.step_size, 100);
  EXPECT_DOUBLE_EQ(back->schedule.step.gamma, 0.1);
}

// --- parallelism ------------------------------------------------------------------------------

TEST(JobSpecTest, ReadsEveryParallelismField) {
  Json json = ParseOrDie(R"({
    "model": {"gpt": {"context": 16, "n_layer": 1, "n_head": 1, "n_embd": 8}},
    "data": {"text": {"path": "kjv.txt"}},
    "optimizer": {"adamw": {}},
    "parallelism": {"world_size": 8, "ranks_per_node": 4, "backend": "gloo",
                    "bucket_size_mb": 50, "firstBucketSizeMb": 0.5,
                    "grad_accumulation_steps": "4", "zero_stage": 1,
                    "activation_checkpointing": true, "collective_timeout_seconds": 30,
                    "find_unused_parameters": false, "grad_compression": "bf16",
                    "all_reduce_algorithm": "ring_chunked"}
  })");
  StatusOr<JobSpec> spec = ParseJobSpec(json);
  ASSERT_TRUE(spec.ok()) << spec.status();  // compression with ZeRO-1 is allowed
  const ParallelismSpec& p = spec->parallelism;
  EXPECT_EQ(p.world_size, 8);
  EXPECT_EQ(p.ranks_per_node, 4);
  EXPECT_EQ(p.backend, "gloo");
  EXPECT_DOUBLE_EQ(p.bucket_size_mb, 50);
  EXPECT_DOUBLE_EQ(p.first_bucket_size_mb, 0.5);
  EXPECT_EQ(p.grad_accumulation_steps, 4);
  EXPECT_EQ(p.zero_stage, 1);
  EXPECT_TRUE(p.activation_checkpointing);
  EXPECT_DOUBLE_EQ(p.collective_timeout_seconds, 30);
  EXPECT_FALSE(p.find_unused_parameters);
  EXPECT_EQ(p.grad_compression, "bf16");
  EXPECT_EQ(p.all_reduce_algorithm, "ring_chunked");

  Json out = ToJson(*spec);
  ASSERT_NE(out.Find("parallelism"), nullptr);
  EXPECT_EQ(*out.Find("parallelism")->Find("first_bucket_size_mb"), Json(0.5));
  // find_unused_parameters goes with plain data parallelism (ZeRO-1 refuses it).
  SetPath(&json, "parallelism.zero_stage", 0);
  SetPath(&json, "parallelism.find_unused_parameters", true);
  StatusOr<JobSpec> unused = ParseJobSpec(json);
  ASSERT_TRUE(unused.ok()) << unused.status();
  EXPECT_TRUE(unused->parallelism.find_unused_parameters);
  EXPECT_EQ(*out.Find("parallelism")->Find("grad_accumulation_steps"), Json(4));
  StatusOr<JobSpec> back = ParseJobSpec(out);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(ToJson(*back), out);
  EXPECT_EQ(back->parallelism.world_size, 8);
  EXPECT_EQ(back->parallelism.all_reduce_algorithm, "ring_chunked");
}

TEST(JobSpecTest, ElasticBoundsDefaultToTheWorldSizeAndAreChecked) {
  Json json = Minimal();
  SetPath(&json, "parallelism.world_size", 3);
  StatusOr<JobSpec> fixed = ParseJobSpec(json);
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  EXPECT_EQ(MinWorldSize(fixed->parallelism), 3);
  EXPECT_EQ(MaxWorldSize(fixed->parallelism), 3);
  EXPECT_FALSE(IsElastic(fixed->parallelism));

  SetPath(&json, "parallelism.min_world_size", 2);
  StatusOr<JobSpec> elastic = ParseJobSpec(json);
  ASSERT_TRUE(elastic.ok()) << elastic.status();
  EXPECT_TRUE(IsElastic(elastic->parallelism));
  EXPECT_EQ(MaxWorldSize(elastic->parallelism), 3);

  SetPath(&json, "parallelism.max_world_size", 4);  // 4 ranks, 3 micro-batches per step
  EXPECT_THAT(ProblemsOf(json),
              HasSubstr("parallelism.max_world_size = 4: must be at most parallelism.world_size "
                        "x parallelism.grad_accumulation_steps = 3"));
  SetPath(&json, "parallelism.grad_accumulation_steps", 2);
  EXPECT_TRUE(ParseJobSpec(json).ok());
  SetPath(&json, "parallelism.min_world_size", 5);
  EXPECT_THAT(ProblemsOf(json), HasSubstr("parallelism.min_world_size = 5: must be at most "
                                          "parallelism.max_world_size = 4"));
  SetPath(&json, "parallelism.min_world_size", 2);
  SetPath(&json, "parallelism.zero_stage", 1);
  SetPath(&json, "parallelism.ranks_per_node", 1);
  const std::string text = ProblemsOf(json);
  EXPECT_THAT(text, HasSubstr("parallelism.zero_stage = 1: cannot be combined with an elastic "
                              "world size"));
  EXPECT_THAT(text, HasSubstr("parallelism.ranks_per_node = 1: must be 0 with an elastic world "
                              "size"));
}

TEST(JobSpecTest, ParallelismFieldsOutsideTheirRangesNameTheRange) {
  Json json = Minimal();
  SetPath(&json, "parallelism.world_size", 0);
  SetPath(&json, "parallelism.ranks_per_node", -1);
  SetPath(&json, "parallelism.backend", "mpi");
  SetPath(&json, "parallelism.bucket_size_mb", 0);
  SetPath(&json, "parallelism.first_bucket_size_mb", 2000);
  SetPath(&json, "parallelism.grad_accumulation_steps", 0);
  SetPath(&json, "parallelism.zero_stage", 4);
  SetPath(&json, "parallelism.activation_checkpointing", "yes");
  SetPath(&json, "parallelism.collective_timeout_seconds", -5);
  SetPath(&json, "parallelism.find_unused_parameters", 1);
  SetPath(&json, "parallelism.grad_compression", "int8");
  SetPath(&json, "parallelism.all_reduce_algorithm", "tree");
  std::string text = ProblemsOf(json);
  EXPECT_THAT(text, HasSubstr("invalid job spec (12 problems):"));
  EXPECT_THAT(text, HasSubstr("parallelism.world_size = 0: must be in [1, 4096]"));
  EXPECT_THAT(text, HasSubstr("parallelism.ranks_per_node = -1: must be in [0, 4096]"));
  EXPECT_THAT(text, HasSubstr("parallelism.backend = \"mpi\": allowed: one of \"auto\", "
                              "\"gloo\", \"nccl\""));
  EXPECT_THAT(text, HasSubstr("parallelism.bucket_size_mb = 0: must be in (0, 1024]"));
  EXPECT_THAT(text, HasSubstr("parallelism.first_bucket_size_mb = 2000: must be in (0, 1024]"));
  EXPECT_THAT(text, HasSubstr("parallelism.grad_accumulation_steps = 0: must be in [1, 1000000]"));
  EXPECT_THAT(text, HasSubstr("parallelism.zero_stage = 4: must be in [0, 3]"));
  EXPECT_THAT(text,
              HasSubstr("parallelism.activation_checkpointing = \"yes\": expected true or false"));
  EXPECT_THAT(text,
              HasSubstr("parallelism.collective_timeout_seconds = -5: must be in (0, 86400]"));
  EXPECT_THAT(text, HasSubstr("parallelism.find_unused_parameters = 1: expected true or false"));
  EXPECT_THAT(text, HasSubstr("parallelism.grad_compression = \"int8\": allowed: one of \"none\", "
                              "\"bf16\", \"fp16\""));
  EXPECT_THAT(text, HasSubstr("parallelism.all_reduce_algorithm = \"tree\": allowed: one of "
                              "\"auto\", \"ring\", \"ring_chunked\""));

  SetPath(&json, "parallelism.collective_timeout_seconds", "NaN");
  EXPECT_THAT(ProblemsOf(json),
              HasSubstr("parallelism.collective_timeout_seconds = \"NaN\": must be in (0, 86400]"));
}

TEST(JobSpecTest, ChecksRelationsOfParallelismFields) {
  Json json = Minimal();
  SetPath(&json, "parallelism.world_size", 6);
  SetPath(&json, "parallelism.ranks_per_node", 4);
  SetPath(&json, "parallelism.bucket_size_mb", 2);
  SetPath(&json, "parallelism.first_bucket_size_mb", 3);
  SetPath(&json, "parallelism.activation_checkpointing", true);
  SetPath(&json, "parallelism.backend", "nccl");
  SetPath(&json, "parallelism.all_reduce_algorithm", "ring_chunked");
  SetPath(&json, "parallelism.zero_stage", 1);
  SetPath(&json, "parallelism.find_unused_parameters", true);
  std::string text = ProblemsOf(json);
  EXPECT_THAT(text, HasSubstr("invalid job spec (6 problems):"));
  EXPECT_THAT(text, HasSubstr("parallelism.zero_stage = 1: cannot be combined with "
                              "parallelism.find_unused_parameters = true"));
  EXPECT_THAT(text, HasSubstr("parallelism.ranks_per_node = 4: must divide "
                              "parallelism.world_size = 6 (or be 0: all ranks on one node)"));
  EXPECT_THAT(text, HasSubstr("parallelism.first_bucket_size_mb = 3: must be in "
                              "(0, parallelism.bucket_size_mb = 2]"));
  EXPECT_THAT(text, HasSubstr("parallelism.activation_checkpointing = true: needs model.gpt "
                              "(model is mlp)"));
  EXPECT_THAT(text, HasSubstr("parallelism.backend = \"nccl\": needs device \"cuda\" "
                              "(device = \"cpu\"); use \"gloo\" or \"auto\""));
  EXPECT_THAT(text, HasSubstr("parallelism.all_reduce_algorithm = \"ring_chunked\": needs the "
                              "gloo backend (parallelism.backend = \"nccl\""));

  // A field with its own problem is not related to others.
  SetPath(&json, "parallelism.world_size", 5000);
  SetPath(&json, "parallelism.backend", "gloo");
  SetPath(&json, "parallelism.activation_checkpointing", false);
  SetPath(&json, "parallelism.first_bucket_size_mb", 1);
  SetPath(&json, "parallelism.find_unused_parameters", false);
  text = ProblemsOf(json);
  EXPECT_THAT(text, HasSubstr("invalid job spec (1 problem):"));
  EXPECT_THAT(text, HasSubstr("parallelism.world_size = 5000: must be in [1, 4096]"));

  // Dividing and equal values are fine, as is a first bucket as large as the others.
  SetPath(&json, "parallelism.world_size", 8);
  SetPath(&json, "parallelism.first_bucket_size_mb", 2);
  StatusOr<JobSpec> spec = ParseJobSpec(json);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(ResolvedBackend(*spec), "gloo");
}

TEST(JobSpecTest, ParallelismAppearsInToJsonWithItsDefaults) {
  StatusOr<JobSpec> spec = ParseJobSpec(Minimal());
  ASSERT_TRUE(spec.ok()) << spec.status();
  Json out = ToJson(*spec);
  const Json* p = out.Find("parallelism");
  ASSERT_NE(p, nullptr) << out.Dump();
  EXPECT_EQ(*p->Find("world_size"), Json(1));
  EXPECT_EQ(*p->Find("backend"), Json("auto"));
  EXPECT_EQ(*p->Find("bucket_size_mb"), Json(25.0));
  EXPECT_EQ(*p->Find("collective_timeout_seconds"), Json(600.0));
  EXPECT_EQ(*p->Find("grad_compression"), Json("none"));
  EXPECT_EQ(*p->Find("min_world_size"), Json(0));  // 0: world_size
  EXPECT_EQ(*p->Find("pipeline_stages"), Json(1));
  EXPECT_EQ(p->size(), 17u);
  StatusOr<JobSpec> back = ParseJobSpec(out);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(ToJson(*back), out);
}

}  // namespace
}  // namespace trainyard::spec
