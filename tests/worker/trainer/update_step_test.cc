#include "worker/trainer/update_step.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "worker/nn/linear.h"
#include "worker/tensor/factories.h"

namespace trainyard::trainer {
namespace {

using ::testing::ElementsAre;
using ::testing::FloatNear;
using ::testing::HasSubstr;
using ::testing::Pointwise;

// SGD at lr 0.5 without momentum (so no state but the step count), clipping at norm 1.
spec::JobSpec SgdSpec(const std::string& precision) {
  spec::JobSpec spec;
  spec.optimizer.kind = "sgd";
  spec.optimizer.sgd.lr = 0.5;
  spec.precision = precision;
  spec.grad_clip_norm = 1.0;
  return spec;
}

// y = w . x with w = (1, 2) and no bias.
std::unique_ptr<nn::Linear> TwoWeights() {
  return std::make_unique<nn::Linear>(
      FromVector<float>({1, 2}, Shape{1, 2}, /*requires_grad=*/true), Tensor());
}

std::unique_ptr<UpdateStep> Make(const spec::JobSpec& spec, nn::Module& model,
                                 bool data_parallel = false) {
  StatusOr<std::unique_ptr<UpdateStep>> step = MakeUpdateStep(spec, {}, model, data_parallel);
  TY_CHECK(step.ok()) << step.status();
  TY_CHECK((*step)->Start(nullptr).ok());
  return *std::move(step);
}

std::map<std::string, Tensor> ByKey(const std::vector<optim::NamedTensor>& state) {
  return std::map<std::string, Tensor>(state.begin(), state.end());
}

TEST(UpdateStepTest, PlainClipsStepsAndDropsTheGradientsOfOneProcess) {
  std::unique_ptr<nn::Linear> model = TwoWeights();
  std::unique_ptr<UpdateStep> step = Make(SgdSpec("fp32"), *model);
  EXPECT_EQ(step->ScaleLoss(Scalar(3)).item(), 3.0) << "plain leaves the loss alone";
  model->weight().set_grad(FromVector<float>({3, 4}, Shape{1, 2}));  // norm 5

  StatusOr<UpdateReport> report = step->Apply();
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_TRUE(report->device_grad_norm.defined());
  EXPECT_FLOAT_EQ(report->device_grad_norm.item(), 5);
  EXPECT_TRUE(std::isnan(report->grad_norm)) << "on the host only for ZeRO";
  EXPECT_EQ(report->loss_scale, 0);
  EXPECT_FALSE(report->skipped);
  // Clipped to (0.6, 0.8), times lr 0.5.
  EXPECT_THAT(ToVector<float>(model->weight()), Pointwise(FloatNear(1e-6), {0.7f, 1.6f}));
  EXPECT_FALSE(model->weight().grad().defined());
}

TEST(UpdateStepTest, DataParallelZeroesTheGradientsInPlace) {
  std::unique_ptr<nn::Linear> model = TwoWeights();
  std::unique_ptr<UpdateStep> step = Make(SgdSpec("fp32"), *model, /*data_parallel=*/true);
  const Tensor grad = FromVector<float>({3, 4}, Shape{1, 2});
  model->weight().set_grad(grad);
  ASSERT_TRUE(step->Apply().ok());
  ASSERT_TRUE(model->weight().grad().defined()) << "a view into its bucket stays";
  EXPECT_THAT(ToVector<float>(grad), ElementsAre(0, 0));
}

TEST(UpdateStepTest, Fp16ScalesTheLossAndSkipsAnInfGradient) {
  std::unique_ptr<nn::Linear> model = TwoWeights();
  std::unique_ptr<UpdateStep> step = Make(SgdSpec("fp16"), *model);
  EXPECT_EQ(step->ScaleLoss(Scalar(3)).item(), 3 * 65536.0);
  const float inf = std::numeric_limits<float>::infinity();
  model->weight().set_grad(FromVector<float>({inf, 4}, Shape{1, 2}));

  StatusOr<UpdateReport> report = step->Apply();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->skipped);
  EXPECT_EQ(report->loss_scale, 65536.0) << "the scale backward used";
  EXPECT_THAT(ToVector<float>(model->weight()), ElementsAre(1, 2));
  EXPECT_EQ(step->ScaleLoss(Scalar(1)).item(), 32768.0) << "backed off";
}

TEST(UpdateStepTest, Fp16SavesItsScalerBesideTheOptimizerOnTheWriterOnly) {
  std::unique_ptr<nn::Linear> model = TwoWeights();
  std::unique_ptr<UpdateStep> step = Make(SgdSpec("fp16"), *model);
  model->weight().set_grad(FromVector<float>({3, 4}, Shape{1, 2}));
  ASSERT_TRUE(step->Apply().ok());

  StatusOr<std::vector<optim::NamedTensor>> state = step->StateDict(/*writer=*/true);
  ASSERT_TRUE(state.ok()) << state.status();
  const std::map<std::string, Tensor> saved = ByKey(*state);
  ASSERT_TRUE(saved.count("grad_scaler.scale"));
  EXPECT_EQ(saved.at("grad_scaler.scale").item(), 65536.0);
  ASSERT_TRUE(saved.count("grad_scaler.growth_tracker"));
  EXPECT_EQ(saved.at("grad_scaler.growth_tracker").item(), 1.0);
  EXPECT_TRUE(saved.count("weight.step")) << "the optimizer's own entries";
  StatusOr<std::vector<optim::NamedTensor>> other = step->StateDict(/*writer=*/false);
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(other->empty());
}

TEST(UpdateStepTest, EachModeLoadsTheOthersCheckpointsAndNamesTheFileOnError) {
  std::unique_ptr<nn::Linear> fp16_model = TwoWeights(), plain_model = TwoWeights();
  std::unique_ptr<UpdateStep> fp16 = Make(SgdSpec("fp16"), *fp16_model);
  std::unique_ptr<UpdateStep> plain = Make(SgdSpec("fp32"), *plain_model);
  StatusOr<std::vector<optim::NamedTensor>> fp16_state = fp16->StateDict(true);
  StatusOr<std::vector<optim::NamedTensor>> plain_state = plain->StateDict(true);
  ASSERT_TRUE(fp16_state.ok() && plain_state.ok());
  EXPECT_TRUE(plain->LoadStateDict(*fp16_state, "ckpt").ok()) << "the scaler's entries aside";
  EXPECT_TRUE(fp16->LoadStateDict(*plain_state, "ckpt").ok()) << "no scaler: the initial scale";
  EXPECT_EQ(fp16->ScaleLoss(Scalar(1)).item(), 65536.0);

  std::vector<optim::NamedTensor> bad = *fp16_state;
  for (auto& [key, t] : bad) {
    if (key == "grad_scaler.scale") t = Scalar(-1, Options(DType::kFloat64));
  }
  Status s = fp16->LoadStateDict(bad, "ckpt");
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("loading the grad scaler's state from \"ckpt/optimizer.safetensors\""));
}

