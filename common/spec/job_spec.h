// JobSpec: the C++ form of trainyard.v1.JobSpec (proto/trainyard/v1/job.proto), read from the
// proto's JSON mapping without protobuf, so the engine and the trainer build with a C++
// compiler alone (docs/design/005-job-spec-and-trainer.md). job.proto states each field's
// default, range and allowed values in its options; the initialisers below are the defaults
// and job_spec_fields.h the ranges and values, and tests/common/spec/job_spec_schema_test.cc
// proves both equal to the .proto's, field by field.
//
//   ASSIGN_OR_RETURN(Json json, Json::Parse(text));        // or YAML turned into Json
//   ASSIGN_OR_RETURN(spec::JobSpec spec, spec::ParseJobSpec(json));
//   spec.model.arch == "gpt"; spec.model.gpt.n_head == 4; ...
//
// A oneof is a string naming the member that was set ("" when none) beside a struct for every
// member; only the named one is meaningful.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/json.h"
#include "common/status.h"

namespace trainyard::spec {

struct MlpSpec {
  std::vector<int64_t> sizes;
  std::string activation = "relu";
  double dropout = 0;
};

struct CnnSpec {
  int64_t in_channels = 1;
  int64_t image_size = 28;
  int64_t num_classes = 10;
  int64_t channels1 = 32;
  int64_t channels2 = 64;
  int64_t hidden = 128;
  double dropout = 0.25;
};

struct ResNetSpec {
  int64_t in_channels = 3;
  int64_t num_classes = 10;
  int64_t base_width = 64;
  std::vector<int64_t> blocks = {2, 2, 2, 2};
};

struct GptSpec {
  int64_t vocab_size = 0;  // 0: the data's vocabulary size
  int64_t context = 128;
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 256;
  double dropout = 0;
  bool bias = true;
};

// A LLaMA-style decoder (Hugging Face's LlamaForCausalLM, names and all), built as a graph
// (LlamaGraph in model_graph.h).
struct LlamaSpec {
  int64_t vocab_size = 0;  // 0: the data's vocabulary size
  int64_t context = 128;
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_kv_head = 0;  // 0: n_head
  int64_t n_embd = 256;
  int64_t intermediate_size = 0;  // 0: the multiple of 8 nearest 8/3 n_embd above
  double rope_theta = 10000;
  double rms_norm_eps = 1e-5;
  bool tie_word_embeddings = false;
};

// A model written as a graph of named nodes (docs/design/011-model-graphs.md; checked and shaped by
// model_graph.h). Every option is one struct member; an op reads the ones it uses.
struct GraphNodeSpec {
  std::string name;
  std::string op;
  std::vector<std::string> inputs;
  std::string block;   // op "block": the block it runs
  int64_t repeat = 1;  // op "block": how many times, chained
  int64_t out_features = 0;
  int64_t num_embeddings = 0;
  int64_t embedding_dim = 0;
  int64_t out_channels = 0;
  int64_t kernel_size = 0;
  int64_t stride = 0;
  int64_t padding = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  bool causal = false;
  bool bias = true;
  double eps = 1e-5;
  double p = 0;
  int64_t dim = -1;
  std::vector<int64_t> shape;
  std::vector<int64_t> dims;
  std::string share;
  double init_std = 0;
  double theta = 10000;
  std::string approximate = "none";
};

struct GraphBlockSpec {
  std::string name;
  std::string input = "x";
  std::vector<GraphNodeSpec> nodes;
  std::string output;  // "": the last node
};

struct GraphInputSpec {
  std::string name = "input";
  std::string dtype = "float32";
  std::vector<int64_t> shape;  // one sample's, without the batch dimension
};

struct GraphSpec {
  GraphInputSpec input;
  std::vector<GraphBlockSpec> blocks;
  std::vector<GraphNodeSpec> nodes;
  std::string output;  // "": the last node
};

struct ModelSpec {
  std::string arch;  // "mlp", "cnn", "resnet", "gpt", "llama" or "graph"
  MlpSpec mlp;
  CnnSpec cnn;
  ResNetSpec resnet;
  GptSpec gpt;
  LlamaSpec llama;
  GraphSpec graph;
};

inline constexpr const char* kDefaultFashionMnistDir = "/usr/share/datasets/fashion-mnist";

struct FashionMnistData {
  std::string dir = kDefaultFashionMnistDir;
  bool normalize = true;
  int64_t limit = 0;
};

struct TextData {
  std::string path;
  std::string vocabulary = "char";
  std::string tokenizer;  // vocabulary "bpe": a tokenizer.json
  double eval_fraction = 0.1;
};

struct TokenData {
  std::string path;
  double eval_fraction = 0.1;
};

struct CsvData {
  std::string path;
  bool header = false;
  int64_t label_column = -1;
  std::string delimiter = ",";
  double eval_fraction = 0.1;
};

struct DataSpec {
  std::string source;  // "fashion_mnist", "text", "tokens" or "csv"
  FashionMnistData fashion_mnist;
  TextData text;
  TokenData tokens;
  CsvData csv;
  bool shuffle = true;
  int num_workers = 1;
  int prefetch = 2;
  bool drop_last = false;
};

struct SgdSpec {
  double lr = 0.01;
  double momentum = 0;
  double dampening = 0;
  bool nesterov = false;
  double weight_decay = 0;
};

struct AdamSpec {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;  // adamw's default is 0.01 (OptimizerSpec::adamw)
};

struct OptimizerSpec {
  std::string kind;  // "sgd", "adam" or "adamw"
  SgdSpec sgd;
  AdamSpec adam;
  AdamSpec adamw = {1e-3, 0.9, 0.999, 1e-8, 0.01};  // AdamWSpec in job.proto
  // The selected optimizer's learning rate.
  double lr() const;
};

struct StepScheduleSpec {
  int64_t step_size = 0;
  double gamma = 0.1;
};

struct CosineScheduleSpec {
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;  // 0: the run's last step
  double min_lr = 0;
};

struct ScheduleSpec {
  std::string kind = "constant";  // "constant", "step" or "cosine"
  StepScheduleSpec step;
  CosineScheduleSpec cosine;
};

struct EvalSpec {
  int64_t every_steps = 0;
  int64_t max_batches = 0;
  int64_t batch_size = 0;  // 0: the training batch size
};

struct CheckpointSpec {
  std::string dir;
  int64_t every_steps = 0;
  int keep_last = 3;
  bool resume = true;
  std::string init_from;
  std::string resume_from;  // a step directory of another run to continue (Note [Run identity])
  bool async = true;        // written in the background (worker/trainer/async_checkpoint.h)
};

// parallelism.world_size's bound: the most ranks a job, or `trainyard train --nproc`, has.
inline constexpr int kMaxWorldSize = 4096;

// Data parallelism across processes (ranks); see ParallelismSpec in job.proto.
struct ParallelismSpec {
  int world_size = 1;                         // ranks in all
  int ranks_per_node = 0;                     // 0: any number per node; else divides world_size
  std::string backend = "auto";               // auto (nccl on cuda, else gloo), gloo or nccl
  double bucket_size_mb = 25;                 // gradient bucket size, MiB
  double first_bucket_size_mb = 1;            // the first (last-layer) bucket, MiB
  int64_t grad_accumulation_steps = 1;        // micro-batches per optimizer step
  int zero_stage = 0;                         // 0 plain; sharded: 1 optimizer, 2 grads, 3 weights
  bool activation_checkpointing = false;      // recompute each GPT block in backward
  double collective_timeout_seconds = 600;    // bound on every collective and on rendezvous
  bool find_unused_parameters = false;        // allow parameters that get no gradient in a step
  std::string grad_compression = "none";      // dtype of the gradient all-reduce
  std::string all_reduce_algorithm = "auto";  // auto, ring or ring_chunked (gloo)
  int min_world_size = 0;                     // elastic bounds; 0: world_size (MinWorldSize)
  int max_world_size = 0;
  int pipeline_stages = 1;                 // P; 1: no pipeline (world_size = P x D)
  std::string pipeline_schedule = "1f1b";  // 1f1b or gpipe
  std::vector<int64_t> pipeline_balance;   // GPT blocks per stage; empty: by parameter count
};

// The elastic bounds of job.proto's ParallelismSpec, 0 resolved to world_size.
int MinWorldSize(const ParallelismSpec& p);
int MaxWorldSize(const ParallelismSpec& p);
// Whether the job's world size may change while it runs (either bound differs from world_size).
bool IsElastic(const ParallelismSpec& p);

struct FaultToleranceSpec {
  int max_restarts = 3;
  double hang_timeout_seconds = 60;
  double straggler_factor = 2;
  int straggler_window_steps = 20;
};

struct JobSpec {
  std::string name = "job";
  ModelSpec model;
  DataSpec data;
  OptimizerSpec optimizer;
  ScheduleSpec schedule;
  // Samples per rank per micro-batch. One optimizer step takes the global batch of
  // batch_size x parallelism.grad_accumulation_steps x parallelism.world_size samples.
  int64_t batch_size = 32;
  int64_t steps = 0;   // set at most one of steps and epochs;
  int64_t epochs = 0;  // ParseJobSpec makes epochs 1 when neither is set
  EvalSpec eval;
  std::string precision = "fp32";  // fp32, bf16 or fp16: the compute dtype of matrix products
  std::string device = "cpu";      // cpu or cuda
  uint64_t seed = 0;
  CheckpointSpec checkpoint;
  double grad_clip_norm = 0;
  int num_threads = 0;  // per rank
  ParallelismSpec parallelism;
  FaultToleranceSpec fault_tolerance;  // the service's supervision; trainyard train ignores it
  int priority = 0;                    // higher first
};

// A model graph alone (what model.graph holds), read and checked as ParseJobSpec reads and
// checks it, problems named by their path under model.graph.
StatusOr<GraphSpec> ParseGraphSpec(const Json& json);

// The length of a model's token windows: model.gpt.context, or a graph's int64 input's only
// dimension; 0 for models of images or tables.
int64_t SequenceLength(const ModelSpec& model);

// parallelism.backend with "auto" resolved: "nccl" when device is "cuda", else "gloo".
std::string ResolvedBackend(const JobSpec& spec);

// Reads and validates a spec from the proto JSON mapping. InvalidArgument lists every problem,
// one per line, each naming the field path, the value and what is allowed, e.g.
//   invalid job spec (2 problems):
//     batch_size = 0: must be in [1, 1048576]
//     model.gpt.n_head = 5: must divide model.gpt.n_embd = 256
// Unknown fields are problems too (with the allowed names, and a suggestion for a typo).
StatusOr<JobSpec> ParseJobSpec(const Json& json);

// The spec with every field written out (defaults included), in the JSON mapping with the
// .proto's field names: ParseJobSpec(ToJson(spec)) gives `spec` back.
Json ToJson(const JobSpec& spec);

}  // namespace trainyard::spec
