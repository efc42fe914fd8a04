// The hybrid strategy (trainer/mirrored_strategy.h with shared ps tasks): the tabular model's
// dynamic tables live on shared ps tasks, updated asynchronously by every worker, while its dense
// layers are replicated on the workers and all-reduced. Tested on a separable table: it learns;
// the replicas end bit-identical and hold no table; the tables sit on the shared ps tasks only; a
// worker that dies makes the job resume from the last checkpoint; and a hybrid checkpoint restores
// under the parameter-server strategy with the same test metrics.
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "common/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/registry.h"
#include "ps/grpc_ps_client.h"
#include "ps/ps_server.h"
#include "tests/train_in_process.h"
#include "trainer/mirrored_strategy.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;

// Every shard a ps holds: name -> whether it is a dynamic table's.
std::map<std::string, bool> ShardsOn(const std::string& address) {
  std::unique_ptr<PsClient> ps = NewGrpcPsClient(0, address);
  ListShardsResponse shards;
  EXPECT_TRUE(ps->ListShards(ListShardsRequest(), &shards).ok()) << address;
  std::map<std::string, bool> out;
  for (const VariableShardDef& def : shards.shards()) out[def.name()] = def.has_dynamic();
  return out;
}

// Every fixed shard's values on the replica at `address`.
std::map<std::string, std::string> ReadFixed(const std::string& address) {
  std::unique_ptr<PsClient> ps = NewGrpcPsClient(0, address);
  ListShardsResponse shards;
  EXPECT_TRUE(ps->ListShards(ListShardsRequest(), &shards).ok());
  std::map<std::string, std::string> out;
  for (const VariableShardDef& def : shards.shards()) {
    if (def.has_dynamic()) continue;
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

class HybridTrainingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = FreshTempDir("hybrid");
    // Insured in Oslo and Rome only, with noise columns: separable.
    const char* cities[] = {"Oslo", "Rome", "Lima", "Kyiv", "Pune", "Graz"};
    std::mt19937 rng(3);
    std::string csv = "city,tag,income,label\n";
    for (int i = 0; i < 2000; ++i) {
      const int c = static_cast<int>(rng() % 6);
      absl::StrAppend(&csv, cities[c], ",t", rng() % 5, ",", rng() % 1000, ",", c < 2 ? 1 : 0,
                      "\n");
    }
    std::ofstream(dir_ + "/t.csv") << csv;
    spec_ = dir_ + "/spec.json";
    std::ofstream(spec_) << absl::StrReplaceAll(R"({
      'label': {'column': 'label'},
      'features': [{'name': 'city', 'column': 'city'}, {'name': 'tag', 'column': 'tag'},
                   {'name': 'income', 'type': 'numeric', 'column': 'income'}],
      'model': {'type': 'wide_and_deep', 'embedding_dim': 4, 'hidden': [8]}})",
                                                {{"'", "\""}});
    for (int i = 0; i < 2; ++i) {
      PsServerOptions options;
      options.task_index = i;
      auto server = PsServer::Start(options);
      ASSERT_TRUE(server.ok()) << server.status();
      shared_.push_back((*server)->address());
      servers_.push_back(*std::move(server));
    }
  }

  ModelOptions Model() const {
    ModelOptions options;
    options.data = dir_ + "/t.csv";
    options.epochs = 3;
    options.batch_size = 32;
    options.extra["feature_spec"] = spec_;
    return options;
  }

  TrainerOptions Trainer() const {
    TrainerOptions options;
    options.restore = "none";
    options.progress.out = &null_;
    return options;
  }

  absl::StatusOr<MirroredResult> Run(const TrainerOptions& trainer, MirroredOptions mirrored = {}) {
    mirrored.num_workers = 2;
    mirrored.shared_ps = shared_;
    mirrored.on_trained = [&](int rank, const std::string& address) {
      std::map<std::string, bool> shards = ShardsOn(address);
      std::map<std::string, std::string> values = ReadFixed(address);
      absl::MutexLock lock(&mu_);
      replica_shards_[rank] = std::move(shards);
      replicas_[rank] = std::move(values);
    };
    return TrainMultiWorkerMirrored("tabular", Model(), trainer, mirrored);
  }

  std::string dir_;
  std::string spec_;
  std::vector<std::unique_ptr<PsServer>> servers_;
  std::vector<std::string> shared_;
  mutable std::ostream null_{nullptr};
  absl::Mutex mu_;
  std::map<int, std::map<std::string, std::string>> replicas_;
  std::map<int, std::map<std::string, bool>> replica_shards_;
};

