// Note [Run identity]: a checkpoint.dir's checkpoint is resumed only by the run that wrote it;
// another run's is refused, naming it, unless checkpoint.resume_from or init_from say otherwise.
#include "worker/trainer/run_identity.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/worker/trainer/trainer_test_util.h"
#include "worker/trainer/trainer.h"

namespace trainyard::trainer {
namespace {

using ::testing::HasSubstr;
using testing::ParseSpec;

// A spec's ToJson form: a base spec with the members of `extra` (", \"k\": v, ...") set over it.
Json SpecJson(const std::string& extra) {
  StatusOr<Json> spec = Json::Parse(R"({"model": {"mlp": {"sizes": [2, 8, 4]}},
      "data": {"csv": {"path": "x.csv"}}, "optimizer": {"sgd": {"lr": 0.1}}, "batch_size": 16})");
  TY_CHECK(spec.ok());
  if (!extra.empty()) {
    StatusOr<Json> over = Json::Parse("{" + extra.substr(1) + "}");
    TY_CHECK(over.ok()) << extra;
    for (const auto& [key, value] : over->members()) spec->Set(key, value);
  }
  StatusOr<spec::JobSpec> parsed = spec::ParseJobSpec(*spec);
  TY_CHECK(parsed.ok()) << parsed.status();
  return spec::ToJson(*parsed);
}

TEST(RunIdentityTest, TheDigestCoversWhatMakesARunAndNothingElse) {
  const std::string base = SpecDigest(SpecJson(""));
  EXPECT_EQ(base.size(), 16u);
  // Not identity: the length, evaluation, checkpointing, threads, loader workers, the name.
  for (const char* same :
       {R"(, "steps": 99)", R"(, "eval": {"every_steps": 3})",
        R"(, "checkpoint": {"dir": "/x", "keep_last": 1})", R"(, "num_threads": 2)",
        R"(, "name": "other")", R"(, "precision": "bf16")",
        R"(, "batch_size": 8, "parallelism": {"world_size": 2})"}) {
    EXPECT_EQ(SpecDigest(SpecJson(same)), base) << same;
  }
  // Identity: the optimizer, the seed, the global batch, the model, the clip norm.
  for (const char* other : {R"(, "optimizer": {"sgd": {"lr": 0.2}})", R"(, "seed": 7)",
                            R"(, "parallelism": {"world_size": 2})", R"(, "grad_clip_norm": 1.0)",
                            R"(, "model": {"mlp": {"sizes": [2, 9, 4]}})"}) {
    std::string spec = std::string(other);
    EXPECT_NE(SpecDigest(SpecJson(spec)), base) << other;
  }
}

TEST(RunIdentityTest, DifferencesNameTheFieldAndBothValues) {
  std::vector<std::string> d = IdentityDifferences(
      SpecJson(""), SpecJson(R"(, "parallelism": {"world_size": 2}, "seed": 3)"));
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0], "batch_size x world_size x grad_accumulation_steps: 16 there, 32 here");
  EXPECT_THAT(d[1], HasSubstr("seed: "));
  EXPECT_TRUE(IdentityDifferences(SpecJson(""), SpecJson(R"(, "steps": 5)")).empty());
  EXPECT_NE(NewRunUid(), NewRunUid());
  EXPECT_EQ(NewRunUid().size(), 32u);
}

class RunIdentityTrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string csv;
    for (int i = 0; i < 64; ++i)
      csv += std::to_string(i % 4) + ",1," + std::to_string(i % 4) + "\n";
    testing::WriteRaw(dir_.path() + "/d.csv", csv);
  }
  // 4 steps of lr 0.1 unless `steps` or `lr` say otherwise.
  spec::JobSpec Spec(int steps = 4, double lr = 0.1) {
    return ParseSpec(R"({"name": "blobs", "model": {"mlp": {"sizes": [2, 8, 4]}},
        "data": {"csv": {"path": ")" +
                     dir_.path() + R"(/d.csv", "eval_fraction": 0}},
        "optimizer": {"sgd": {"lr": )" +
                     Json(lr).Dump() + R"(}}, "batch_size": 16, "steps": )" +
                     std::to_string(steps) + R"(, "checkpoint": {"dir": ")" + dir_.path() +
                     R"(/ckpt"}})");
  }
  // Creates and runs a trainer; its status, and the trainer's identity in *run.
  Status Train(const spec::JobSpec& spec, const std::string& uid = "", RunIdentity* run = nullptr) {
    TrainerOptions options;
    options.run_uid = uid;
    StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(spec, options);
    if (!t.ok()) return t.status();
    if (run != nullptr) *run = (*t)->run();
    return (*t)->Run().status();
  }
  StatusOr<Manifest> Latest() {
    return ReadManifest(dir_.path() + "/ckpt/step-00000004/manifest.json");
  }

  testing::TempDir dir_;
};

