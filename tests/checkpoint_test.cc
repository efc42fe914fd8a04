// Checkpoints across rooms: in-process clusters (real gRPC), the coordinator, the checkpoint
// manager and the ps databases. Save under one partitioning and restore under another; slots bit
// for bit; faults at every point of a save; bad checkpoints; a ps that restarts mid-job.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "coordinator/checkpoint_files.h"
#include "coordinator/checkpoint_manager.h"
#include "coordinator/cluster_coordinator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/test_util.h"
#include "coordinator/in_process_cluster.h"
#include "worker/closure_registry.h"

namespace pstrain {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;


// A cluster of `num_ps` ps tasks and one worker, a coordinator over it, and a checkpoint manager.
struct Job {
  Job(int num_ps, const std::string& dir, CheckpointOptions options = {},
      CoordinatorOptions coordinator_options = {}) {
    InProcessClusterOptions cluster_options;
    cluster_options.num_ps = num_ps;
    cluster_options.num_workers = 1;
    auto c = InProcessCluster::Start(cluster_options);
    EXPECT_TRUE(c.ok()) << c.status();
    cluster = std::move(*c);
    coordinator_options.on_ps_restarted = [this](int ps) -> absl::Status {
      absl::StatusOr<std::optional<RestoredCheckpoint>> r = checkpoints->RestorePs(ps);
      if (r.ok() && r->has_value()) restored_ps_from.push_back((*r)->step);
      return r.status();
    };
    auto co = ClusterCoordinator::Create(cluster->spec(), coordinator_options);
    EXPECT_TRUE(co.ok()) << co.status();
    coordinator = std::move(*co);
    options.dir = dir;
    auto m = CheckpointManager::Create(options, coordinator->ps()->clients(),
                                       coordinator->variables());
    EXPECT_TRUE(m.ok()) << m.status();
    checkpoints = std::move(*m);
  }

  // A float32 variable `name` of `shape` in `shards` fixed shards, with `optimizer` if given.
  ShardedVariable Create(const std::string& name, Shape shape, int shards,
                         std::optional<OptimizerDef> optimizer = std::nullopt) {
    VariableSpec spec;
    spec.name = name;
    spec.shape = std::move(shape);
    spec.partitioner.kind = PartitionerKind::kFixed;
    spec.partitioner.num_shards = shards;
    spec.initializer.set_kind(InitializerDef::NORMAL);
    spec.initializer.set_stddev(0.5);
    spec.initializer.set_seed(3);
    spec.optimizer = optimizer;
    absl::StatusOr<ShardedVariable> v = coordinator->variables()->Create(spec);
    EXPECT_TRUE(v.ok()) << v.status();
    return *v;
  }

  // Each shard's values, in shard order, read straight from its ps.
  std::vector<std::vector<float>> ShardValues(const ShardedVariable& v) {
    std::vector<std::vector<float>> out;
    for (const ShardLocation& loc : v.shards()) {
      ReadRequest request;
      request.add_ops()->set_shard(loc.name);
      ReadResponse response;
      absl::Status s = coordinator->ps()->ps(loc.ps_task)->Read(request, &response);
      EXPECT_TRUE(s.ok()) << s;
      out.push_back(Floats(response.values(0)));
    }
    return out;
  }

  absl::StatusOr<std::string> Save(int64_t step, std::map<std::string, std::string> state = {}) {
    absl::StatusOr<std::string> path;
    absl::Status s = coordinator->RunExclusive([&] {
      path = checkpoints->Save(step, state);
      return path.status();
    });
    if (!s.ok()) return s;
    return path;
  }

  std::unique_ptr<InProcessCluster> cluster;
  std::unique_ptr<ClusterCoordinator> coordinator;
  std::unique_ptr<CheckpointManager> checkpoints;
  std::vector<int64_t> restored_ps_from;
};

// Saves a [4] variable holding 0..3 (or the 1..4) as `from` shards and restores it as `to`.
std::vector<std::vector<float>> Reshard(int from_shards, int from_ps, int to_shards, int to_ps,
                                        std::vector<float> values) {
  const std::string dir = FreshTempDir("reshard");
  {
    Job a(from_ps, dir);
    ShardedVariable v = a.Create("v", {static_cast<int64_t>(values.size())}, from_shards);
    EXPECT_TRUE(v.AssignAll(Bytes(values)).ok());
    EXPECT_TRUE(a.Save(5).ok());
  }
  Job b(to_ps, dir);
  ShardedVariable v = b.Create("v", {static_cast<int64_t>(values.size())}, to_shards);
  absl::StatusOr<std::optional<RestoredCheckpoint>> r = b.checkpoints->RestoreLatest();
  EXPECT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->has_value());
  EXPECT_EQ((*r)->step, 5);
  return b.ShardValues(v);
}