TEST_F(HybridTrainingTest, TwoWorkers_TablesOnSharedPs_DenseReplicasIdentical) {
  auto result = Run(Trainer());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->attempts, 1);
  EXPECT_EQ(result->chief.num_ps, 2);
  EXPECT_GT(result->chief.metrics.values["test_auc"], 0.99);
  // Each step trains one batch between the two workers: each reads its share of the data, half a
  // batch a step (not a whole batch each: the job's examples are the steps' batches).
  EXPECT_EQ(result->chief.examples, (result->chief.end_step - result->chief.start_step) * 32);
  // Every table is on the shared ps tasks, in one shard per task; no fixed variable is there.
  std::map<std::string, bool> shared;
  for (const std::string& address : shared_) {
    for (const auto& [name, dynamic] : ShardsOn(address)) {
      EXPECT_TRUE(dynamic) << name << " on " << address;
      shared[name] = dynamic;
    }
  }
  EXPECT_EQ(shared.count("tabular/embedding/part_0"), 1u);
  EXPECT_EQ(shared.count("tabular/embedding/part_1"), 1u);
  EXPECT_EQ(result->chief.tables.count("tabular/embedding"), 1u);
  EXPECT_GT(result->chief.tables["tabular/embedding"].keys(), 5);
  // The replicas hold the fixed variables only, bit-identical on both workers.
  ASSERT_THAT(replicas_, SizeIs(2));
  for (const auto& [rank, shards] : replica_shards_) {
    EXPECT_FALSE(shards.empty());
    for (const auto& [name, dynamic] : shards) EXPECT_FALSE(dynamic) << name << " on " << rank;
  }
  EXPECT_EQ(replicas_[0], replicas_[1]);
}

// Worker 1 dies at step 40 of the first attempt: the job resumes every worker from the checkpoint
// of step 30 (the chief restores the shared tables too), finishes, and the replicas still agree.
// The chief's checkpoint then restores under the parameter-server strategy, which evaluates the
// same test metrics.
TEST_F(HybridTrainingTest, WorkerDies_ResumesFromCheckpoint_RestoresUnderParameterServer) {
  TrainerOptions trainer = Trainer();
  trainer.checkpoint_dir = dir_ + "/ckpt";
  trainer.checkpoint_every_steps = 30;
  // The test evaluation on the final weights (not the best validation's checkpoint, which the
  // chief alone would load back at the end), so the replicas and the last checkpoint agree.
  trainer.keep_best = false;
  MirroredOptions mirrored;
  mirrored.collective_timeout = absl::Seconds(30);
  mirrored.after_step = [](int attempt, int rank, int64_t step) -> absl::Status {
    if (attempt == 0 && rank == 1 && step == 40) {
      return absl::UnavailableError("worker:1 killed (a simulated crash)");
    }
    return absl::OkStatus();
  };
  const absl::Time start = absl::Now();
  auto result = Run(trainer, mirrored);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(25));  // no wait for the 30 s collective timeout
  EXPECT_EQ(result->attempts, 2);
  ASSERT_THAT(result->failures, SizeIs(1));
  EXPECT_THAT(result->failures[0], HasSubstr("worker:1 killed"));
  EXPECT_EQ(result->chief.start_step, 30);
  EXPECT_GT(result->chief.metrics.values["test_auc"], 0.99);
  ASSERT_THAT(replicas_, SizeIs(2));
  EXPECT_EQ(replicas_[0], replicas_[1]);

  // The same checkpoint, evaluated by the parameter-server strategy (2 workers, 3 ps).
  ModelOptions options = Model();
  auto model = CreateModel("tabular", options);
  ASSERT_TRUE(model.ok()) << model.status();
  TrainerOptions ps_trainer = Trainer();
  ps_trainer.restore = result->chief.last_checkpoint;
  ps_trainer.keep_best = false;
  ps_trainer.validate = false;
  auto evaluated = TrainInProcess(*TrainingRegistry(std::make_shared<ReplicaGroups>()),
                                  /*workers=*/2, /*ps=*/3, model->get(), ps_trainer);
  ASSERT_TRUE(evaluated.ok()) << evaluated.status();
  EXPECT_EQ(evaluated->start_step, evaluated->end_step);  // nothing left to train
  EXPECT_NEAR(evaluated->metrics.values["test_auc"], result->chief.metrics.values["test_auc"],
              1e-9);
  EXPECT_NEAR(evaluated->metrics.values["test_logloss"],
              result->chief.metrics.values["test_logloss"], 1e-6);
}

TEST_F(HybridTrainingTest, DynamicTablesWithoutSharedPs_RefusedClearly) {
  MirroredOptions mirrored;
  mirrored.num_workers = 2;
  auto result = TrainMultiWorkerMirrored("tabular", Model(), Trainer(), mirrored);
  EXPECT_THAT(result.status(), StatusIs(absl::StatusCode::kInvalidArgument,
                                        HasSubstr("dynamic table")));
}

}  // namespace
}  // namespace pstrain