TEST_F(RunIdentityTrainerTest, ManifestsRecordTheRunAndTheSameSpecResumesAdoptingItsUid) {
  ASSERT_TRUE(Train(Spec()).ok());
  StatusOr<Manifest> m = Latest();
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->state.run.uid.size(), 32u);
  EXPECT_EQ(m->state.run.spec_digest, SpecDigest(spec::ToJson(Spec())));
  EXPECT_EQ(m->state.run.job, "blobs");
  // Longer, same run: resumes at step 4 and keeps the uid.
  RunIdentity run;
  ASSERT_TRUE(Train(Spec(6), "", &run).ok());
  EXPECT_EQ(run.uid, m->state.run.uid);
}

TEST_F(RunIdentityTrainerTest, AnotherSpecIsRefusedNamingTheWriterTheDifferenceAndTheWaysOn) {
  ASSERT_TRUE(Train(Spec()).ok());
  Status s = Train(Spec(8, 0.5));
  ASSERT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
  const std::string msg(s.message());
  const std::string step_dir = dir_.path() + "/ckpt/step-00000004";
  EXPECT_THAT(
      msg, HasSubstr("checkpoint.dir " + dir_.path() + "/ckpt holds a checkpoint of another run"));
  EXPECT_THAT(msg, HasSubstr(step_dir + " was written by job blobs (uid "));
  EXPECT_THAT(msg, HasSubstr("optimizer.sgd.lr: 0.1 there, 0.5 here"));
  EXPECT_THAT(msg, HasSubstr("checkpoint.resume_from: " + step_dir));
  EXPECT_THAT(msg, HasSubstr("checkpoint.init_from: " + step_dir));
  EXPECT_THAT(msg, HasSubstr("another checkpoint.dir"));
}

TEST_F(RunIdentityTrainerTest, AJobWithAnotherUidIsRefusedEvenWithTheSameSpec) {
  ASSERT_TRUE(Train(Spec(), "11111111111111111111111111111111").ok());
  Status s = Train(Spec(8), "22222222222222222222222222222222");
  ASSERT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(),
              HasSubstr("its uid is not this run's (22222222222222222222222222222222)"));
  // The job that wrote it resumes.
  EXPECT_TRUE(Train(Spec(8), "11111111111111111111111111111111").ok());
}

TEST_F(RunIdentityTrainerTest, ResumeFromContinuesAnotherRunDeliberately) {
  ASSERT_TRUE(Train(Spec()).ok());
  const std::string step_dir = dir_.path() + "/ckpt/step-00000004";
  spec::JobSpec other = Spec(6, 0.5);
  other.checkpoint.dir = dir_.path() + "/ckpt2";
  other.checkpoint.resume_from = step_dir;
  TrainerOptions options;
  StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(other, options);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->step(), 4);
  EXPECT_EQ((*t)->resumed_from(), step_dir);
  ASSERT_TRUE((*t)->Run().ok());
  // Its own checkpoints are its own run's; a restart resumes them, not resume_from's.
  StatusOr<std::unique_ptr<Trainer>> again = Trainer::Create(other, options);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->resumed_from(), dir_.path() + "/ckpt2/step-00000006");
}

// A cosine schedule whose length is the run's: resuming to a longer run stretches it, and the
// trainer says so (job.proto's CosineSchedule).
TEST_F(RunIdentityTrainerTest, ResumingACosineRunToAnotherLengthSaysSo) {
  spec::JobSpec spec = Spec();
  spec.schedule.kind = "cosine";
  ASSERT_TRUE(Train(spec).ok());
  StatusOr<Manifest> m = Latest();
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->state.total_steps, 4);
  spec.steps = 8;
  StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(spec, {});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT((*t)->resume_note(), HasSubstr("the cosine schedule now ends at step 8, where the "
                                             "checkpoint's run ended it at step 4"));
  // Keeping the old length, as the note says: the same run, nothing to say.
  spec.schedule.cosine.total_steps = 4;
  t = Trainer::Create(spec, {});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->resume_note(), "");
}

}  // namespace
}  // namespace trainyard::trainer
