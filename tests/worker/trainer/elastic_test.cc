// Elastic training (Note [Elastic training] in trainer.h): ranks as threads of this process
// over real Gloo groups on loopback, each generation of members in a store scope of its own.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <map>
#include <mutex>
#include <thread>

#include "tests/worker/trainer/trainer_test_util.h"
#include "worker/dist/process_group.h"
#include "worker/dist/store.h"
#include "worker/trainer/trainer.h"

namespace trainyard::trainer {
namespace {

using testing::TempDir;

// A 3-rank elastic GPT (dropout on): 6 micro-batches of 4 per step, so 2 or 3 ranks share them.
spec::JobSpec ElasticSpec(const std::string& corpus, int64_t steps, const std::string& dir) {
  spec::JobSpec s = testing::DeviceGptSpec(
      corpus,
      R"(, "num_threads": 1, "parallelism": {"world_size": 3, "min_world_size": 2,
           "grad_accumulation_steps": 2, "collective_timeout_seconds": 20},
         "checkpoint": {"dir": ")" +
          dir + R"(", "every_steps": 0})",
      steps);
  if (dir.empty()) s.checkpoint = spec::CheckpointSpec();
  return s;
}

// Gloo groups of one store: generation `prefix` with `size` members.
class Groups {
 public:
  Groups() {
    auto server = dist::TcpStoreServer::Start();
    TY_CHECK(server.ok()) << server.status();
    server_ = *std::move(server);
  }
  StatusOr<std::shared_ptr<dist::ProcessGroup>> Join(const std::string& prefix, int rank,
                                                     int size) {
    ASSIGN_OR_RETURN(std::shared_ptr<dist::Store> store,
                     dist::TcpStore::Connect(server_->address(), std::chrono::seconds(5)));
    dist::ProcessGroupOptions options;
    options.timeout = std::chrono::seconds(20);
    ASSIGN_OR_RETURN(
        std::unique_ptr<dist::ProcessGroup> group,
        dist::CreateProcessGroup("gloo", std::make_shared<dist::PrefixStore>(prefix, store), rank,
                                 size, options));
    return std::shared_ptr<dist::ProcessGroup>(std::move(group));
  }

 private:
  std::unique_ptr<dist::TcpStoreServer> server_;
};

// What rank 0 saw: each step's loss, and its weights at the end.
struct Seen {
  std::mutex mu;
  std::map<int64_t, double> losses;
  nn::NamedTensors weights;
  void Loss(int64_t step, double loss) {
    std::lock_guard<std::mutex> lock(mu);
    losses[step] = loss;
  }
};

// Runs `spec` on `size` ranks of a fixed group from its checkpoint.dir; rank 0's losses go to
// `seen`, and its weights when `last`.
void RunSegment(const spec::JobSpec& spec, int size, const std::string& prefix, Groups* groups,
                Seen* seen, bool last) {
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      auto group = groups->Join(prefix, r, size);
      ASSERT_TRUE(group.ok()) << group.status();
      TrainerOptions options;
      options.process_group = *group;
      if (r == 0) options.on_step = [&](const StepMetrics& m) { seen->Loss(m.step, m.loss); };
      auto trainer = Trainer::Create(spec, options);
      ASSERT_TRUE(trainer.ok()) << trainer.status();
      auto summary = (*trainer)->Run();
      ASSERT_TRUE(summary.ok()) << summary.status();
      if (r == 0 && last) seen->weights = (*trainer)->model().NamedParameters();
    });
  }
  for (auto& t : threads) t.join();
}

