// Which run a checkpoint belongs to (Note [Run identity]). Every manifest records the run that
// wrote it; a run resumes a checkpoint.dir's checkpoint only when it is the same run, so a new
// job never trains on from a stranger's step.
//
// Note [Run identity]
// A run is the same when it has the same uid, or, where the run has no uid of its own (a
// `trainyard train` run, which adopts the uid of the checkpoint it resumes), the same spec
// digest. The uid is the coordinator's Job.uid (random, unique across coordinators: a fresh
// --state-dir numbers jobs from 1 again, and the new job-1 must not resume the old job-1's
// checkpoints). The digest covers what makes two runs' weights comparable step for step: the
// model, the data (not its loader's workers or prefetch), the optimizer, the schedule, the
// global batch (batch_size x world_size / pipeline_stages x grad_accumulation_steps: another
// world size or pipeline with the same global batch is the same run, resharded), the seed and the
// clip norm. Not the step count or a cosine schedule's total_steps (a run may be extended), the
// precision or the device (a run may continue in another: Note [Mixed precision]), evaluation,
// checkpointing or threads. A manifest written before run identities (no "run") matches on the
// digest alone.
#pragma once

#include <string>
#include <vector>

#include "common/json.h"

namespace trainyard::trainer {

struct RunIdentity {
  std::string uid;          // "" in a manifest written before run identities
  std::string spec_digest;  // SpecDigest of the run's spec: 16 hex digits
  std::string job;          // the job id, or the spec's name for a `trainyard train` run
};

// The identity fields of a spec in spec::ToJson form (Note [Run identity]).
Json IdentityFields(const Json& spec);

// FNV-1a 64 of IdentityFields(spec).Dump(), as 16 hex digits.
std::string SpecDigest(const Json& spec);

// The identity fields in which `saved` and `spec` (both spec::ToJson forms) differ, each as
// "optimizer.adamw.lr: 0.001 there, 0.002 here"; at most `limit`, then "and N more".
std::vector<std::string> IdentityDifferences(const Json& saved, const Json& spec, size_t limit = 6);

// 32 random hex digits (the coordinator's Job.uid has the same form).
std::string NewRunUid();

}  // namespace trainyard::trainer
