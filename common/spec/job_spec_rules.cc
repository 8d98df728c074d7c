// The job spec's rules that relate two fields, or a field and the data it describes.
#include <algorithm>
#include <cctype>
#include <string>

#include "common/spec/job_spec.h"
#include "common/spec/job_spec_internal.h"

namespace trainyard::spec::internal {
namespace {

// A rule's `add(field, value, what)` and `add_field(field, what)`: each appends a problem.
auto ValueAdder(Problems* problems) {
  return [problems](const std::string& field, const std::string& value, const std::string& what) {
    problems->push_back(ValueProblem(field, value, what));
  };
}
auto FieldAdder(Problems* problems) {
  return [problems](const std::string& field, const std::string& what) {
    problems->push_back(FieldProblem(field, what));
  };
}

// Whether none of `paths` has a problem yet, so a rule relating them is worth checking.
bool AllFine(const Problems& problems, std::initializer_list<const char*> paths) {
  for (const char* path : paths) {
    if (HasProblem(problems, path)) return false;
  }
  return true;
}

void CheckBackend(const JobSpec& s, Problems* problems) {
  const ParallelismSpec& p = s.parallelism;
  if (!AllFine(*problems, {"device", "parallelism.backend"})) return;
  if (p.backend == "gloo" && s.device != "cpu") {
    problems->push_back(ValueProblem(
        "parallelism.backend", "\"gloo\"",
        "needs device \"cpu\" (device = " + Quote(s.device) + "); use \"nccl\" or \"auto\""));
  }
  if (p.backend == "nccl" && s.device != "cuda") {
    problems->push_back(ValueProblem(
        "parallelism.backend", "\"nccl\"",
        "needs device \"cuda\" (device = " + Quote(s.device) + "); use \"gloo\" or \"auto\""));
  }
  if (p.all_reduce_algorithm == "ring_chunked" && ResolvedBackend(s) != "gloo" &&
      !HasProblem(*problems, "parallelism.all_reduce_algorithm")) {
    problems->push_back(
        ValueProblem("parallelism.all_reduce_algorithm", "\"ring_chunked\"",
                     "needs the gloo backend (parallelism.backend = " + Quote(p.backend) +
                         " is nccl on device " + Quote(s.device) + "); use \"ring\""));
  }
}

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 63 || !std::islower(static_cast<unsigned char>(name[0]))) {
    return false;
  }
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
  });
}

// The elastic bounds (job.proto, ParallelismSpec.min_world_size).
void CheckElastic(const JobSpec& s, Problems* problems) {
  const ParallelismSpec& p = s.parallelism;
  if (!IsElastic(p) ||
      !AllFine(*problems, {"parallelism.min_world_size", "parallelism.max_world_size",
                           "parallelism.world_size", "parallelism.grad_accumulation_steps"})) {
    return;
  }
  auto add = ValueAdder(problems);
  const int64_t micro_batches = p.world_size * p.grad_accumulation_steps;
  if (MinWorldSize(p) > MaxWorldSize(p)) {
    add("parallelism.min_world_size", std::to_string(MinWorldSize(p)),
        "must be at most parallelism.max_world_size = " + std::to_string(MaxWorldSize(p)));
  } else if (MaxWorldSize(p) > micro_batches) {
    // Every rank takes at least one of the step's micro-batches.
    add("parallelism.max_world_size", std::to_string(MaxWorldSize(p)),
        "must be at most parallelism.world_size x parallelism.grad_accumulation_steps = " +
            std::to_string(micro_batches) +
            " (the micro-batches of a step, shared out among "
            "the ranks)");
  }
  if (p.zero_stage != 0) {
    // A lost rank's optimizer shard would be lost with it.
    add("parallelism.zero_stage", std::to_string(p.zero_stage),
        "cannot be combined with an elastic world size (parallelism.min_world_size/"
        "max_world_size): a lost rank's optimizer shard would go with it; use zero_stage 0");
  }
  if (ResolvedBackend(s) != "gloo" && AllFine(*problems, {"device", "parallelism.backend"})) {
    add("parallelism.min_world_size", std::to_string(MinWorldSize(p)),
        "an elastic world size needs the gloo backend (device \"cpu\"); this job resolves to " +
            Quote(ResolvedBackend(s)));
  }
  if (p.ranks_per_node > 0) {
    add("parallelism.ranks_per_node", std::to_string(p.ranks_per_node),
        "must be 0 with an elastic world size (the number of ranks changes)");
  }
}

