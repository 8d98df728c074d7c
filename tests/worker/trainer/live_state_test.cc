#include "worker/trainer/live_state.h"

#include <gtest/gtest.h>

#include "tests/testing/dist.h"
#include "worker/tensor/factories.h"

namespace trainyard::trainer {
namespace {

TEST(LiveStateTest, PackedTensorsUnpackEqual) {
  NamedTensorList in = {{"w", FromVector<float>({1.5f, -2, 3, 4}, Shape{2, 2})},
                        {"step", FromVector<int64_t>({7})},
                        {"empty", Zeros(Shape{0}, Options(DType::kFloat32))}};
  StatusOr<NamedTensorList> out = UnpackTensors(PackTensors(in));
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 3u);
  EXPECT_EQ((*out)[0].first, "w");
  EXPECT_EQ((*out)[0].second.shape(), (Shape{2, 2}));
  EXPECT_EQ(ToVector<float>((*out)[0].second), (std::vector<float>{1.5f, -2, 3, 4}));
  EXPECT_EQ(ToVector<int64_t>((*out)[1].second), (std::vector<int64_t>{7}));
  EXPECT_EQ((*out)[2].second.numel(), 0);
}

TEST(LiveStateTest, ATruncatedStringIsDataLossNamingTheOffset) {
  const std::string packed = PackTensors({{"w", FromVector<float>({1, 2, 3})}});
  StatusOr<NamedTensorList> out = UnpackTensors(packed.substr(0, packed.size() - 2));
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(out.status().message().find("malformed at byte"), std::string::npos) << out.status();
}

TEST(LiveStateTest, TheMemberWithTheMostStepsSendsItsStateToTheOthers) {
  // Rank 1 applied one step more than the others (its update went through before a peer
  // vanished); ranks 2 and 0 tie below it.
  const std::vector<int64_t> applied = {5, 6, 6};
  ::trainyard::testing::RunRanks(3, [&](int rank, std::shared_ptr<dist::ProcessGroup> group) {
    StatusOr<StateSource> source = ChooseStateSource(*group, applied[rank]);
    ASSERT_TRUE(source.ok()) << source.status();
    EXPECT_EQ(source->rank, 1);
    EXPECT_EQ(source->step, 6);
    NamedTensorList state;
    if (rank == 1) state = {{"w", FromVector<float>({float(rank), 9})}};
    ASSERT_TRUE(BroadcastTensors(*group, source->rank, &state).ok());
    ASSERT_EQ(state.size(), 1u);
    EXPECT_EQ(ToVector<float>(state[0].second), (std::vector<float>{1, 9}));
  });
}

}  // namespace
}  // namespace trainyard::trainer