TEST(CheckpointReshardTest, TwoShardsIntoTwo_Same) {
  EXPECT_THAT(Reshard(2, 2, 2, 2, {1, 2, 3, 4}),
              ElementsAre(ElementsAre(1, 2), ElementsAre(3, 4)));
}

TEST(CheckpointReshardTest, TwoShardsIntoFour_OneRowEach) {
  EXPECT_THAT(Reshard(2, 2, 4, 2, {1, 2, 3, 4}),
              ElementsAre(ElementsAre(1), ElementsAre(2), ElementsAre(3), ElementsAre(4)));
}

TEST(CheckpointReshardTest, FourShardsIntoOne_AllRows) {
  EXPECT_THAT(Reshard(4, 2, 1, 1, {0, 1, 2, 3}), ElementsAre(ElementsAre(0, 1, 2, 3)));
}

TEST(CheckpointReshardTest, FourShardsIntoTwoOnThreePs_TwoRowsEach) {
  EXPECT_THAT(Reshard(4, 2, 2, 3, {0, 1, 2, 3}),
              ElementsAre(ElementsAre(0, 1), ElementsAre(2, 3)));
}

TEST(CheckpointReshardTest, ThirteenRowsFiveShardsIntoThreeOnOnePs_Same) {
  std::vector<float> values(13);
  for (int i = 0; i < 13; ++i) values[i] = 10.0f + i;
  auto shards = Reshard(5, 3, 3, 1, values);
  std::vector<float> all;
  for (auto& s : shards) all.insert(all.end(), s.begin(), s.end());
  EXPECT_THAT(all, ElementsAreArray(values));
  EXPECT_EQ(shards[0].size(), 5u);
}

// Values after one more identical gradient step prove that slots and Adam's step count came back.
TEST(CheckpointSlotsTest, AdamAndAdagrad_RoundTripThenSameNextStep_BitExact) {
  const std::string dir = FreshTempDir("slots");
  OptimizerDef adam;
  adam.set_kind(OptimizerDef::ADAM);
  adam.set_learning_rate(0.1);
  OptimizerDef adagrad;
  adagrad.set_kind(OptimizerDef::ADAGRAD);
  adagrad.set_learning_rate(0.5);
  std::vector<int64_t> ids = {0, 3, 7, 7, 9};
  std::vector<float> grads(ids.size() * 4);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.37f * static_cast<float>(i) - 1.1f;

  Job a(/*num_ps=*/2, dir);
  ShardedVariable a_adam = a.Create("adam", {10, 4}, 3, adam);
  ShardedVariable a_ada = a.Create("adagrad", {10, 4}, 2, adagrad);
  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE(a_adam.ApplyGradients(ids, grads.data()).ok());
    ASSERT_TRUE(a_ada.ApplyGradients(ids, grads.data()).ok());
  }
  ASSERT_TRUE(a.Save(3).ok());

  Job b(/*num_ps=*/3, dir);
  ShardedVariable b_adam = b.Create("adam", {10, 4}, 4, adam);
  ShardedVariable b_ada = b.Create("adagrad", {10, 4}, 1, adagrad);
  ASSERT_TRUE(b.checkpoints->RestoreLatest().ok());
  EXPECT_EQ(*b_adam.ReadAll(), *a_adam.ReadAll());
  EXPECT_EQ(*b_ada.ReadAll(), *a_ada.ReadAll());
  for (auto* v : {&a_adam, &a_ada, &b_adam, &b_ada}) {
    ASSERT_TRUE(v->ApplyGradients(ids, grads.data()).ok());
  }
  EXPECT_EQ(*b_adam.ReadAll(), *a_adam.ReadAll());
  EXPECT_EQ(*b_ada.ReadAll(), *a_ada.ReadAll());
}

class CheckpointFaultTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CheckpointFaultTest, SaveStoppedAtPoint_PreviousCheckpointRestoredBitExact) {
  const std::string dir = FreshTempDir("fault");
  std::string fail_at;
  CheckpointOptions options;
  options.fault_hook = [&fail_at](absl::string_view point) {
    return point == fail_at ? absl::AbortedError(absl::StrCat("injected at ", point))
                            : absl::OkStatus();
  };
  std::string step1;
  {
    Job a(2, dir, options);
    ShardedVariable v = a.Create("emb", {8, 2}, 2);
    std::vector<float> ones(16, 1.0f);
    ASSERT_TRUE(v.AssignAll(Bytes(ones)).ok());
    ASSERT_TRUE(a.Save(1, {{"note", "one"}}).ok());
    step1 = *v.ReadAll();
    std::vector<float> twos(16, 2.0f);
    ASSERT_TRUE(v.AssignAll(Bytes(twos)).ok());
    fail_at = GetParam();
    absl::StatusOr<std::string> saved = a.Save(2);
    EXPECT_EQ(saved.status().code(), absl::StatusCode::kAborted);
  }
  absl::StatusOr<CheckpointEntry> latest = LatestCheckpoint(dir);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->step, 1);

  Job b(1, dir);
  ShardedVariable v = b.Create("emb", {8, 2}, 3);
  absl::StatusOr<std::optional<RestoredCheckpoint>> r = b.checkpoints->RestoreLatest();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->step, 1);
  EXPECT_EQ((*r)->state["note"], "one");
  EXPECT_EQ(*v.ReadAll(), step1);

  // The next save replaces the remains of the failed one.
  b.checkpoints = *CheckpointManager::Create(CheckpointOptions{dir}, b.coordinator->ps()->clients(),
                                             b.coordinator->variables());
  ASSERT_TRUE(b.Save(2).ok());
  EXPECT_EQ(LatestCheckpoint(dir)->step, 2);
}

INSTANTIATE_TEST_SUITE_P(Points, CheckpointFaultTest,
                         ::testing::Values("start", "after_ps_write", "before_manifest",
                                           "before_manifest_rename"));

TEST(CheckpointKeepTest, KeepTwo_OnlyNewestTwoRemain) {
  const std::string dir = FreshTempDir("keep");
  CheckpointOptions options;
  options.keep = 2;
  Job a(2, dir, options);
  a.Create("w", {6, 3}, 2);
  for (int step = 10; step <= 50; step += 10) ASSERT_TRUE(a.Save(step).ok());
  absl::StatusOr<std::vector<CheckpointEntry>> all = ListCheckpointDirs(dir);
  ASSERT_TRUE(all.ok());
  std::vector<int64_t> steps;
  for (const auto& e : *all) steps.push_back(e.step);
  EXPECT_THAT(steps, ElementsAre(40, 50));
}