// Pipeline parallelism (job.proto, ParallelismSpec.pipeline_stages).
void CheckPipeline(const JobSpec& s, Problems* problems) {
  const ParallelismSpec& p = s.parallelism;
  if (!AllFine(*problems, {"parallelism.pipeline_stages", "parallelism.pipeline_balance",
                           "parallelism.world_size", "model.gpt.n_layer"})) {
    return;
  }
  auto add = ValueAdder(problems);
  const std::string stages = std::to_string(p.pipeline_stages);
  const auto balance = [&] {
    return Json::Array(Json::Items(p.pipeline_balance.begin(), p.pipeline_balance.end())).Dump();
  };
  if (p.pipeline_stages == 1) {
    if (!p.pipeline_balance.empty()) {
      add("parallelism.pipeline_balance", balance(), "needs parallelism.pipeline_stages > 1");
    }
    return;
  }
  if (!s.model.arch.empty() && s.model.arch != "gpt") {
    add("parallelism.pipeline_stages", stages, "needs model.gpt (model is " + s.model.arch + ")");
  } else if (s.model.arch == "gpt" && s.model.gpt.n_layer < p.pipeline_stages) {
    add("parallelism.pipeline_stages", stages,
        "is more than model.gpt.n_layer = " + std::to_string(s.model.gpt.n_layer) +
            " (each stage takes at least one block)");
  }
  if (p.world_size % p.pipeline_stages != 0) {
    add("parallelism.pipeline_stages", stages,
        "must divide parallelism.world_size = " + std::to_string(p.world_size) +
            " (world_size = pipeline_stages x data-parallel replicas)");
  }
  if (p.zero_stage != 0) {
    add("parallelism.pipeline_stages", stages,
        "cannot be combined with parallelism.zero_stage = " + std::to_string(p.zero_stage) +
            "; use zero_stage 0");
  }
  if (s.precision == "fp16") {
    add("parallelism.pipeline_stages", stages,
        "cannot be combined with precision fp16 (its loss scaler would have to skip steps on "
        "every stage at once); use bf16");
  }
  if (IsElastic(p)) {
    add("parallelism.pipeline_stages", stages,
        "needs a fixed world size (parallelism.min_world_size and max_world_size 0)");
  }
  if (p.pipeline_balance.empty()) return;
  int64_t blocks = 0;
  for (int64_t b : p.pipeline_balance) blocks += b;
  if (static_cast<int>(p.pipeline_balance.size()) != p.pipeline_stages) {
    add("parallelism.pipeline_balance", balance(),
        "needs one entry per stage (parallelism.pipeline_stages = " + stages + ")");
  } else if (s.model.arch == "gpt" && blocks != s.model.gpt.n_layer) {
    add("parallelism.pipeline_balance", balance(),
        "must sum to model.gpt.n_layer = " + std::to_string(s.model.gpt.n_layer));
  }
}

