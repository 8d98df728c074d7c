#include "worker/trainer/job_data.h"

#include <numeric>

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

// Windows of `context` tokens over the training and held-out parts of a token stream.
StatusOr<JobData> TokenWindows(const std::string& field, std::vector<uint16_t> tokens,
                               double eval_fraction, int64_t context) {
  ASSIGN_OR_RETURN(data::TokenSplit split, data::SplitTokens(tokens, eval_fraction));
  JobData out;
  out.tokens_per_sample = context;
  StatusOr<data::TokenDataset> train = data::TokenDataset::Create(std::move(split.train), context);
  if (!train.ok()) {
    return InvalidArgumentError(
        field + ": " + std::to_string(tokens.size()) +
        " tokens leave too few for training windows of model.gpt.context = " +
        std::to_string(context) + " tokens");
  }
  out.train = std::make_shared<const data::TokenDataset>(std::move(train).value());
  if (!split.eval.empty()) {
    const int64_t held_out = static_cast<int64_t>(split.eval.size());
    StatusOr<data::TokenDataset> eval = data::TokenDataset::Create(std::move(split.eval), context);
    if (!eval.ok()) {
      return InvalidArgumentError(
          field + ": the held-out part (" + std::to_string(held_out) +
          " tokens) is shorter than one window of model.gpt.context + 1 = " +
          std::to_string(context + 1) + " tokens; raise eval_fraction or set it to 0");
    }
    out.eval = std::make_shared<const data::TokenDataset>(std::move(eval).value());
  }
  return out;
}

StatusOr<JobData> LoadText(const spec::JobSpec& spec, const data::Vocabulary* saved) {
  const spec::TextData& t = spec.data.text;
  StatusOr<std::string> text = data::ReadFileBytes(t.path);
  if (!text.ok()) return InField("data.text.path", text.status());
  if (text->empty()) return InvalidArgumentError("data.text.path: " + t.path + " is empty");
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
                                             t.eval_fraction, spec.model.gpt.context));
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
  ASSIGN_OR_RETURN(JobData out,
                   TokenWindows("data.tokens.path (" + t.path + ")", std::move(file->tokens),
                                t.eval_fraction, spec.model.gpt.context));
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
  const std::vector<int64_t>& sizes = spec.model.mlp.sizes;
  const int64_t features = table->inputs().size(1);
  if (features != sizes.front()) {
    return InvalidArgumentError("model.mlp.sizes[0] = " + std::to_string(sizes.front()) +
                                ": must be " + std::to_string(features) +
                                ", the feature columns of " + c.path);
  }
  const int64_t* labels = table->targets().data<int64_t>();
  for (int64_t i = 0; i < table->size(); ++i) {
    if (labels[i] < 0 || labels[i] >= sizes.back()) {
      return InvalidArgumentError("data.csv.path: " + c.path + ": sample " + std::to_string(i) +
                                  " has label " + std::to_string(labels[i]) +
                                  ", outside the model's classes [0, " +
                                  std::to_string(sizes.back()) + ") (model.mlp.sizes[" +
                                  std::to_string(sizes.size() - 1) + "])");
    }
  }
  const int64_t rows = table->size();
  ASSIGN_OR_RETURN(data::IndexSplit split, data::SplitIndices(rows, c.eval_fraction, spec.seed));
  if (split.train.empty()) {
    return InvalidArgumentError("data.csv.path: " + c.path + " leaves no training rows");
  }
  auto base = std::make_shared<const data::Dataset>(std::move(table).value());
  JobData out;
  out.num_classes = sizes.back();
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
