// A real kill -9 of a process that saves checkpoints back to back (so the kill lands inside a
// save most of the time): the latest complete checkpoint left behind restores bit-exact, values
// and Adagrad accumulators, into a different partitioning.
#include <csignal>
#include <filesystem>
#include <thread>

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

  explicit Replay(int num_ps, int shards) {
    InProcessClusterOptions o;
    o.num_ps = num_ps;
    o.num_workers = 1;
    cluster = std::move(*InProcessCluster::Start(o));
    coordinator = std::move(*ClusterCoordinator::Create(cluster->spec()));
    VariableSpec spec = KillTestTableSpec();
    spec.partitioner.num_shards = shards;
    table = *coordinator->variables()->Create(spec);
  }
};

class CheckpointKillTest : public ::testing::TestWithParam<int> {};

TEST_P(CheckpointKillTest, KilledWhileSaving_LatestCompleteRestoresBitExact) {
  const std::string dir = FreshTempDir("kill_" + std::to_string(GetParam()));
  const std::string out = FreshTempDir("kill_out_" + std::to_string(GetParam()));
  auto writer = Subprocess::Start("writer", {RunfilePath("tests/checkpoint_writer"), "--dir=" + dir},
                                  {}, out);
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->WaitForStdout("saved 3\n", absl::Seconds(60)).ok()) << (*writer)->Stderr();
  absl::SleepFor(absl::Milliseconds(GetParam()));  // land somewhere in a later save
  (*writer)->Signal(SIGKILL);
  ASSERT_EQ(*(*writer)->Wait(absl::Seconds(30)), 128 + SIGKILL);

  absl::StatusOr<CheckpointEntry> latest = LatestCheckpoint(dir);
  ASSERT_TRUE(latest.ok()) << latest.status();
  ASSERT_GE(latest->step, 3);

  Replay expected(/*num_ps=*/2, /*shards=*/3);
  for (int64_t step = 1; step <= latest->step; ++step) {
    ASSERT_TRUE(ApplyKillTestStep(*expected.table, step).ok());
  }
  Replay restored(/*num_ps=*/1, /*shards=*/4);
  CheckpointOptions options;
  options.dir = dir;
  auto manager = CheckpointManager::Create(options, restored.coordinator->ps()->clients(),
                                           restored.coordinator->variables());
  ASSERT_TRUE(manager.ok());
  absl::StatusOr<std::optional<RestoredCheckpoint>> r = (*manager)->RestoreLatest();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->step, latest->step);
  EXPECT_EQ(*restored.table->ReadAll(), *expected.table->ReadAll());
  // The accumulators came back too: one more identical step keeps the two equal.
  ASSERT_TRUE(ApplyKillTestStep(*expected.table, latest->step + 1).ok());
  ASSERT_TRUE(ApplyKillTestStep(*restored.table, latest->step + 1).ok());
  EXPECT_EQ(*restored.table->ReadAll(), *expected.table->ReadAll());
}

// Milliseconds between the third save and the kill.
INSTANTIATE_TEST_SUITE_P(Delays, CheckpointKillTest, ::testing::Values(0, 13, 41));

}  // namespace
}  // namespace pstrain