// The rules of parallelism (job.proto, ParallelismSpec).
void CheckParallelism(const JobSpec& s, Problems* problems) {
  const ParallelismSpec& p = s.parallelism;
  auto add = ValueAdder(problems);
  if (p.first_bucket_size_mb > p.bucket_size_mb &&
      AllFine(*problems, {"parallelism.first_bucket_size_mb", "parallelism.bucket_size_mb"})) {
    add("parallelism.first_bucket_size_mb", Num(p.first_bucket_size_mb),
        "must be in (0, parallelism.bucket_size_mb = " + Num(p.bucket_size_mb) + "]");
  }
  if (p.ranks_per_node > 0 && p.world_size % p.ranks_per_node != 0 &&
      AllFine(*problems, {"parallelism.ranks_per_node", "parallelism.world_size"})) {
    add("parallelism.ranks_per_node", std::to_string(p.ranks_per_node),
        "must divide parallelism.world_size = " + std::to_string(p.world_size) +
            " (or be 0: all ranks on one node)");
  }
  if (p.activation_checkpointing && !s.model.arch.empty() && s.model.arch != "gpt") {
    add("parallelism.activation_checkpointing", "true",
        "needs model.gpt (model is " + s.model.arch + ")");
  }
  if (p.zero_stage != 0 && p.find_unused_parameters &&
      AllFine(*problems, {"parallelism.zero_stage", "parallelism.find_unused_parameters"})) {
    // A sharded step updates whole chunks; it cannot skip a parameter no rank used, as an
    // unsharded optimizer does, so the two would train differently.
    add("parallelism.zero_stage", std::to_string(p.zero_stage),
        "cannot be combined with parallelism.find_unused_parameters = true (the sharded "
        "optimizer would update parameters no rank used); use zero_stage 0");
  }
  CheckBackend(s, problems);
  CheckElastic(s, problems);
  CheckPipeline(s, problems);
}

// The model's own shapes.
void CheckModel(const JobSpec& s, Problems* problems) {
  auto add = ValueAdder(problems);
  auto add_field = FieldAdder(problems);
  const ModelSpec& m = s.model;
  if (m.arch == "mlp" && m.mlp.sizes.size() < 2 && !HasProblem(*problems, "model.mlp.sizes")) {
    add("model.mlp.sizes", Json::Array(Json::Items(m.mlp.sizes.begin(), m.mlp.sizes.end())).Dump(),
        "needs at least 2 entries (input features, ..., classes)");
  }
  if (m.arch == "resnet" && m.resnet.blocks.size() != 4 &&
      !HasProblem(*problems, "model.resnet.blocks")) {
    add_field("model.resnet.blocks",
              "needs exactly 4 entries, got " + std::to_string(m.resnet.blocks.size()));
  }
  if (m.arch == "gpt" && m.gpt.n_embd % m.gpt.n_head != 0) {
    add("model.gpt.n_head", std::to_string(m.gpt.n_head),
        "must divide model.gpt.n_embd = " + std::to_string(m.gpt.n_embd));
  }
  const LlamaSpec& l = m.llama;
  if (m.arch == "llama" && !HasProblem(*problems, "model.llama")) {
    if (l.n_embd % l.n_head != 0 || (l.n_embd / l.n_head) % 2 != 0) {
      add("model.llama.n_head", std::to_string(l.n_head),
          "must divide model.llama.n_embd = " + std::to_string(l.n_embd) +
              " into heads of an even size (rotary embeddings turn pairs)");
    }
    if (l.n_kv_head > 0 && l.n_head % l.n_kv_head != 0) {
      add("model.llama.n_kv_head", std::to_string(l.n_kv_head),
          "must divide model.llama.n_head = " + std::to_string(l.n_head));
    }
  }
}

