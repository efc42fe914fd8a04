// Synchronous training (trainer/mirrored_strategy.h) of fashion_mnist_mlp on a toy set: every
// worker's replica ends bit-identical, two workers train exactly what one worker trains on the
// same (global) batches, and a worker that dies mid-job makes the others stop, after which the
// job resumes from the last checkpoint and finishes.
#include "trainer/mirrored_strategy.h"

#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "collective/gloo_group.h"
#include "collective/rendezvous_service.h"
#include "coordinator/in_process_cluster.h"
#include "ps/grpc_ps_client.h"
#include "tests/toy_fashion_data.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;

// Every variable shard of the replica at `address`: shard name -> its values' bytes.
std::map<std::string, std::string> ReadReplica(const std::string& address) {
  std::unique_ptr<PsClient> ps = NewGrpcPsClient(0, address);
  ListShardsResponse shards;
  EXPECT_TRUE(ps->ListShards(ListShardsRequest(), &shards).ok());
  std::map<std::string, std::string> out;
  for (const VariableShardDef& def : shards.shards()) {
    ReadRequest read;
    ReadOp* op = read.add_ops();
    op->set_shard(def.name());
    op->mutable_range()->set_row_begin(def.row_offset());
    op->mutable_range()->set_row_end(def.row_offset() + def.num_rows());
    ReadResponse values;
    EXPECT_TRUE(ps->Read(read, &values).ok()) << def.name();
    out[def.name()] = values.values(0);
  }
  return out;
}

class MirroredTrainingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = tmp != nullptr ? tmp : "/tmp";
    WriteToySplit(dir_, "train", 400, /*seed=*/11);
    WriteToySplit(dir_, "t10k", 100, /*seed=*/12);
  }

  ModelOptions Model() const {
    ModelOptions options;
    options.data = dir_;
    options.batch_size = 20;
    options.epochs = 3;
    options.learning_rate = 0.05;
    options.validation_fraction = 0;
    options.extra = {{"hidden", "8"}, {"average_epochs", "0"}};
    return options;
  }

  TrainerOptions Trainer() const {
    TrainerOptions options;
    options.restore = "none";
    std::ostream* quiet = &null_;
    options.progress.out = quiet;
    return options;
  }

  // Trains on `workers` workers; fills replicas_ with each worker's variables at the end.
  absl::StatusOr<MirroredResult> Run(int workers, const TrainerOptions& trainer,
                                     MirroredOptions mirrored = {}) {
    mirrored.num_workers = workers;
    mirrored.on_trained = [&](int rank, const std::string& address) {
      std::map<std::string, std::string> values = ReadReplica(address);
      absl::MutexLock lock(&mu_);
      replicas_[rank] = std::move(values);
    };
    return TrainMultiWorkerMirrored("fashion_mnist_mlp", Model(), trainer, mirrored);
  }

  std::string dir_;
  mutable std::ostream null_{nullptr};
  absl::Mutex mu_;
  std::map<int, std::map<std::string, std::string>> replicas_;
};

TEST_F(MirroredTrainingTest, TwoWorkers_ReplicasIdentical_AndEqualToOneWorker) {
  auto two = Run(2, Trainer());
  ASSERT_TRUE(two.ok()) << two.status();
  ASSERT_THAT(replicas_, SizeIs(2));
  EXPECT_EQ(replicas_[0], replicas_[1]);  // bit-identical, every shard
  EXPECT_EQ(two->attempts, 1);
  EXPECT_EQ(two->chief.end_step, 3 * 20);
  EXPECT_EQ(two->chief.examples, 3 * 400);  // both workers' shares
  EXPECT_GT(two->chief.metrics.values["test_accuracy"], 0.85);
  const std::map<std::string, std::string> synced = replicas_[0];

  replicas_.clear();
  auto one = Run(1, Trainer());
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_THAT(replicas_, SizeIs(1));
  // One worker on each whole batch = two workers on its halves, all-reduced (mean): the same
  // weights up to float rounding (the halves' means are averaged instead of one mean).
  ASSERT_EQ(replicas_[0].size(), synced.size());
  for (const auto& [shard, bytes] : synced) {
    const std::string& single = replicas_[0][shard];
    ASSERT_EQ(single.size(), bytes.size()) << shard;
    const float* a = reinterpret_cast<const float*>(bytes.data());
    const float* b = reinterpret_cast<const float*>(single.data());
    for (size_t i = 0; i < bytes.size() / sizeof(float); ++i) {
      ASSERT_NEAR(a[i], b[i], 1e-4 + 1e-4 * std::abs(b[i])) << shard << "[" << i << "]";
    }
  }
  EXPECT_NEAR(one->chief.metrics.values["test_loss"], two->chief.metrics.values["test_loss"], 1e-3);
}

