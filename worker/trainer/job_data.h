// The data a job spec names, loaded and split: the training set, the held-out set and, for
// text, the vocabulary. Every failure names the spec field and the file.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "common/spec/job_spec.h"
#include "common/status.h"
#include "worker/data/dataset.h"
#include "worker/data/vocabulary.h"

namespace trainyard::trainer {

struct JobData {
  std::shared_ptr<const data::BatchSource> train;
  std::shared_ptr<const data::BatchSource> eval;  // null when nothing is held out
  // Tokens per sample (the context length) for text, 1 otherwise: tokens/s = samples/s * this.
  int64_t tokens_per_sample = 1;
  // Text and token files: tokens in the vocabulary (the model's vocab_size must be at least
  // this); classification: classes (labels are in [0, this)).
  int64_t num_classes = 0;
  // Text only: kept beside the checkpoints (Note [Vocabulary file] in worker/data/vocabulary.h).
  std::optional<data::Vocabulary> vocabulary;
  std::string description;  // one line for the user: "Fashion-MNIST: 60000 train, 10000 held out"
};

// The file that holds a text job's vocabulary in its checkpoint directory.
inline constexpr const char* kVocabularyFile = "vocabulary.txt";

// Loads spec.data. `vocabulary` (text data only; may be null) is a vocabulary to keep using,
// the one saved beside a run's checkpoints; otherwise it is built from the text as
// spec.data.text.vocabulary says. Errors: a missing or corrupt file (naming it and the field),
// a held-out split too small for one sample, labels or features that do not fit the model.
StatusOr<JobData> LoadJobData(const spec::JobSpec& spec, const data::Vocabulary* vocabulary);

}  // namespace trainyard::trainer
