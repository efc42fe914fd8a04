// A real kill -9 of a process that saves checkpoints back to back (so the kill lands inside a
// save most of the time): the latest complete checkpoint left behind restores bit-exact, values
// and Adagrad accumulators, into a different partitioning. With incremental checkpoints the kill
// lands in deltas too: the chain left behind restores the dynamic table bit-exact as well.
#include <csignal>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "coordinator/checkpoint_files.h"
#include "coordinator/checkpoint_manager.h"
#include "coordinator/cluster_coordinator.h"
#include "gtest/gtest.h"
#include "common/test_util.h"
#include "tests/checkpoint_kill_util.h"
#include "coordinator/in_process_cluster.h"
#include "tests/subprocess.h"

namespace pstrain {
namespace {

// A fresh cluster holding the table as it is after steps 1..`steps` (replayed), and one holding
// it restored from `dir`'s latest checkpoint (in 4 shards on 1 ps instead of 3 on 2).
struct Replay {
  std::unique_ptr<InProcessCluster> cluster;
  std::unique_ptr<ClusterCoordinator> coordinator;
  std::optional<ShardedVariable> table;
  std::optional<DynamicTable> dynamic;

  Replay(int num_ps, int shards, bool with_dynamic) {
    InProcessClusterOptions o;
    o.num_ps = num_ps;
    o.num_workers = 1;
    cluster = std::move(*InProcessCluster::Start(o));
    coordinator = std::move(*ClusterCoordinator::Create(cluster->spec()));
    VariableSpec spec = KillTestTableSpec();
    spec.partitioner.num_shards = shards;
    table = *coordinator->variables()->Create(spec);
    if (with_dynamic) dynamic = *coordinator->variables()->CreateTable(KillTestDynamicSpec(shards));
  }
};

// (milliseconds between the third save and the kill, incremental checkpoints)
class CheckpointKillTest : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(CheckpointKillTest, KilledWhileSaving_LatestCompleteRestoresBitExact) {
  const auto [delay, incremental] = GetParam();
  const std::string name = absl::StrCat(delay, incremental ? "_incremental" : "");
  const std::string dir = FreshTempDir("kill_" + name);
  const std::string out = FreshTempDir("kill_out_" + name);
  std::vector<std::string> argv = {RunfilePath("tests/checkpoint_writer"), "--dir=" + dir};
  if (incremental) argv.push_back("--incremental");
  auto writer = Subprocess::Start("writer", argv, {}, out);
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->WaitForStdout("saved 3\n", absl::Seconds(60)).ok()) << (*writer)->Stderr();
  absl::SleepFor(absl::Milliseconds(delay));  // land somewhere in a later save
  (*writer)->Signal(SIGKILL);
  ASSERT_EQ(*(*writer)->Wait(absl::Seconds(30)), 128 + SIGKILL);

  absl::StatusOr<CheckpointEntry> latest = LatestCheckpoint(dir);
  ASSERT_TRUE(latest.ok()) << latest.status();
  ASSERT_GE(latest->step, 3);

  Replay expected(/*num_ps=*/2, /*shards=*/3, incremental);
  for (int64_t step = 1; step <= latest->step; ++step) {
    ASSERT_TRUE(ApplyKillTestStep(*expected.table, step).ok());
    if (incremental) ASSERT_TRUE(ApplyKillTestDynamicStep(*expected.dynamic, step).ok());
  }
  Replay restored(/*num_ps=*/1, /*shards=*/4, incremental);
  CheckpointOptions options;
  options.dir = dir;
  auto manager = CheckpointManager::Create(options, restored.coordinator->ps()->clients(),
                                           restored.coordinator->variables());
  ASSERT_TRUE(manager.ok());
  absl::StatusOr<std::optional<RestoredCheckpoint>> r = (*manager)->RestoreLatest();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->step, latest->step);
  EXPECT_EQ(*restored.table->ReadAll(), *expected.table->ReadAll());
  if (incremental) {
    absl::StatusOr<CheckpointManifest> m = ReadManifest(latest->path);
    ASSERT_TRUE(m.ok());
    const auto want = KillTestExport(*expected.dynamic);
    const auto got = KillTestExport(*restored.dynamic);
    ASSERT_TRUE(want.ok() && got.ok());
    EXPECT_GT(want->size(), 500u);
    EXPECT_TRUE(*got == *want) << "the dynamic table differs after restoring " << latest->path
                               << " (delta " << m->delta_index() << ")";
  }
  // The accumulators came back too: one more identical step keeps the two equal.
  ASSERT_TRUE(ApplyKillTestStep(*expected.table, latest->step + 1).ok());
  ASSERT_TRUE(ApplyKillTestStep(*restored.table, latest->step + 1).ok());
  EXPECT_EQ(*restored.table->ReadAll(), *expected.table->ReadAll());
}

INSTANTIATE_TEST_SUITE_P(Delays, CheckpointKillTest,
                         ::testing::Combine(::testing::Values(0, 13, 41), ::testing::Bool()));

}  // namespace
}  // namespace pstrain
