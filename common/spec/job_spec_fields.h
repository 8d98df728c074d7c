// The job spec's fields, one visitor template per message: each field's name, its kind, its
// range or allowed values, and where the struct of job_spec.h keeps it (whose initialisers are
// the defaults). The Reader and the Writer (job_spec.cc) and the Describer (job_spec_schema.cc)
// walk these, so a field is listed once in C++; tests/common/spec/job_spec_schema_test.cc
// proves the names, ranges, allowed values and defaults equal to the fields and options of
// proto/trainyard/v1/job.proto. Internal to ty_spec.
//
// A visitor has, for a field `name` of the message it visits:
//   Int(name, int64_t* or int*, lo, hi)               an integer in [lo, hi]
//   Uint64(name, uint64_t*)                           any uint64
//   Double(name, double*, lo, hi, hi_open = false)    finite, in [lo, hi], or [lo, hi) when
//                                                     hi_open; hi = kInf: any finite >= lo
//   DoubleAbove(name, double*, lo, hi)                finite, in (lo, hi]
//   Bool(name, bool*), String(name, std::string*)
//   Choice(name, std::string*, {values...})           one of the values
//   IntList(name, std::vector<int64_t>*, lo, hi)      each entry in [lo, hi]
//   StringList(name, std::vector<std::string>*)       a list of strings
//   MessageList(name, std::vector<T>*, visit)         a list of messages, each visited by
//                                                     visit(V&, T&)
//   Message(name, selected, visit)                    a nested message, visited by `visit`;
//                                                     `selected`: not an unset oneof member
//   OneOf(std::string*, {members...}, required)       which member of the oneof is set
#pragma once

#include <cstdint>
#include <limits>

#include "common/spec/job_spec.h"
#include "common/spec/job_spec_internal.h"

