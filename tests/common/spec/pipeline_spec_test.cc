// The job spec's pipeline parallelism fields (parallelism.pipeline_stages, _schedule, _balance)
// and the rules that relate them to the model, the world size and the other modes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/common/spec/spec_test_util.h"

namespace trainyard::spec {
namespace {

using ::testing::HasSubstr;
using testing::ParseOrDie;
using testing::ProblemsOf;
using testing::SetPath;

// A 4-block GPT on 4 ranks, 2 stages of 2 replicas.
Json PipelinedGpt() {
  return ParseOrDie(R"({
    "model": {"gpt": {"context": 16, "n_layer": 4, "n_head": 2, "n_embd": 32}},
    "data": {"text": {"path": "data/kjv.txt"}},
    "optimizer": {"adamw": {"lr": 0.001}},
    "parallelism": {"world_size": 4, "pipeline_stages": 2}
  })");
}

TEST(PipelineSpecTest, DefaultsToNoPipelineAndAcceptsStagesBalanceAndSchedule) {
  StatusOr<JobSpec> plain = ParseJobSpec(testing::Minimal());
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->parallelism.pipeline_stages, 1);
  EXPECT_EQ(plain->parallelism.pipeline_schedule, "1f1b");
  EXPECT_TRUE(plain->parallelism.pipeline_balance.empty());

  Json json = PipelinedGpt();
  SetPath(&json, "parallelism.pipeline_schedule", "gpipe");
  SetPath(&json, "parallelism.pipeline_balance", Json::Array({Json(1), Json(3)}));
  StatusOr<JobSpec> spec = ParseJobSpec(json);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->parallelism.pipeline_stages, 2);
  EXPECT_EQ(spec->parallelism.pipeline_schedule, "gpipe");
  EXPECT_EQ(spec->parallelism.pipeline_balance, (std::vector<int64_t>{1, 3}));
  // The spec round-trips through its JSON form.
  StatusOr<JobSpec> again = ParseJobSpec(ToJson(*spec));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->parallelism.pipeline_balance, spec->parallelism.pipeline_balance);
}

TEST(PipelineSpecTest, RefusesWhatAPipelineCannotRun) {
  Json json = PipelinedGpt();
  SetPath(&json, "parallelism.world_size", 3);
  SetPath(&json, "parallelism.zero_stage", 2);
  SetPath(&json, "precision", "fp16");
  SetPath(&json, "parallelism.pipeline_balance", Json::Array({Json(1), Json(1), Json(2)}));
  std::string text = ProblemsOf(json);
  EXPECT_THAT(text, HasSubstr("parallelism.pipeline_stages = 2: must divide "
                              "parallelism.world_size = 3"));
  EXPECT_THAT(text, HasSubstr("parallelism.pipeline_stages = 2: cannot be combined with "
                              "parallelism.zero_stage = 2"));
  EXPECT_THAT(text, HasSubstr("parallelism.pipeline_stages = 2: cannot be combined with "
                              "precision fp16"));
  EXPECT_THAT(text, HasSubstr("parallelism.pipeline_balance = [1,1,2]: needs one entry per "
                              "stage (parallelism.pipeline_stages = 2)"));

  json = PipelinedGpt();
  SetPath(&json, "parallelism.pipeline_balance", Json::Array({Json(1), Json(2)}));
  EXPECT_THAT(ProblemsOf(json), HasSubstr("parallelism.pipeline_balance = [1,2]: must sum to "
                                          "model.gpt.n_layer = 4"));
  json = PipelinedGpt();
  SetPath(&json, "model.gpt.n_layer", 1);
  EXPECT_THAT(ProblemsOf(json), HasSubstr("parallelism.pipeline_stages = 2: is more than "
                                          "model.gpt.n_layer = 1"));
  json = PipelinedGpt();
  SetPath(&json, "parallelism.max_world_size", 6);
  EXPECT_THAT(ProblemsOf(json),
              HasSubstr("parallelism.pipeline_stages = 2: needs a fixed world size"));
  json = testing::Minimal();
  SetPath(&json, "parallelism.world_size", 2);
  SetPath(&json, "parallelism.pipeline_stages", 2);
  EXPECT_THAT(ProblemsOf(json),
              HasSubstr("parallelism.pipeline_stages = 2: needs model.gpt (model is mlp)"));
  json = testing::Minimal();
  SetPath(&json, "parallelism.pipeline_balance", Json::Array({Json(2)}));
  EXPECT_THAT(ProblemsOf(json), HasSubstr("parallelism.pipeline_balance = [2]: needs "
                                          "parallelism.pipeline_stages > 1"));
  json = PipelinedGpt();
  SetPath(&json, "parallelism.pipeline_stages", 0);
  SetPath(&json, "parallelism.pipeline_schedule", "interleaved");
  text = ProblemsOf(json);
  EXPECT_THAT(text, HasSubstr("parallelism.pipeline_stages = 0: must be in [1, 64]"));
  EXPECT_THAT(text, HasSubstr("parallelism.pipeline_schedule = \"interleaved\": allowed: one of "
                              "\"1f1b\", \"gpipe\""));
}

}  // namespace
}  // namespace trainyard::spec