// Worker 1 dies at its step 25 of the first attempt (its servers and connections go away): the
// chief's all-reduce fails within seconds, the job forms the group again, every worker resumes
// from the checkpoint of step 20, and the job finishes with replicas still identical.
TEST_F(MirroredTrainingTest, WorkerDies_OthersStop_JobResumesFromLastCheckpoint) {
  TrainerOptions trainer = Trainer();
  trainer.checkpoint_dir = dir_ + "/ckpt_mirrored";
  trainer.checkpoint_every_steps = 10;
  MirroredOptions mirrored;
  mirrored.collective_timeout = absl::Seconds(30);
  mirrored.after_step = [](int attempt, int rank, int64_t step) -> absl::Status {
    if (attempt == 0 && rank == 1 && step == 25) {
      return absl::UnavailableError("worker:1 killed (a simulated crash)");
    }
    return absl::OkStatus();
  };
  const absl::Time start = absl::Now();
  auto result = Run(2, trainer, mirrored);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(25));  // no wait for the 30 s collective timeout
  EXPECT_EQ(result->attempts, 2);
  ASSERT_THAT(result->failures, SizeIs(1));
  EXPECT_THAT(result->failures[0], HasSubstr("worker:1 killed"));
  EXPECT_THAT(result->chief.restored_from, HasSubstr("ckpt_mirrored"));
  EXPECT_EQ(result->chief.start_step, 20);
  EXPECT_EQ(result->chief.end_step, 60);
  ASSERT_THAT(replicas_, SizeIs(2));
  EXPECT_EQ(replicas_[0], replicas_[1]);
  EXPECT_GT(result->chief.metrics.values["test_accuracy"], 0.85);
}

// Replicas that start apart (different initializers) all hold the chief's values after the
// broadcast.
TEST(BroadcastFromChiefTest, ReplicasTakeTheChiefsValues) {
  auto rendezvous = RendezvousServer::Start("127.0.0.1:0");
  ASSERT_TRUE(rendezvous.ok()) << rendezvous.status();
  std::map<int, std::map<std::string, std::string>> after;
  absl::Mutex mu;
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      InProcessClusterOptions cluster_options;
      cluster_options.num_workers = 1;
      auto cluster = InProcessCluster::Start(cluster_options);
      ASSERT_TRUE(cluster.ok()) << cluster.status();
      const std::string address = (*cluster)->spec().tasks(kPs)[0];
      std::unique_ptr<PsClient> ps = NewGrpcPsClient(0, address);
      CreateShardsRequest create;
      VariableShardDef* def = create.add_shards();
      def->set_name("v");
      def->set_variable("v");
      def->add_full_shape(6);
      def->add_full_shape(2);
      def->set_dtype(DT_FLOAT32);
      def->set_num_rows(6);
      def->set_num_shards(1);
      def->mutable_initializer()->set_kind(InitializerDef::UNIFORM);
      def->mutable_initializer()->set_maxval(1);
      def->mutable_initializer()->set_seed(100 + r);  // a different start on every worker
      CreateShardsResponse created;
      ASSERT_TRUE(ps->CreateShards(create, &created).ok());
      CollectiveGroupOptions options;
      options.rendezvous_address = (*rendezvous)->address();
      options.rank = r;
      options.size = 3;
      auto group = CreateGlooGroup(options);
      ASSERT_TRUE(group.ok()) << group.status();
      ASSERT_TRUE(BroadcastFromChief(group->get(), ps.get()).ok());
      std::map<std::string, std::string> values = ReadReplica(address);
      absl::MutexLock lock(&mu);
      after[r] = std::move(values);
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_THAT(after, SizeIs(3));
  EXPECT_THAT(after[0]["v"], SizeIs(6 * 2 * sizeof(float)));
  EXPECT_EQ(after[1], after[0]);
  EXPECT_EQ(after[2], after[0]);
}

// A (re)starting rank joins the group's newest generation while it forms, else the next one, and
// never one it already joined.
TEST(GenerationToJoinTest, FormingJoinedFormedOrAborted) {
  RendezvousStatusResponse status;
  EXPECT_EQ(GenerationToJoin(status, /*last=*/0), 1u);  // a fresh group
  status.set_generation(2);
  status.set_size(3);
  status.set_joined(1);
  EXPECT_EQ(GenerationToJoin(status, /*last=*/0), 2u);  // forming: join it
  EXPECT_EQ(GenerationToJoin(status, /*last=*/2), 3u);  // already in it (its attempt failed)
  status.set_joined(3);
  EXPECT_EQ(GenerationToJoin(status, /*last=*/0), 3u);  // formed without this rank: the next
  status.set_joined(1);
  status.set_aborted("worker:2 (rank 2, silent 3.0 s) stopped answering");
  EXPECT_EQ(GenerationToJoin(status, /*last=*/0), 3u);  // failed: the next
  // A restarted rendezvous (fresh state) under ranks that were at generation 5.
  EXPECT_EQ(GenerationToJoin(RendezvousStatusResponse(), /*last=*/5), 6u);
}

TEST_F(MirroredTrainingTest, EarlyStopping_RefusedClearly) {
  TrainerOptions trainer = Trainer();
  trainer.early_stopping_patience = 2;
  EXPECT_THAT(Run(2, trainer).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("early stopping")));
}

}  // namespace
}  // namespace pstrain