namespace trainyard::spec::internal {

inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline constexpr int64_t kMaxBatch = 1 << 20;
inline constexpr int64_t kMaxWidth = 1 << 20;

template <typename V>
void VisitMlp(V& v, MlpSpec& s) {
  v.IntList("sizes", &s.sizes, 1, kMaxWidth);
  v.Choice("activation", &s.activation, {"relu", "gelu", "tanh"});
  v.Double("dropout", &s.dropout, 0, 1, /*hi_open=*/true);
}

template <typename V>
void VisitCnn(V& v, CnnSpec& s) {
  v.Int("in_channels", &s.in_channels, 1, 4096);
  v.Int("image_size", &s.image_size, 4, 4096);
  v.Int("num_classes", &s.num_classes, 1, kMaxWidth);
  v.Int("channels1", &s.channels1, 1, 4096);
  v.Int("channels2", &s.channels2, 1, 4096);
  v.Int("hidden", &s.hidden, 1, kMaxWidth);
  v.Double("dropout", &s.dropout, 0, 1, /*hi_open=*/true);
}

template <typename V>
void VisitResNet(V& v, ResNetSpec& s) {
  v.Int("in_channels", &s.in_channels, 1, 4096);
  v.Int("num_classes", &s.num_classes, 1, kMaxWidth);
  v.Int("base_width", &s.base_width, 1, 4096);
  v.IntList("blocks", &s.blocks, 1, 64);
}

template <typename V>
void VisitGpt(V& v, GptSpec& s) {
  v.Int("vocab_size", &s.vocab_size, 0, 65536);
  v.Int("context", &s.context, 1, 65536);
  v.Int("n_layer", &s.n_layer, 1, 1024);
  v.Int("n_head", &s.n_head, 1, 1024);
  v.Int("n_embd", &s.n_embd, 1, 65536);
  v.Double("dropout", &s.dropout, 0, 1, /*hi_open=*/true);
  v.Bool("bias", &s.bias);
}

template <typename V>
void VisitGraphNode(V& v, GraphNodeSpec& s) {
  v.String("name", &s.name);
  v.String("op", &s.op);
  v.StringList("inputs", &s.inputs);
  v.String("block", &s.block);
  v.Int("repeat", &s.repeat, 1, 1024);
  v.Int("out_features", &s.out_features, 0, kMaxWidth);
  v.Int("num_embeddings", &s.num_embeddings, 0, kMaxWidth);
  v.Int("embedding_dim", &s.embedding_dim, 0, kMaxWidth);
  v.Int("out_channels", &s.out_channels, 0, 65536);
  v.Int("kernel_size", &s.kernel_size, 0, 1024);
  v.Int("stride", &s.stride, 0, 1024);
  v.Int("padding", &s.padding, 0, 1024);
  v.Int("heads", &s.heads, 0, 1024);
  v.Int("kv_heads", &s.kv_heads, 0, 1024);
  v.Bool("causal", &s.causal);
  v.Bool("bias", &s.bias);
  v.DoubleAbove("eps", &s.eps, 0, 1);
  v.Double("p", &s.p, 0, 1, /*hi_open=*/true);
  v.Int("dim", &s.dim, -8, 7);
  v.IntList("shape", &s.shape, -1, kMaxWidth);
  v.IntList("dims", &s.dims, -8, 7);
  v.String("share", &s.share);
  v.Double("init_std", &s.init_std, 0, 1);
  v.DoubleAbove("theta", &s.theta, 0, 1e9);
  v.Choice("approximate", &s.approximate, {"none", "tanh"});
}

template <typename V>
void VisitLlama(V& v, LlamaSpec& s) {
  v.Int("vocab_size", &s.vocab_size, 0, 65536);
  v.Int("context", &s.context, 1, 65536);
  v.Int("n_layer", &s.n_layer, 1, 1024);
  v.Int("n_head", &s.n_head, 1, 1024);
  v.Int("n_kv_head", &s.n_kv_head, 0, 1024);
  v.Int("n_embd", &s.n_embd, 1, 65536);
  v.Int("intermediate_size", &s.intermediate_size, 0, kMaxWidth);
  v.DoubleAbove("rope_theta", &s.rope_theta, 0, 1e9);
  v.DoubleAbove("rms_norm_eps", &s.rms_norm_eps, 0, 1);
  v.Bool("tie_word_embeddings", &s.tie_word_embeddings);
}

template <typename V>
void VisitGraph(V& v, GraphSpec& s) {
  v.Message("input", true, [&](V& m) {
    m.String("name", &s.input.name);
    m.Choice("dtype", &s.input.dtype, {"float32", "int64"});
    m.IntList("shape", &s.input.shape, 1, kMaxWidth);
  });
  v.MessageList("blocks", &s.blocks, [](V& m, GraphBlockSpec& b) {
    m.String("name", &b.name);
    m.String("input", &b.input);
    m.MessageList("nodes", &b.nodes, [](V& n, GraphNodeSpec& node) { VisitGraphNode(n, node); });
    m.String("output", &b.output);
  });
  v.MessageList("nodes", &s.nodes, [](V& n, GraphNodeSpec& node) { VisitGraphNode(n, node); });
  v.String("output", &s.output);
}

template <typename V>
void VisitModel(V& v, ModelSpec& s) {
  v.OneOf(&s.arch, {"mlp", "cnn", "resnet", "gpt", "llama", "graph"}, /*required=*/true);
  v.Message("mlp", s.arch == "mlp", [&](V& m) { VisitMlp(m, s.mlp); });
  v.Message("cnn", s.arch == "cnn", [&](V& m) { VisitCnn(m, s.cnn); });
  v.Message("resnet", s.arch == "resnet", [&](V& m) { VisitResNet(m, s.resnet); });
  v.Message("gpt", s.arch == "gpt", [&](V& m) { VisitGpt(m, s.gpt); });
  v.Message("llama", s.arch == "llama", [&](V& m) { VisitLlama(m, s.llama); });
  v.Message("graph", s.arch == "graph", [&](V& m) { VisitGraph(m, s.graph); });
}

template <typename V>
void VisitData(V& v, DataSpec& s) {
  v.OneOf(&s.source, {"fashion_mnist", "text", "tokens", "csv"}, /*required=*/true);
  v.Message("fashion_mnist", s.source == "fashion_mnist", [&](V& m) {
    m.String("dir", &s.fashion_mnist.dir);
    m.Bool("normalize", &s.fashion_mnist.normalize);
    m.Int("limit", &s.fashion_mnist.limit, 0, 60000);
  });
  v.Message("text", s.source == "text", [&](V& m) {
    m.String("path", &s.text.path);
    m.Choice("vocabulary", &s.text.vocabulary, {"char", "byte", "bpe"});
    m.String("tokenizer", &s.text.tokenizer);
    m.Double("eval_fraction", &s.text.eval_fraction, 0, 0.5);
  });
  v.Message("tokens", s.source == "tokens", [&](V& m) {
    m.String("path", &s.tokens.path);
    m.Double("eval_fraction", &s.tokens.eval_fraction, 0, 0.5);
  });
  v.Message("csv", s.source == "csv", [&](V& m) {
    m.String("path", &s.csv.path);
    m.Bool("header", &s.csv.header);
    m.Int("label_column", &s.csv.label_column, -65536, 65535);
    m.Choice("delimiter", &s.csv.delimiter, {",", ";", "\t", " "});
    m.Double("eval_fraction", &s.csv.eval_fraction, 0, 0.5);
  });
  v.Bool("shuffle", &s.shuffle);
  v.Int("num_workers", &s.num_workers, 0, 64);
  v.Int("prefetch", &s.prefetch, 1, 64);
  v.Bool("drop_last", &s.drop_last);
}

template <typename V>
void VisitAdam(V& v, AdamSpec& s) {
  v.Double("lr", &s.lr, 0, kInf);
  v.Double("beta1", &s.beta1, 0, 1, /*hi_open=*/true);
  v.Double("beta2", &s.beta2, 0, 1, /*hi_open=*/true);
  v.Double("eps", &s.eps, 0, kInf);
  v.Double("weight_decay", &s.weight_decay, 0, kInf);
}

template <typename V>
void VisitOptimizer(V& v, OptimizerSpec& s) {
  v.OneOf(&s.kind, {"sgd", "adam", "adamw"}, /*required=*/true);
  v.Message("sgd", s.kind == "sgd", [&](V& m) {
    m.Double("lr", &s.sgd.lr, 0, kInf);
    m.Double("momentum", &s.sgd.momentum, 0, 1);
    m.Double("dampening", &s.sgd.dampening, 0, 1);
    m.Bool("nesterov", &s.sgd.nesterov);
    m.Double("weight_decay", &s.sgd.weight_decay, 0, kInf);
  });
  v.Message("adam", s.kind == "adam", [&](V& m) { VisitAdam(m, s.adam); });
  v.Message("adamw", s.kind == "adamw", [&](V& m) { VisitAdam(m, s.adamw); });
}

template <typename V>
void VisitSchedule(V& v, ScheduleSpec& s) {
  v.OneOf(&s.kind, {"constant", "step", "cosine"}, /*required=*/false);
  v.Message("constant", s.kind == "constant", [](V&) {});
  v.Message("step", s.kind == "step", [&](V& m) {
    m.Int("step_size", &s.step.step_size, 1, kMaxSteps);
    m.Double("gamma", &s.step.gamma, 0, kInf);
  });
  v.Message("cosine", s.kind == "cosine", [&](V& m) {
    m.Int("warmup_steps", &s.cosine.warmup_steps, 0, kMaxSteps);
    m.Int("total_steps", &s.cosine.total_steps, 0, kMaxSteps);
    m.Double("min_lr", &s.cosine.min_lr, 0, kInf);
  });
}

template <typename V>
void VisitParallelism(V& v, ParallelismSpec& s) {
  v.Int("world_size", &s.world_size, 1, kMaxWorldSize);
  v.Int("ranks_per_node", &s.ranks_per_node, 0, kMaxWorldSize);
  v.Choice("backend", &s.backend, {"auto", "gloo", "nccl"});
  v.DoubleAbove("bucket_size_mb", &s.bucket_size_mb, 0, 1024);
  v.DoubleAbove("first_bucket_size_mb", &s.first_bucket_size_mb, 0, 1024);
  v.Int("grad_accumulation_steps", &s.grad_accumulation_steps, 1, 1'000'000);
  v.Int("zero_stage", &s.zero_stage, 0, 3);
  v.Bool("activation_checkpointing", &s.activation_checkpointing);
  v.DoubleAbove("collective_timeout_seconds", &s.collective_timeout_seconds, 0, 86400);
  v.Bool("find_unused_parameters", &s.find_unused_parameters);
  v.Choice("grad_compression", &s.grad_compression, {"none", "bf16", "fp16"});
  v.Choice("all_reduce_algorithm", &s.all_reduce_algorithm, {"auto", "ring", "ring_chunked"});
  v.Int("min_world_size", &s.min_world_size, 0, kMaxWorldSize);
  v.Int("max_world_size", &s.max_world_size, 0, kMaxWorldSize);
  v.Int("pipeline_stages", &s.pipeline_stages, 1, 64);
  v.Choice("pipeline_schedule", &s.pipeline_schedule, {"1f1b", "gpipe"});
  v.IntList("pipeline_balance", &s.pipeline_balance, 1, 1024);
}

template <typename V>
void VisitJob(V& v, JobSpec& s) {
  v.String("name", &s.name);
  v.Message("model", true, [&](V& m) { VisitModel(m, s.model); });
  v.Message("data", true, [&](V& m) { VisitData(m, s.data); });
  v.Message("optimizer", true, [&](V& m) { VisitOptimizer(m, s.optimizer); });
  v.Message("schedule", true, [&](V& m) { VisitSchedule(m, s.schedule); });
  v.Int("batch_size", &s.batch_size, 1, kMaxBatch);
  v.Int("steps", &s.steps, 1, kMaxSteps);
  v.Int("epochs", &s.epochs, 1, 1'000'000);
  v.Message("eval", true, [&](V& m) {
    m.Int("every_steps", &s.eval.every_steps, 0, kMaxSteps);
    m.Int("max_batches", &s.eval.max_batches, 0, kMaxSteps);
    m.Int("batch_size", &s.eval.batch_size, 0, kMaxBatch);
  });
  v.Choice("precision", &s.precision, {"fp32", "bf16", "fp16"});
  v.Choice("device", &s.device, {"cpu", "cuda"});
  v.Uint64("seed", &s.seed);
  v.Message("checkpoint", true, [&](V& m) {
    m.String("dir", &s.checkpoint.dir);
    m.Int("every_steps", &s.checkpoint.every_steps, 0, kMaxSteps);
    m.Int("keep_last", &s.checkpoint.keep_last, 0, 1'000'000);
    m.Bool("resume", &s.checkpoint.resume);
    m.String("init_from", &s.checkpoint.init_from);
    m.String("resume_from", &s.checkpoint.resume_from);
    m.Bool("async", &s.checkpoint.async);
  });
  v.Double("grad_clip_norm", &s.grad_clip_norm, 0, kInf);
  v.Int("num_threads", &s.num_threads, 0, 1024);
  v.Message("parallelism", true, [&](V& m) { VisitParallelism(m, s.parallelism); });
  v.Message("fault_tolerance", true, [&](V& m) {
    m.Int("max_restarts", &s.fault_tolerance.max_restarts, 0, 1000);
    m.DoubleAbove("hang_timeout_seconds", &s.fault_tolerance.hang_timeout_seconds, 0, 86400);
    m.DoubleAbove("straggler_factor", &s.fault_tolerance.straggler_factor, 1, 1000);
    m.Int("straggler_window_steps", &s.fault_tolerance.straggler_window_steps, 1, 100000);
  });
  v.Int("priority", &s.priority, -1000, 1000);
}

}  // namespace trainyard::spec::internal