TEST(UpdateStepTest, ZeroNeedsAGroupAndWaitsForStartToLoadItsState) {
  std::unique_ptr<nn::Linear> model = TwoWeights();
  spec::JobSpec spec = SgdSpec("fp32");
  spec.parallelism.zero_stage = 1;
  std::unique_ptr<UpdateStep> one_process = Make(spec, *model);
  model->weight().set_grad(FromVector<float>({3, 4}, Shape{1, 2}));
  ASSERT_TRUE(one_process->Apply().ok()) << "one process with zero_stage 1 takes plain";
  EXPECT_THAT(ToVector<float>(model->weight()), Pointwise(FloatNear(1e-6), {0.7f, 1.6f}));

  StatusOr<std::unique_ptr<UpdateStep>> zero =
      MakeUpdateStep(spec, {}, *model, /*data_parallel=*/true);
  ASSERT_TRUE(zero.ok()) << zero.status();
  EXPECT_EQ((*zero)->state_bytes(), 0) << "no sharded optimizer before Start";
  EXPECT_TRUE((*zero)->LoadStateDict({{"weight.step", Scalar(1)}}, "ckpt").ok());
}

TEST(UpdateStepTest, ABadScalerSettingIsRefusedForFp16Only) {
  optim::GradScalerOptions bad;
  bad.growth_factor = 0.5;
  Status s = ValidateUpdateStep(SgdSpec("fp16"), bad);
  EXPECT_THAT(std::string(s.message()), HasSubstr("grad_scaler: growth_factor"));
  EXPECT_TRUE(ValidateUpdateStep(SgdSpec("fp32"), bad).ok());
}

}  // namespace
}  // namespace trainyard::trainer