// What a graph's input and output must be for the data source (a CSV file's columns and a text's
// vocabulary are checked when the data is loaded).
void CheckGraphFitsData(const JobSpec& s, const CompiledGraph& g, Problems* problems) {
  auto add_field = FieldAdder(problems);
  const std::string& src = s.data.source;
  const std::string input = g.input.ToString() + (g.input.int64 ? " int64" : " float32");
  const ValueShape& out = g.shape_of(g.output);
  // Batch norm in training needs more than one value per channel.
  for (const GraphOp& op : g.ops) {
    if (op.node.op != "batch_norm") continue;
    const std::vector<int64_t>& d = g.shape_of(op.inputs[0]).dims;
    if (static_cast<double>(s.batch_size) * static_cast<double>(d[1] * d[2]) <= 1) {
      add_field("batch_size", std::to_string(s.batch_size) + " leaves " + op.where +
                                  " (batch_norm) one value per channel of " +
                                  g.shape_of(op.inputs[0]).ToString() + "; it needs more");
      break;
    }
  }
  const bool text = src == "text" || src == "tokens";
  if (text && (!g.input.int64 || g.input.dims.size() != 1)) {
    add_field("model.graph.input", "is " + input + "; data." + src +
                                       " feeds int64 token windows (B, T): set dtype int64 "
                                       "and shape [T]");
  } else if (text && (out.dims.size() != 2 || out.dims[0] != g.input.dims[0])) {
    add_field("model.graph.output", "is " + out.ToString() + "; data." + src +
                                        " needs logits for every position: (B, " +
                                        std::to_string(g.input.dims[0]) + ", vocabulary)");
  } else if (src == "csv" && (g.input.int64 || g.input.dims.size() != 1)) {
    add_field("model.graph.input",
              "is " + input + "; data.csv feeds float32 rows (B, features): shape [features]");
  } else if (src == "csv" && out.dims.size() != 1) {
    add_field("model.graph.output", "is " + out.ToString() + "; data.csv needs (B, classes)");
  } else if (src == "fashion_mnist") {
    if (g.input.int64 || (g.input.dims != std::vector<int64_t>{1, 28, 28} &&
                          g.input.dims != std::vector<int64_t>{784})) {
      add_field("model.graph.input", "is " + input +
                                         "; data.fashion_mnist feeds float32 images: shape "
                                         "[1, 28, 28] or [784]");
    } else if (out.dims != std::vector<int64_t>{10}) {
      add_field("model.graph.output",
                "is " + out.ToString() + "; data.fashion_mnist has 10 classes: (B, 10)");
    }
  }
}

// Which models each data source feeds, and what each source requires.
void CheckModelFitsData(const JobSpec& s, Problems* problems) {
  auto add = ValueAdder(problems);
  auto add_field = FieldAdder(problems);
  const ModelSpec& m = s.model;
  const std::string& src = s.data.source;
  if (m.arch == "graph") {
    CompiledGraph g;
    if (!HasProblem(*problems, "model.graph")) CheckGraph(m.graph, problems, &g);
    if (!HasProblem(*problems, "model.graph") && !src.empty()) CheckGraphFitsData(s, g, problems);
  } else if (!m.arch.empty() && !src.empty()) {
    bool text = src == "text" || src == "tokens";
    if (text != (m.arch == "gpt" || m.arch == "llama")) {
      add_field("model." + m.arch,
                "cannot train on data." + src + " (" +
                    (text ? "text data needs model.gpt, model.llama or a graph of token ids"
                          : "model." + m.arch + " needs data.text or data.tokens") +
                    ")");
    } else if (src == "csv" && m.arch != "mlp") {
      add_field("model." + m.arch, "cannot train on data.csv (tabular data needs model.mlp)");
    } else if (src == "fashion_mnist") {
      // 1x28x28 images, 10 classes.
      if (m.arch == "mlp" && m.mlp.sizes.size() >= 2) {
        if (m.mlp.sizes.front() != 784) {
          add("model.mlp.sizes[0]", std::to_string(m.mlp.sizes.front()),
              "must be 784 for data.fashion_mnist (28x28 images)");
        }
        if (m.mlp.sizes.back() != 10) {
          add("model.mlp.sizes[" + std::to_string(m.mlp.sizes.size() - 1) + "]",
              std::to_string(m.mlp.sizes.back()), "must be 10 for data.fashion_mnist (classes)");
        }
      }
      auto need = [&](const char* field, int64_t value, int64_t want) {
        if (value != want) {
          add("model." + m.arch + "." + field, std::to_string(value),
              "must be " + std::to_string(want) + " for data.fashion_mnist");
        }
      };
      if (m.arch == "cnn") {
        need("in_channels", m.cnn.in_channels, 1);
        need("image_size", m.cnn.image_size, 28);
        need("num_classes", m.cnn.num_classes, 10);
      } else if (m.arch == "resnet") {
        need("in_channels", m.resnet.in_channels, 1);
        need("num_classes", m.resnet.num_classes, 10);
      }
    }
  }
  if (src == "text" && s.data.text.path.empty()) add_field("data.text.path", "required");
  if (src == "text" && (s.data.text.vocabulary == "bpe") == s.data.text.tokenizer.empty()) {
    add_field("data.text.tokenizer", s.data.text.tokenizer.empty()
                                         ? "required with vocabulary \"bpe\""
                                         : "needs vocabulary \"bpe\"");
  }
  if (src == "tokens" && s.data.tokens.path.empty()) add_field("data.tokens.path", "required");
  if (src == "csv" && s.data.csv.path.empty()) add_field("data.csv.path", "required");
  if (src == "fashion_mnist" && s.data.fashion_mnist.dir.empty()) {
    add("data.fashion_mnist.dir", "\"\"", "must name a folder");
  }
}