// The checkpoint marked best stays whatever `keep` says; a malformed mark is refused, not followed.
TEST(CheckpointKeepTest, BestMarked_KeptBesideTheNewestAndClearable) {
  const std::string dir = FreshTempDir("keep_best");
  CheckpointOptions options;
  options.keep = 2;
  Job a(2, dir, options);
  a.Create("w", {6, 3}, 2);
  for (int step = 10; step <= 50; step += 10) {
    absl::StatusOr<std::string> path = a.Save(step);
    ASSERT_TRUE(path.ok()) << path.status();
    if (step == 20) ASSERT_TRUE(a.checkpoints->MarkBest(*path, "val_rmse=0.8 at step 20").ok());
  }
  auto saved_steps = [&dir] {
    std::vector<int64_t> steps;
    absl::StatusOr<std::vector<CheckpointEntry>> all = ListCheckpointDirs(dir);
    EXPECT_TRUE(all.ok()) << all.status();
    if (all.ok()) {
      for (const CheckpointEntry& e : *all) steps.push_back(e.step);
    }
    return steps;
  };
  EXPECT_THAT(saved_steps(), ElementsAre(20, 40, 50));
  absl::StatusOr<std::optional<BestMarker>> best = a.checkpoints->Best();
  ASSERT_TRUE(best.ok() && best->has_value()) << best.status();
  EXPECT_EQ((*best)->step, 20);
  EXPECT_EQ((*best)->note, "val_rmse=0.8 at step 20");
  EXPECT_TRUE(a.checkpoints->Restore((*best)->path).ok());
  // Not a checkpoint of this directory: refused.
  EXPECT_THAT(a.checkpoints->MarkBest("/etc/passwd", "x"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a checkpoint directory")));
  // A mark pointing outside the directory: kDataLoss, and old checkpoints are left alone.
  {
    std::ofstream f(dir + "/BEST", std::ios::trunc);
    f << "../../etc\nx\n";
  }
  EXPECT_THAT(a.checkpoints->Best(), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("BEST")));
  ASSERT_TRUE(a.Save(60).ok());
  EXPECT_THAT(saved_steps(), ElementsAre(20, 40, 50, 60));
  ASSERT_TRUE(a.checkpoints->ClearBest().ok());
  ASSERT_TRUE(a.Save(70).ok());
  EXPECT_THAT(saved_steps(), ElementsAre(60, 70));
}

class CheckpointBadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = FreshTempDir("bad");
    Job a(2, dir_);
    ShardedVariable v = a.Create("emb", {8, 2}, 2);
    a.Create("bias", {8}, 1);
    ASSERT_TRUE(v.AssignAll(Bytes(std::vector<float>(16, 7.0f))).ok());
    ASSERT_TRUE(a.Save(1).ok());
  }
  std::string dir_;
};

TEST_F(CheckpointBadInputTest, ShapeMismatch_InvalidArgumentAndValuesUntouched) {
  Job b(1, dir_);
  ShardedVariable v = b.Create("emb", {8, 3}, 1);
  const std::string before = *v.ReadAll();
  absl::StatusOr<std::optional<RestoredCheckpoint>> r = b.checkpoints->RestoreLatest();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("\"emb\" was saved as [8,2]"));
  EXPECT_EQ(*v.ReadAll(), before);
}

TEST_F(CheckpointBadInputTest, OptimizerMismatch_InvalidArgument) {
  Job b(1, dir_);
  OptimizerDef adam;
  adam.set_kind(OptimizerDef::ADAM);
  b.Create("emb", {8, 2}, 1, adam);
  absl::StatusOr<std::optional<RestoredCheckpoint>> r = b.checkpoints->RestoreLatest();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("saved with no optimizer but now has ADAM"));
}

TEST_F(CheckpointBadInputTest, MissingVariable_NotFoundUnlessSkipped) {
  Job b(1, dir_);
  ShardedVariable emb = b.Create("emb", {8, 2}, 1);
  ShardedVariable extra = b.Create("extra", {4}, 1);
  const std::string extra_before = *extra.ReadAll();
  absl::StatusOr<std::optional<RestoredCheckpoint>> r = b.checkpoints->RestoreLatest();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr("has no variable extra"));
  RestoreOptions skip;
  skip.skip_missing = true;
  r = b.checkpoints->RestoreLatest(skip);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT((*r)->skipped, ElementsAre("extra"));
  EXPECT_EQ(Floats(*emb.ReadAll()), std::vector<float>(16, 7.0f));
  EXPECT_EQ(*extra.ReadAll(), extra_before);
}

TEST_F(CheckpointBadInputTest, CorruptManifest_DataLossAndValuesUntouched) {
  const std::string manifest = CheckpointPath(dir_, 1) + "/MANIFEST";
  {
    std::fstream f(manifest, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(30);
    f.put('\x7f');
  }
  Job b(1, dir_);
  ShardedVariable v = b.Create("emb", {8, 2}, 1);
  const std::string before = *v.ReadAll();
  absl::StatusOr<RestoredCheckpoint> r = b.checkpoints->Restore(CheckpointPath(dir_, 1));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(r.status().message(), HasSubstr("CRC-32C mismatch"));
  EXPECT_EQ(*v.ReadAll(), before);
}

TEST_F(CheckpointBadInputTest, DatabaseOfOnePsGone_DataLossAndNoPsChanged) {
  std::filesystem::remove_all(CheckpointPath(dir_, 1) + "/ps-1");
  Job b(2, dir_);
  ShardedVariable v = b.Create("emb", {8, 2}, 2);
  const std::string before = *v.ReadAll();
  absl::StatusOr<RestoredCheckpoint> r = b.checkpoints->Restore(CheckpointPath(dir_, 1));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(r.status().message(), HasSubstr("ps-1"));
  EXPECT_EQ(*v.ReadAll(), before);  // ps 0 staged its part and dropped it
}

TEST_F(CheckpointBadInputTest, WrongDirectory_NotFound) {
  Job b(1, dir_);
  b.Create("emb", {8, 2}, 1);
  absl::StatusOr<RestoredCheckpoint> r = b.checkpoints->Restore(dir_ + "/nothing-here");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr("nothing-here"));
}

