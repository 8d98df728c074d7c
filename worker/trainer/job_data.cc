#include "worker/trainer/job_data.h"

#include <numeric>

#include "common/spec/model_graph.h"
#include "worker/data/bpe.h"
#include "worker/data/csv.h"
#include "worker/data/file_io.h"
#include "worker/data/idx.h"
#include "worker/data/sampler.h"
#include "worker/data/token_dataset.h"
#include "worker/data/token_file.h"

namespace trainyard::trainer {
namespace {

// Prefixes an error with the spec field it came from.
Status InField(const std::string& field, const Status& status) {
  if (status.ok()) return status;
  return Status(status.code(), field + ": " + std::string(status.message()));
}

std::vector<int64_t> Range(int64_t n) {
  std::vector<int64_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

StatusOr<JobData> LoadFashionMnist(const spec::JobSpec& spec) {
  const spec::FashionMnistData& f = spec.data.fashion_mnist;
  data::IdxOptions options;
  options.normalize = f.normalize;
  JobData out;
  for (const char* split : {"train", "test"}) {
    StatusOr<data::IdxPaths> paths = data::FashionMnistPaths(split, f.dir);
    if (!paths.ok()) return InField("data.fashion_mnist.dir", paths.status());
    StatusOr<data::Dataset> set = data::LoadIdx(paths->images, paths->labels, options);
    if (!set.ok()) {
      return InField("data.fashion_mnist",
                     Status(set.status().code(), std::string(set.status().message()) +
                                                     " (apt-get install dataset-fashion-mnist)"));
    }
    auto shared = std::make_shared<const data::Dataset>(std::move(set).value());
    if (std::string(split) == "train") {
      out.train = shared;
    } else {
      out.eval = shared;
    }
  }
  if (f.limit > 0 && f.limit < out.train->size()) {
    out.train = std::make_shared<const data::Subset>(out.train, Range(f.limit));
  }
  out.num_classes = 10;
  out.description = "Fashion-MNIST: " + std::to_string(out.train->size()) + " train, " +
                    std::to_string(out.eval->size()) + " test images";
  return out;
}

// The field that sets the model's window length.
std::string ContextField(const spec::ModelSpec& m) {
  return m.arch == "graph" ? "model.graph.input.shape[0]" : "model." + m.arch + ".context";
}

// Windows of the model's context of tokens over the training and held-out parts of a token
// stream.
StatusOr<JobData> TokenWindows(const std::string& field, std::vector<uint16_t> tokens,
                               double eval_fraction, const spec::ModelSpec& model) {
  const int64_t context = spec::SequenceLength(model);
  ASSIGN_OR_RETURN(data::TokenSplit split, data::SplitTokens(tokens, eval_fraction));
  JobData out;
  out.tokens_per_sample = context;
  StatusOr<data::TokenDataset> train = data::TokenDataset::Create(std::move(split.train), context);
  if (!train.ok()) {
    return InvalidArgumentError(field + ": " + std::to_string(tokens.size()) +
                                " tokens leave too few for training windows of " +
                                ContextField(model) + " = " + std::to_string(context) + " tokens");
  }
  out.train = std::make_shared<const data::TokenDataset>(std::move(train).value());
  if (!split.eval.empty()) {
    const int64_t held_out = static_cast<int64_t>(split.eval.size());
    StatusOr<data::TokenDataset> eval = data::TokenDataset::Create(std::move(split.eval), context);
    if (!eval.ok()) {
      return InvalidArgumentError(field + ": the held-out part (" + std::to_string(held_out) +
                                  " tokens) is shorter than one window of " + ContextField(model) +
                                  " + 1 = " + std::to_string(context + 1) +
                                  " tokens; raise eval_fraction or set it to 0");
    }
    out.eval = std::make_shared<const data::TokenDataset>(std::move(eval).value());
  }
  return out;
}

// Text through a byte-level BPE tokenizer.json: its ids never change, so nothing is saved.
StatusOr<JobData> LoadBpeText(const spec::JobSpec& spec, const std::string& text) {
  const spec::TextData& t = spec.data.text;
  StatusOr<data::BpeTokenizer> bpe = data::BpeTokenizer::Load(t.tokenizer);
  if (!bpe.ok()) return InField("data.text.tokenizer", bpe.status());
  StatusOr<std::vector<uint16_t>> tokens = bpe->Encode(text);
  if (!tokens.ok()) {
    return InField("data.text.tokenizer (" + t.tokenizer + ") on " + t.path, tokens.status());
  }
  const size_t count = tokens->size();
  ASSIGN_OR_RETURN(JobData out, TokenWindows("data.text.path (" + t.path + ")", std::move(*tokens),
                                             t.eval_fraction, spec.model));
  out.num_classes = bpe->vocab_size();
  out.description = t.path + ": " + std::to_string(text.size()) + " bytes, " +
                    std::to_string(count) + " BPE tokens of " + std::to_string(out.num_classes);
  return out;
}

StatusOr<JobData> LoadText(const spec::JobSpec& spec, const data::Vocabulary* saved) {
  const spec::TextData& t = spec.data.text;
  StatusOr<std::string> text = data::ReadFileBytes(t.path);
  if (!text.ok()) return InField("data.text.path", text.status());
  if (text->empty()) return InvalidArgumentError("data.text.path: " + t.path + " is empty");
  if (t.vocabulary == "bpe") return LoadBpeText(spec, *text);
  data::Vocabulary vocabulary = data::Vocabulary::Bytes();
  if (saved != nullptr) {
    vocabulary = *saved;
  } else if (t.vocabulary == "char") {
    ASSIGN_OR_RETURN(vocabulary, data::Vocabulary::FromText(*text));
  }
  StatusOr<std::vector<uint16_t>> tokens = vocabulary.Encode(*text);
  if (!tokens.ok()) {
    return InvalidArgumentError("data.text.path: " + t.path +
                                " does not fit the vocabulary saved beside the checkpoints: " +
                                std::string(tokens.status().message()));
  }
  const size_t count = tokens->size();
  ASSIGN_OR_RETURN(JobData out, TokenWindows("data.text.path (" + t.path + ")", std::move(*tokens),
                                             t.eval_fraction, spec.model));
  out.num_classes = vocabulary.size();
  out.vocabulary = std::move(vocabulary);
  out.description = t.path + ": " + std::to_string(count) + " characters, vocabulary of " +
                    std::to_string(out.num_classes) + " tokens";
  return out;
}

StatusOr<JobData> LoadTokens(const spec::JobSpec& spec) {
  const spec::TokenData& t = spec.data.tokens;
  StatusOr<data::TokenFile> file = data::ReadTokenFile(t.path);
  if (!file.ok()) return InField("data.tokens.path", file.status());
  const size_t count = file->tokens.size();
  ASSIGN_OR_RETURN(JobData out, TokenWindows("data.tokens.path (" + t.path + ")",
                                             std::move(file->tokens), t.eval_fraction, spec.model));
  out.num_classes = file->vocab_size;
  out.description = t.path + ": " + std::to_string(count) + " tokens, vocabulary of " +
                    std::to_string(out.num_classes);
  return out;
}

StatusOr<JobData> LoadCsvData(const spec::JobSpec& spec) {
  const spec::CsvData& c = spec.data.csv;
  data::CsvOptions options;
  options.header = c.header;
  options.label_column = c.label_column;
  options.delimiter = c.delimiter[0];
  StatusOr<data::Dataset> table = data::LoadCsv(c.path, options);
  if (!table.ok()) return InField("data.csv.path", table.status());
  // The model's input features and classes, and the fields that set them.
  const std::vector<int64_t>& sizes = spec.model.mlp.sizes;
  int64_t want = sizes.empty() ? 0 : sizes.front(), classes = sizes.empty() ? 0 : sizes.back();
  std::string want_field = "model.mlp.sizes[0]",
              classes_field = "model.mlp.sizes[" + std::to_string(sizes.size() - 1) + "]";
  if (spec.model.arch == "graph") {
    ASSIGN_OR_RETURN(spec::CompiledGraph g, spec::CompileGraph(spec.model.graph));
    want = g.input.dims[0], classes = g.shape_of(g.output).dims.back();
    want_field = "model.graph.input.shape[0]", classes_field = "model.graph.output";
  }
  const int64_t features = table->inputs().size(1);
  if (features != want) {
    return InvalidArgumentError(want_field + " = " + std::to_string(want) + ": must be " +
                                std::to_string(features) + ", the feature columns of " + c.path);
  }
  const int64_t* labels = table->targets().data<int64_t>();
  for (int64_t i = 0; i < table->size(); ++i) {
    if (labels[i] < 0 || labels[i] >= classes) {
      return InvalidArgumentError("data.csv.path: " + c.path + ": sample " + std::to_string(i) +
                                  " has label " + std::to_string(labels[i]) +
                                  ", outside the model's classes [0, " + std::to_string(classes) +
                                  ") (" + classes_field + ")");
    }
  }
  const int64_t rows = table->size();
  ASSIGN_OR_RETURN(data::IndexSplit split, data::SplitIndices(rows, c.eval_fraction, spec.seed));
  if (split.train.empty()) {
    return InvalidArgumentError("data.csv.path: " + c.path + " leaves no training rows");
  }
  auto base = std::make_shared<const data::Dataset>(std::move(table).value());
  JobData out;
  out.num_classes = classes;
  out.train = std::make_shared<const data::Subset>(base, std::move(split.train));
  if (!split.eval.empty())
    out.eval = std::make_shared<const data::Subset>(base, std::move(split.eval));
  out.description = c.path + ": " + std::to_string(out.train->size()) + " train, " +
                    std::to_string(out.eval ? out.eval->size() : 0) + " held-out rows of " +
                    std::to_string(rows);
  return out;
}

}  // namespace

StatusOr<JobData> LoadJobData(const spec::JobSpec& spec, const data::Vocabulary* vocabulary) {
  const std::string& source = spec.data.source;
  if (source == "fashion_mnist") return LoadFashionMnist(spec);
  if (source == "text") return LoadText(spec, vocabulary);
  if (source == "tokens") return LoadTokens(spec);
  if (source == "csv") return LoadCsvData(spec);
  return InvalidArgumentError("data: unknown source \"" + source + "\"");
}

}  // namespace trainyard::trainer