// The optimizer, the schedule and checkpointing.
void CheckTraining(const JobSpec& s, Problems* problems) {
  auto add = ValueAdder(problems);
  auto add_field = FieldAdder(problems);
  const SgdSpec& sgd = s.optimizer.sgd;
  if (s.optimizer.kind == "sgd" && sgd.nesterov && (sgd.momentum <= 0 || sgd.dampening != 0)) {
    add("optimizer.sgd.nesterov", "true",
        "needs momentum > 0 and dampening = 0 (momentum = " + Num(sgd.momentum) +
            ", dampening = " + Num(sgd.dampening) + ")");
  }
  if (s.schedule.kind == "step" && s.schedule.step.step_size == 0) {
    add_field("schedule.step.step_size", "required, in [1, " + std::to_string(kMaxSteps) + "]");
  }
  if (s.schedule.kind == "cosine" && !s.optimizer.kind.empty()) {
    const CosineScheduleSpec& c = s.schedule.cosine;
    double lr = s.optimizer.lr();
    if (c.min_lr > lr) {
      add("schedule.cosine.min_lr", Num(c.min_lr),
          "must be in [0, optimizer." + s.optimizer.kind + ".lr = " + Num(lr) + "]");
    }
    if (c.total_steps > 0 && c.total_steps <= c.warmup_steps) {
      add("schedule.cosine.total_steps", std::to_string(c.total_steps),
          "must be greater than warmup_steps = " + std::to_string(c.warmup_steps));
    }
    if (c.total_steps == 0 && s.steps > 0 && s.steps <= c.warmup_steps) {
      add("schedule.cosine.warmup_steps", std::to_string(c.warmup_steps),
          "must be less than steps = " + std::to_string(s.steps));
    }
  }
  if (s.checkpoint.every_steps > 0 && s.checkpoint.dir.empty()) {
    add("checkpoint.every_steps", std::to_string(s.checkpoint.every_steps), "needs checkpoint.dir");
  }
  if (!s.checkpoint.resume_from.empty() && !s.checkpoint.init_from.empty()) {
    add("checkpoint.resume_from", "\"" + s.checkpoint.resume_from + "\"",
        "set either resume_from (continue that run's state) or init_from (its weights only, from "
        "step 0), not both");
  }
}

}  // namespace

void CheckRelations(JobSpec& s, Problems* problems) {
  auto add = ValueAdder(problems);
  if (!ValidName(s.name)) {
    add("name", Quote(s.name),
        "must be 1 to 63 characters of a-z, 0-9 and '-', starting with a letter");
  }
  if (s.steps > 0 && s.epochs > 0) {
    problems->push_back({"steps", "set only one of steps and epochs",
                         "steps = " + std::to_string(s.steps) +
                             " and epochs = " + std::to_string(s.epochs) + ": set only one"});
  }
  if (s.steps == 0 && s.epochs == 0) s.epochs = 1;
  CheckModel(s, problems);
  CheckModelFitsData(s, problems);
  CheckTraining(s, problems);
  CheckParallelism(s, problems);
}

}  // namespace trainyard::spec::internal