// The sum job's closure adds [begin, end) into an int64 variable on the ps: a ps restarted between
// steps loses what was added since the last checkpoint, and nothing else.
TEST(PsRecoveryTest, PsRestartedMidJob_ShardsRestoredFromCheckpointAndJobCompletes) {
  const std::string dir = FreshTempDir("recovery");
  Job job(2, dir);
  VariableSpec spec;
  spec.name = kSumJobVariable;
  spec.shape = {1};
  spec.dtype = DType::kInt64;
  ASSERT_TRUE(job.coordinator->variables()->Create(spec).ok());
  const int ps_of_total = 0;  // the first variable goes on ps 0
  auto run_steps = [&](int64_t first, int64_t last) {
    for (int64_t s = first; s <= last; ++s) {
      ASSERT_TRUE(job.coordinator
                      ->Schedule("add_range", {Tensor::Scalar<int64_t>(s * 10),
                                               Tensor::Scalar<int64_t>(s * 10 + 10)})
                      .ok());
    }
  };
  auto sum = [](int64_t first, int64_t last) {  // what steps first..last add
    int64_t total = 0;
    for (int64_t i = first * 10; i < last * 10 + 10; ++i) total += i;
    return total;
  };
  run_steps(1, 10);
  ASSERT_TRUE(job.coordinator->Join().ok());
  ASSERT_TRUE(job.Save(10).ok());
  run_steps(11, 15);
  ASSERT_TRUE(job.coordinator->Join().ok());

  // The ps dies; closures scheduled meanwhile wait for it instead of failing.
  ASSERT_TRUE(job.cluster->StopTask({"ps", ps_of_total}).ok());
  run_steps(16, 20);
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_FALSE(*job.coordinator->Done());
  ASSERT_TRUE(job.cluster->StartTask({"ps", ps_of_total}).ok());
  ASSERT_TRUE(job.coordinator->Join().ok());

  EXPECT_THAT(job.restored_ps_from, ElementsAre(10));
  absl::StatusOr<ShardedVariable> total = job.coordinator->ps()->Variable(kSumJobVariable);
  ASSERT_TRUE(total.ok());
  int64_t got;
  std::memcpy(&got, total->ReadAll()->data(), 8);
  EXPECT_EQ(got, sum(1, 10) + sum(16, 20));  // steps 11..15 were after the checkpoint: lost
}

TEST(PsRecoveryTest, PsRestartedWithoutCheckpoint_InitialValuesAndJobCompletes) {
  const std::string dir = FreshTempDir("recovery_none");
  Job job(1, dir);
  VariableSpec spec;
  spec.name = kSumJobVariable;
  spec.shape = {1};
  spec.dtype = DType::kInt64;
  ASSERT_TRUE(job.coordinator->variables()->Create(spec).ok());
  ASSERT_TRUE(job.coordinator->Schedule("add_range", {Tensor::Scalar<int64_t>(0),
                                                      Tensor::Scalar<int64_t>(5)}).ok());
  ASSERT_TRUE(job.coordinator->Join().ok());
  ASSERT_TRUE(job.cluster->RestartTask({"ps", 0}).ok());
  ASSERT_TRUE(job.coordinator->Schedule("add_range", {Tensor::Scalar<int64_t>(5),
                                                      Tensor::Scalar<int64_t>(7)}).ok());
  ASSERT_TRUE(job.coordinator->Join().ok());
  int64_t got;
  std::memcpy(&got, job.coordinator->ps()->Variable(kSumJobVariable)->ReadAll()->data(), 8);
  EXPECT_EQ(got, 5 + 6);
  EXPECT_TRUE(job.restored_ps_from.empty());
}

}  // namespace
}  // namespace pstrain
