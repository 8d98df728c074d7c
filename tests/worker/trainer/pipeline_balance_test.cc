// BalanceStages: how a pipeline's stages share the GPT's blocks when the spec gives no
// parallelism.pipeline_balance.
#include <gtest/gtest.h>

#include "worker/trainer/pipeline_stage.h"

namespace trainyard::trainer {
namespace {

using Blocks = std::vector<int64_t>;

TEST(PipelineBalanceTest, EvenBlocksWithoutExtrasSplitEvenly) {
  EXPECT_EQ(BalanceStages({10, 10, 10, 10}, 0, 0, 2), (Blocks{2, 2}));
  EXPECT_EQ(BalanceStages({10, 10, 10, 10}, 0, 0, 4), (Blocks{1, 1, 1, 1}));
  EXPECT_EQ(BalanceStages({10, 10, 10, 10}, 0, 0, 1), (Blocks{4}));
}

TEST(PipelineBalanceTest, TheEmbeddingsAndTheHeadWeighOnTheEndStages) {
  // Stage 0 carries 25 of embeddings: one block there (35) and three after (30) beats 45 + 20.
  EXPECT_EQ(BalanceStages({10, 10, 10, 10}, 25, 0, 2), (Blocks{1, 3}));
  EXPECT_EQ(BalanceStages({10, 10, 10, 10}, 0, 25, 2), (Blocks{3, 1}));
  // Three stages, heavy ends: the middle stage takes the most blocks.
  EXPECT_EQ(BalanceStages({10, 10, 10, 10, 10, 10}, 25, 25, 3), (Blocks{1, 4, 1}));
}

TEST(PipelineBalanceTest, EveryStageTakesAtLeastOneBlock) {
  // However heavy the embeddings, stage 0 keeps a block.
  EXPECT_EQ(BalanceStages({1, 1, 1}, 1000, 0, 3), (Blocks{1, 1, 1}));
  EXPECT_EQ(BalanceStages({1, 1, 1, 1}, 1000, 0, 2), (Blocks{1, 3}));
}

TEST(PipelineBalanceTest, UnevenBlocksBalanceByParameters) {
  EXPECT_EQ(BalanceStages({40, 10, 10, 10, 10}, 0, 0, 2), (Blocks{1, 4}));
  EXPECT_EQ(BalanceStages({10, 10, 10, 10, 40}, 0, 0, 2), (Blocks{4, 1}));
}

}  // namespace
}  // namespace trainyard::trainer
