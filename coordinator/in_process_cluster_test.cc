#include "coordinator/in_process_cluster.h"

#include <dirent.h>

#include <set>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cluster/task_health.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kTimeout = absl::Seconds(10);

int CountThreads() {
  int n = 0;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return -1;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n;
}

// gRPC's own threads (executor, timers) wind down a moment after the last server goes; wait for
// the count to come back, with a deadline, instead of asserting at one instant.
bool WaitForThreadCountAtMost(int limit, absl::Duration deadline) {
  absl::Time end = absl::Now() + deadline;
  while (absl::Now() < end) {
    if (CountThreads() <= limit) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return CountThreads() <= limit;
}

TEST(ParseInProcessSpecTest, ValidAndInvalid) {
  absl::StatusOr<InProcessClusterOptions> o = ParseInProcessSpec("in_process:workers=3,ps=2");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->num_workers, 3);
  EXPECT_EQ(o->num_ps, 2);
  o = ParseInProcessSpec("in_process");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->num_workers, 2);
  EXPECT_EQ(o->num_ps, 1);
  EXPECT_THAT(std::string(ParseInProcessSpec("in_process:workers=0").status().message()),
              HasSubstr("workers=0 must be a whole number from 1 to 64"));
  EXPECT_THAT(std::string(ParseInProcessSpec("in_process:gpus=1").status().message()),
              HasSubstr("unknown key \"gpus\""));
  EXPECT_THAT(std::string(ParseInProcessSpec("in_processs").status().message()),
              HasSubstr("expected in_process:workers=N,ps=M"));
}

class InProcessClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    InProcessClusterOptions options;
    options.num_ps = 2;
    options.num_workers = 3;
    absl::StatusOr<std::unique_ptr<InProcessCluster>> cluster = InProcessCluster::Start(options);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
  }

  absl::StatusOr<HealthResponse> Health(const TaskRef& task) {
    return CheckTaskHealth(task, *cluster_->spec().address(task), kTimeout);
  }

  std::unique_ptr<InProcessCluster> cluster_;
};

TEST_F(InProcessClusterTest, Health_EveryTask_AnswersWithItsIdentity) {
  const ClusterSpec& spec = cluster_->spec();
  EXPECT_EQ(spec.num_ps(), 2);
  EXPECT_EQ(spec.num_workers(), 3);
  std::set<uint64_t> incarnations;
  for (const TaskRef& task : spec.AllTasks()) {
    absl::StatusOr<HealthResponse> health = Health(task);
    ASSERT_TRUE(health.ok()) << health.status();
    EXPECT_EQ(health->task().type(), task.type);
    EXPECT_EQ(health->task().index(), task.index);
    EXPECT_EQ(health->address(), *spec.address(task));
    EXPECT_NE(health->incarnation(), 0u);
    EXPECT_EQ(health->incarnation(), *cluster_->Incarnation(task));
    incarnations.insert(health->incarnation());
  }
  EXPECT_EQ(incarnations.size(), 5u) << "incarnation ids should be distinct";
}

TEST_F(InProcessClusterTest, RestartTask_NewIncarnation_OthersKeepTheirs) {
  std::map<TaskRef, uint64_t> before;
  for (const TaskRef& task : cluster_->spec().AllTasks()) {
    absl::StatusOr<HealthResponse> health = Health(task);
    ASSERT_TRUE(health.ok()) << health.status();
    before[task] = health->incarnation();
  }
  const TaskRef restarted{"worker", 1};
  ASSERT_TRUE(cluster_->RestartTask(restarted).ok());
  for (const TaskRef& task : cluster_->spec().AllTasks()) {
    absl::StatusOr<HealthResponse> health = Health(task);
    ASSERT_TRUE(health.ok()) << task.ToString() << ": " << health.status();
    if (task == restarted) {
      EXPECT_NE(health->incarnation(), before[task]) << "restart must change the incarnation";
      EXPECT_EQ(health->address(), *cluster_->spec().address(task)) << "same address";
    } else {
      EXPECT_EQ(health->incarnation(), before[task]) << task.ToString();
    }
  }
}

TEST_F(InProcessClusterTest, StopTask_Unreachable_ThenStartTask_Reachable) {
  const TaskRef ps1{"ps", 1};
  ASSERT_TRUE(cluster_->StopTask(ps1).ok());
  EXPECT_FALSE(cluster_->IsRunning(ps1));
  absl::StatusOr<HealthResponse> down =
      CheckTaskHealth(ps1, *cluster_->spec().address(ps1), absl::Milliseconds(300));
  EXPECT_EQ(down.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(down.status().message()), HasSubstr("ps:1 at localhost:"));
  EXPECT_THAT(std::string(down.status().message()), HasSubstr("unreachable"));

  EXPECT_EQ(cluster_->StopTask(ps1).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(cluster_->StartTask(ps1).ok());
  EXPECT_EQ(cluster_->StartTask(ps1).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Health(ps1).ok());
}

TEST_F(InProcessClusterTest, UnknownTask_InvalidArgument) {
  EXPECT_EQ(cluster_->StopTask({"ps", 7}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cluster_->StartTask({"chief", 0}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cluster_->Incarnation({"worker", 3}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(InProcessClusterTest, Health_WrongTaskAtAddress_FailedPrecondition) {
  // Ask ps:0's address as if it were ps:1: the answer names the mismatch.
  absl::StatusOr<HealthResponse> health =
      CheckTaskHealth({"ps", 1}, *cluster_->spec().address({"ps", 0}), kTimeout);
  EXPECT_EQ(health.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(health.status().message()), HasSubstr("answered as ps:0"));
}

TEST(InProcessClusterShutdownTest, Shutdown_NoLeakedThreads) {
  // A first cluster warms up gRPC's process-wide threads; the second must leave none of its own.
  {
    absl::StatusOr<std::unique_ptr<InProcessCluster>> warm = InProcessCluster::Start({});
    ASSERT_TRUE(warm.ok()) << warm.status();
    ASSERT_TRUE(CheckTaskHealth({"ps", 0}, *(*warm)->spec().address({"ps", 0}), kTimeout).ok());
  }
  ASSERT_TRUE(WaitForThreadCountAtMost(1000, absl::Seconds(1)));
  const int baseline = CountThreads();
  for (int round = 0; round < 3; ++round) {
    InProcessClusterOptions options;
    options.num_ps = 2;
    options.num_workers = 3;
    absl::StatusOr<std::unique_ptr<InProcessCluster>> cluster = InProcessCluster::Start(options);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    for (const TaskRef& task : (*cluster)->spec().AllTasks()) {
      ASSERT_TRUE(CheckTaskHealth(task, *(*cluster)->spec().address(task), kTimeout).ok());
    }
    ASSERT_TRUE((*cluster)->RestartTask({"ps", 0}).ok());
    (*cluster)->Shutdown();
    cluster->reset();
  }
  EXPECT_TRUE(WaitForThreadCountAtMost(baseline, absl::Seconds(10)))
      << "threads before: " << baseline << ", after: " << CountThreads();
}

}  // namespace
}  // namespace pstrain