// The live run: 3 ranks; the third leaves in step 5 (its group aborted: the others' step 5
// fails and is abandoned); 2 ranks go on; after step 9 a new rank joins and takes the state
// from the others by broadcast; 3 ranks finish at step 12.
void RunLive(const std::string& corpus, Seen* seen, std::vector<int64_t>* joiner_steps) {
  Groups groups;
  const spec::JobSpec spec = ElasticSpec(corpus, 12, "");
  std::atomic<bool> join_requested[2] = {false, false};
  std::thread joiner;
  auto run_rank = [&](int identity, std::shared_ptr<dist::ProcessGroup> group) {
    int regroups = 0;
    TrainerOptions options;
    options.process_group = group;
    if (identity < 2) options.regroup_requested = &join_requested[identity];
    options.regroup = [&, identity](const Status&) -> StatusOr<TrainerOptions::NextGroup> {
      ++regroups;
      if (identity == 2) return AbortedError("rank 2 left the job");
      if (regroups == 2) join_requested[identity] = false;
      const int size = regroups == 1 ? 2 : 3;
      ASSIGN_OR_RETURN(auto next,
                       groups.Join("g" + std::to_string(regroups + 1) + "/", identity, size));
      return TrainerOptions::NextGroup{next, regroups + 1};
    };
    std::shared_ptr<dist::ProcessGroup> first = group;
    options.on_step = [&, identity, first](const StepMetrics& m) {
      if (identity == 2 && m.step == 4) first->Abort(AbortedError("test: rank 2 leaves"));
      if (identity == 0 && m.step == 8) {
        join_requested[0] = join_requested[1] = true;
        joiner = std::thread([&] {
          auto g = groups.Join("g3/", 2, 3);
          ASSERT_TRUE(g.ok()) << g.status();
          TrainerOptions o;
          o.process_group = *g;
          o.on_step = [&](const StepMetrics& s) { joiner_steps->push_back(s.step); };
          auto t = Trainer::Create(spec, o);
          ASSERT_TRUE(t.ok()) << t.status();
          EXPECT_EQ((*t)->step(), 9) << "the joiner takes the live step";
          ASSERT_TRUE((*t)->Run().ok());
        });
      }
      if (identity == 0) seen->Loss(m.step, m.loss);
    };
    auto trainer = Trainer::Create(spec, options);
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    auto summary = (*trainer)->Run();
    if (identity == 2) {
      ASSERT_FALSE(summary.ok());
      EXPECT_NE(summary.status().message().find("rank 2 left the job"), std::string::npos)
          << summary.status();
      return;
    }
    ASSERT_TRUE(summary.ok()) << summary.status();
    EXPECT_EQ(summary->steps, 12);
    EXPECT_EQ(summary->world_size, 3);
    if (identity == 0) seen->weights = (*trainer)->model().NamedParameters();
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      auto g = groups.Join("g1/", r, 3);
      ASSERT_TRUE(g.ok()) << g.status();
      run_rank(r, *g);
    });
  }
  for (auto& t : threads) t.join();
  if (joiner.joinable()) joiner.join();
}

TEST(ElasticTrainerTest, AShrinkAndAGrowEqualTheSameWorldSizesThroughCheckpoints) {
  TempDir tmp;
  const std::string corpus = tmp.path() + "/corpus.txt";
  testing::WriteGptCorpus(corpus);

  Seen live;
  std::vector<int64_t> joiner_steps;
  RunLive(corpus, &live, &joiner_steps);
  EXPECT_EQ(joiner_steps, (std::vector<int64_t>{10, 11, 12}));

  // The same schedule of world sizes through checkpoints: 3 ranks to step 4, 2 to step 9,
  // 3 to step 12.
  Seen restarted;
  Groups groups;
  const std::string dir = tmp.path() + "/ckpt";
  RunSegment(ElasticSpec(corpus, 4, dir), 3, "a/", &groups, &restarted, false);
  RunSegment(ElasticSpec(corpus, 9, dir), 2, "b/", &groups, &restarted, false);
  RunSegment(ElasticSpec(corpus, 12, dir), 3, "c/", &groups, &restarted, true);

  ASSERT_EQ(live.losses.size(), 12u);
  ASSERT_EQ(restarted.losses.size(), 12u);
  for (int64_t step = 1; step <= 12; ++step) {
    EXPECT_NEAR(live.losses[step], restarted.losses[step], 1e-5) << "step " << step;
  }
  ASSERT_EQ(live.weights.size(), restarted.weights.size());
  for (size_t i = 0; i < live.weights.size(); ++i) {
    const std::vector<float> a = ToVector<float>(live.weights[i].second);
    const std::vector<float> b = ToVector<float>(restarted.weights[i].second);
    ASSERT_EQ(a.size(), b.size());
    for (size_t k = 0; k < a.size(); ++k) {
      ASSERT_NEAR(a[k], b[k], 1e-5) << live.weights[i].first << "[" << k << "]";
    }
  }
}

TEST(ElasticTrainerTest, TheGlobalBatchIsTheSameAtEveryWorldSize) {
  // 2 ranks of an elastic job of world_size 3 train like 3 ranks of it: same losses.
  TempDir tmp;
  const std::string corpus = tmp.path() + "/corpus.txt";
  testing::WriteGptCorpus(corpus);
  Groups groups;
  Seen two, three;
  RunSegment(ElasticSpec(corpus, 3, ""), 2, "two/", &groups, &two, true);
  RunSegment(ElasticSpec(corpus, 3, ""), 3, "three/", &groups, &three, true);
  ASSERT_EQ(two.losses.size(), 3u);
  for (int64_t step = 1; step <= 3; ++step) {
    EXPECT_NEAR(two.losses[step], three.losses[step], 1e-5) << "step " << step;
  }
}

}  // namespace
}  // namespace trainyard::trainer
