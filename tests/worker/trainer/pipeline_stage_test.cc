// PipelineStage: how a pipeline's stages share the GPT's blocks when the spec gives no
// parallelism.pipeline_balance (BalanceStages), and which weights each stage's rank keeps.
#include "worker/trainer/pipeline_stage.h"

#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "tests/testing/temp_dir.h"
#include "tests/worker/trainer/trainer_test_util.h"
#include "worker/dist/store.h"
#include "worker/tensor/storage.h"
#include "worker/trainer/trainer.h"

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

// The parameters of `model` whose storage was released (holds no bytes).
std::set<std::string> Released(nn::Module& model) {
  std::set<std::string> names;
  for (const auto& [name, p] : model.NamedParameters()) {
    if (p.storage()->nbytes() == 0) names.insert(name);
  }
  return names;
}

// Two stages of a two-block GPT on threads over real Gloo groups: from the start each rank
// keeps its stage's weights only (the last stage the tied embedding too), and rank 0 refuses to
// evaluate released weights; after Run rank 0's model is whole again, the other stage's weights
// gathered from rank 1, and evaluates.
TEST(PipelineStageTest, EachRankKeepsItsStagesWeightsAndRankZeroEndsWhole) {
  ::trainyard::testing::TempDir dir;
  const std::string text = dir.path() + "/corpus.txt";
  testing::WriteGptCorpus(text);
  const spec::JobSpec spec = testing::ParseSpec(
      R"({"model": {"gpt": {"context": 16, "n_layer": 2, "n_head": 2, "n_embd": 16,
          "dropout": 0}}, "data": {"text": {"path": ")" +
      text + R"("}}, "optimizer": {"adamw": {"lr": 0.01}}, "batch_size": 4, "steps": 3,
          "seed": 3, "eval": {"max_batches": 1}, "parallelism": {"world_size": 2,
          "pipeline_stages": 2, "grad_accumulation_steps": 2}})");
  auto server = dist::TcpStoreServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<std::set<std::string>> released(2), after(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto store = dist::TcpStore::Connect((*server)->address(), std::chrono::seconds(5));
      ASSERT_TRUE(store.ok()) << store.status();
      auto group = [&](const std::string& prefix) {
        auto g = dist::CreateProcessGroup(
            "gloo", std::make_shared<dist::PrefixStore>(prefix, *store), r, 2, {});
        EXPECT_TRUE(g.ok()) << g.status();
        return g.ok() ? std::shared_ptr<dist::ProcessGroup>(std::move(*g)) : nullptr;
      };
      TrainerOptions options;
      options.process_group = group("world/");
      options.pipeline.stage = r;
      options.pipeline.stages = 2;
      options.pipeline.tied = group("pair/");
      (r == 0 ? options.pipeline.next : options.pipeline.prev) = options.pipeline.tied;
      auto t = Trainer::Create(spec, options);
      ASSERT_TRUE(t.ok()) << t.status();
      released[r] = Released((*t)->model());
      if (r == 0) {  // not whole yet: no evaluation of released weights
        EXPECT_EQ((*t)->Evaluate().status().code(), StatusCode::kFailedPrecondition);
      }
      ASSERT_TRUE((*t)->Run().ok());
      after[r] = Released((*t)->model());
      if (r == 0) {
        EXPECT_TRUE((*t)->Evaluate().ok());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(
      released[0],
      (std::set<std::string>{
          "transformer.h.1.attn.c_attn.weight", "transformer.h.1.attn.c_attn.bias",
          "transformer.h.1.attn.c_proj.weight", "transformer.h.1.attn.c_proj.bias",
          "transformer.h.1.ln_1.weight", "transformer.h.1.ln_1.bias", "transformer.h.1.ln_2.weight",
          "transformer.h.1.ln_2.bias", "transformer.h.1.mlp.c_fc.weight",
          "transformer.h.1.mlp.c_fc.bias", "transformer.h.1.mlp.c_proj.weight",
          "transformer.h.1.mlp.c_proj.bias", "transformer.ln_f.weight", "transformer.ln_f.bias"}));
  EXPECT_EQ(released[1].count("transformer.wpe.weight"), 1u);
  EXPECT_EQ(released[1].count("transformer.h.0.attn.c_attn.weight"), 1u);
  EXPECT_EQ(released[1].count("transformer.wte.weight"), 0u);  // the head's
  EXPECT_EQ(released[1].count("transformer.ln_f.weight"), 0u);
  EXPECT_TRUE(after[0].empty());
  EXPECT_EQ(after[1], released[1]);
}

}  // namespace
}  // namespace trainyard::trainer
