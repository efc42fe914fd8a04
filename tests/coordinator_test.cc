// TensorFlow's ClusterCoordinator scenarios on an in-process cluster with real gRPC.
#include <atomic>
#include <set>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "coordinator/cluster_coordinator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "coordinator/in_process_cluster.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

using Outputs = absl::StatusOr<std::vector<Tensor>>;

// Everything the test closures share with the test body.
// Every caller of Arrive() waits until `needed` have arrived.
class Barrier {
 public:
  explicit Barrier(int needed) : needed_(needed) {}
  void Arrive() {
    absl::MutexLock lock(&mu_);
    ++arrived_;
    mu_.Await(absl::Condition(
        +[](Barrier* b) ABSL_NO_THREAD_SAFETY_ANALYSIS { return b->arrived_ >= b->needed_; }, this));
  }

 private:
  absl::Mutex mu_;
  int arrived_ ABSL_GUARDED_BY(mu_) = 0;
  const int needed_;
};

struct Hooks {
  absl::Notification gate1, gate2;
  std::unique_ptr<Barrier> barrier;
  std::atomic<int> ps_failures_left{0};
  std::atomic<bool> datasets_fail{false};
};

std::shared_ptr<ClosureRegistry> MakeRegistry(Hooks* hooks) {
  auto registry = std::make_shared<ClosureRegistry>();
  EXPECT_TRUE(RegisterBuiltinClosures(registry.get()).ok());
  // Adds args[0] (float) to variable "v" (shape [1]).
  EXPECT_TRUE(registry
                  ->RegisterClosure("add_to_v",
                                    [](ClosureContext& ctx, absl::Span<const Tensor> args) -> Outputs {
                                      absl::StatusOr<ShardedVariable> v = ctx.ps->Variable("v");
                                      if (!v.ok()) return v.status();
                                      const float delta = args[0].scalar<float>();
                                      absl::Status s = v->AssignAdd({0}, &delta);
                                      if (!s.ok()) return s;
                                      return std::vector<Tensor>{Tensor::Scalar<int64_t>(ctx.worker_index)};
                                    })
                  .ok());
  EXPECT_TRUE(registry
                  ->RegisterClosure("wait_gate1",
                                    [hooks](ClosureContext&, absl::Span<const Tensor>) -> Outputs {
                                      hooks->gate1.WaitForNotification();
                                      return std::vector<Tensor>{Tensor::Scalar<int64_t>(1)};
                                    })
                  .ok());
  EXPECT_TRUE(registry
                  ->RegisterClosure("fail_after_gate2",
                                    [hooks](ClosureContext&, absl::Span<const Tensor>) -> Outputs {
                                      hooks->gate2.WaitForNotification();
                                      return absl::InvalidArgumentError("intentional failure");
                                    })
                  .ok());
  // Sums its worker's dataset shard, after all workers hold one closure each (the barrier).
  EXPECT_TRUE(registry
                  ->RegisterClosure("sum_dataset",
                                    [hooks](ClosureContext& ctx, absl::Span<const Tensor>) -> Outputs {
                                      hooks->barrier->Arrive();
                                      int64_t sum = 0;
                                      std::vector<Tensor> element;
                                      while (true) {
                                        absl::StatusOr<bool> more = ctx.datasets[0]->Next(&element);
                                        if (!more.ok()) return more.status();
                                        if (!*more) break;
                                        sum += element[0].scalar<int64_t>();
                                      }
                                      return std::vector<Tensor>{Tensor::Scalar<int64_t>(sum)};
                                    })
                  .ok());
  // A dataset whose creation fails (kFailedPrecondition) while datasets_fail is set.
  EXPECT_TRUE(registry
                  ->RegisterDataset("failing",
                                    [hooks](int, int, absl::Span<const Tensor>)
                                        -> absl::StatusOr<std::unique_ptr<Dataset>> {
                                      if (hooks->datasets_fail) {
                                        return absl::FailedPreconditionError("no GPU here");
                                      }
                                      return absl::UnimplementedError("only failing is tested");
                                    })
                  .ok());
  // Fails as a ps failure (kUnavailable inside the closure) while ps_failures_left > 0.
  EXPECT_TRUE(registry
                  ->RegisterClosure("flaky_ps",
                                    [hooks](ClosureContext&, absl::Span<const Tensor>) -> Outputs {
                                      if (hooks->ps_failures_left.fetch_sub(1) > 0) {
                                        return absl::UnavailableError("ps:0 at x: connection refused");
                                      }
                                      return std::vector<Tensor>{Tensor::Scalar<int64_t>(7)};
                                    })
                  .ok());
  return registry;
}

class CoordinatorTest : public ::testing::Test {
 protected:
  void StartCluster(int workers, int ps, CoordinatorOptions options = {}) {
    InProcessClusterOptions cluster_options;
    cluster_options.num_workers = workers;
    cluster_options.num_ps = ps;
    cluster_options.registry = MakeRegistry(&hooks_);
    absl::StatusOr<std::unique_ptr<InProcessCluster>> cluster =
        InProcessCluster::Start(cluster_options);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    options.reconnect_backoff_initial = absl::Milliseconds(20);
    options.reconnect_backoff_max = absl::Milliseconds(200);
    absl::StatusOr<std::unique_ptr<ClusterCoordinator>> coordinator =
        ClusterCoordinator::Create(cluster_->spec(), options);
    ASSERT_TRUE(coordinator.ok()) << coordinator.status();
    coordinator_ = std::move(*coordinator);
  }

  void CreateV() {
    VariableSpec spec;
    spec.name = "v";
    spec.shape = {1};
    ASSERT_TRUE(coordinator_->variables()->Create(spec).ok());
  }

  float ReadV() {
    absl::StatusOr<ShardedVariable> v = coordinator_->ps()->Variable("v");
    EXPECT_TRUE(v.ok()) << v.status();
    absl::StatusOr<std::string> bytes = v->ReadAll();
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    float value = 0;
    std::memcpy(&value, bytes->data(), 4);
    return value;
  }

  void TearDown() override {
    if (!hooks_.gate1.HasBeenNotified()) hooks_.gate1.Notify();
    if (!hooks_.gate2.HasBeenNotified()) hooks_.gate2.Notify();
    coordinator_.reset();
    cluster_.reset();
  }

  Hooks hooks_;
  std::unique_ptr<InProcessCluster> cluster_;
  std::unique_ptr<ClusterCoordinator> coordinator_;
};

TEST_F(CoordinatorTest, AssignAddClosures_FiveThenFiveMore_TenThenTwenty) {
  StartCluster(/*workers=*/2, /*ps=*/1);
  CreateV();
  EXPECT_TRUE(coordinator_->Join().ok()) << "Join with nothing scheduled returns at once";
  for (int round = 1; round <= 2; ++round) {
    for (int i = 0; i < 5; ++i) {
      ASSERT_TRUE(coordinator_->Schedule("add_to_v", {Tensor::Scalar<float>(2.0f)}).ok());
    }
    ASSERT_TRUE(coordinator_->Join().ok());
    EXPECT_EQ(ReadV(), 10.0f * round);
    absl::StatusOr<bool> done = coordinator_->Done();
    ASSERT_TRUE(done.ok());
    EXPECT_TRUE(*done);
  }
}

TEST_F(CoordinatorTest, ClosureError_JoinRaisesOnce_QueuedCancelled_ThenSchedulingWorks) {
  CoordinatorOptions options;
  options.max_inflight_per_worker = 1;  // so that later closures wait in the queue
  StartCluster(/*workers=*/2, /*ps=*/1, options);
  absl::StatusOr<RemoteValue> running = coordinator_->Schedule("wait_gate1", {});
  absl::StatusOr<RemoteValue> failing = coordinator_->Schedule("fail_after_gate2", {});
  absl::StatusOr<RemoteValue> queued = coordinator_->Schedule("wait_gate1", {});
  ASSERT_TRUE(running.ok() && failing.ok() && queued.ok());

  hooks_.gate2.Notify();  // the failing closure fails now; `queued` is still in the queue
  absl::StatusOr<std::vector<Tensor>> failed = failing->Fetch();
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(failed.status().message()), HasSubstr("intentional failure"));
  absl::StatusOr<std::vector<Tensor>> cancelled = queued->Fetch();
  EXPECT_EQ(cancelled.status().code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(std::string(cancelled.status().message()), HasSubstr("another closure failed"));

  hooks_.gate1.Notify();  // the running closure finishes normally
  absl::Status joined = coordinator_->Join();
  EXPECT_EQ(joined.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(joined.message()), HasSubstr("intentional failure"));
  ASSERT_TRUE(running->Fetch().ok());

  // Raised once: the next calls succeed and scheduling works again.
  EXPECT_TRUE(coordinator_->Join().ok());
  absl::StatusOr<RemoteValue> again = coordinator_->Schedule("echo", {Tensor::Scalar<int64_t>(5)});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(coordinator_->Join().ok());
  EXPECT_EQ((*again->Fetch())[0].scalar<int64_t>(), 5);
}

TEST_F(CoordinatorTest, ClosureError_RaisedByDoneOrSchedule) {
  StartCluster(/*workers=*/1, /*ps=*/1);
  hooks_.gate2.Notify();
  absl::StatusOr<RemoteValue> failing = coordinator_->Schedule("fail_after_gate2", {});
  ASSERT_TRUE(failing.ok());
  failing->Fetch().status().IgnoreError();  // wait until it has failed
  absl::StatusOr<RemoteValue> next = coordinator_->Schedule("echo", {});
  EXPECT_EQ(next.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(coordinator_->Schedule("echo", {}).ok()) << "raised once";
  EXPECT_TRUE(coordinator_->Join().ok());
  failing = coordinator_->Schedule("fail_after_gate2", {});
  ASSERT_TRUE(failing.ok());
  failing->Fetch().status().IgnoreError();  // wait until it has failed
  absl::StatusOr<bool> done = coordinator_->Done();
  EXPECT_THAT(std::string(done.status().message()), HasSubstr("intentional failure"));
  done = coordinator_->Done();
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(*done);
}

TEST_F(CoordinatorTest, Schedule_QueueFull_BlocksUntilASlotFrees) {
  CoordinatorOptions options;
  options.max_queued_closures = 2;
  options.max_inflight_per_worker = 1;
  StartCluster(/*workers=*/1, /*ps=*/1, options);
  // One running (blocked on gate1) and two queued: the queue is full.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(coordinator_->Schedule("wait_gate1", {}).ok());
  absl::Notification scheduled;
  std::thread scheduler([&] {
    EXPECT_TRUE(coordinator_->Schedule("echo", {}).ok());
    scheduled.Notify();
  });
  EXPECT_FALSE(scheduled.WaitForNotificationWithTimeout(absl::Milliseconds(300)))
      << "Schedule must block while the queue is full";
  hooks_.gate1.Notify();
  EXPECT_TRUE(scheduled.WaitForNotificationWithTimeout(absl::Seconds(30)));
  scheduler.join();
  EXPECT_TRUE(coordinator_->Join().ok());
}

TEST_F(CoordinatorTest, UnknownClosure_NotFoundNamingIt) {
  StartCluster(/*workers=*/1, /*ps=*/1);
  absl::StatusOr<RemoteValue> v = coordinator_->Schedule("no_such_closure", {});
  ASSERT_TRUE(v.ok());
  absl::Status s = coordinator_->Join();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()), HasSubstr("unknown closure \"no_such_closure\""));
}

TEST_F(CoordinatorTest, PerWorkerDataset_RangeTenOverFiveWorkers_ShardSums) {
  CoordinatorOptions options;
  options.max_inflight_per_worker = 1;
  StartCluster(/*workers=*/5, /*ps=*/1, options);
  hooks_.barrier = std::make_unique<Barrier>(5);
  absl::StatusOr<PerWorkerDataset> dataset =
      coordinator_->CreatePerWorkerDataset("range", {Tensor::Scalar<int64_t>(10)});
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  std::vector<RemoteValue> values;
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<RemoteValue> v = coordinator_->Schedule("sum_dataset", {}, {*dataset});
    ASSERT_TRUE(v.ok());
    values.push_back(*v);
  }
  ASSERT_TRUE(coordinator_->Join().ok());
  std::vector<int64_t> sums;
  for (const RemoteValue& v : values) sums.push_back((*v.Fetch())[0].scalar<int64_t>());
  EXPECT_THAT(sums, UnorderedElementsAre(5, 7, 9, 11, 13));

  absl::StatusOr<PerWorkerDataset> unknown = coordinator_->CreatePerWorkerDataset("nope", {});
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("unknown dataset \"nope\""));
}

TEST_F(CoordinatorTest, WorkersKilledAndRestarted_AllStepsComplete) {
  StartCluster(/*workers=*/3, /*ps=*/1);
  CreateV();
  std::vector<RemoteValue> values;
  for (int step = 0; step < 10; ++step) {
    if (step == 3) ASSERT_TRUE(cluster_->StopTask({"worker", 1}).ok());
    if (step == 5) ASSERT_TRUE(cluster_->StopTask({"worker", 2}).ok());
    if (step == 7) ASSERT_TRUE(cluster_->StartTask({"worker", 1}).ok());
    if (step == 8) ASSERT_TRUE(cluster_->StartTask({"worker", 2}).ok());
    // Two closures a step; wait for the step, so that kills and restarts land between steps and
    // closures get dispatched to dead workers.
    for (int k = 0; k < 2; ++k) {
      absl::StatusOr<RemoteValue> v =
          coordinator_->Schedule("add_to_v", {Tensor::Scalar<float>(1.0f)});
      ASSERT_TRUE(v.ok()) << v.status();
      values.push_back(*v);
    }
    EXPECT_TRUE(values.back().Fetch().ok());
  }
  ASSERT_TRUE(coordinator_->Join().ok());
  for (const RemoteValue& v : values) EXPECT_TRUE(v.Fetch().ok());
  EXPECT_GE(ReadV(), 20.0f) << "every closure ran at least once";
}

TEST_F(CoordinatorTest, FetchedValue_AfterItsWorkerDied_StillReturned) {
  StartCluster(/*workers=*/2, /*ps=*/1);
  absl::StatusOr<RemoteValue> v = coordinator_->Schedule("echo", {Tensor::Scalar<int64_t>(42)});
  ASSERT_TRUE(v.ok());
  ASSERT_TRUE(coordinator_->Join().ok());
  ASSERT_TRUE(cluster_->StopTask({"worker", 0}).ok());
  ASSERT_TRUE(cluster_->StopTask({"worker", 1}).ok());
  absl::StatusOr<std::vector<Tensor>> out = v->Fetch();
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[0].scalar<int64_t>(), 42);
}

TEST_F(CoordinatorTest, WorkerRestart_PerWorkerDatasetRebuilt) {
  StartCluster(/*workers=*/1, /*ps=*/1);
  hooks_.barrier = std::make_unique<Barrier>(1);
  absl::StatusOr<PerWorkerDataset> dataset =
      coordinator_->CreatePerWorkerDataset("range", {Tensor::Scalar<int64_t>(4)});
  ASSERT_TRUE(dataset.ok());
  absl::StatusOr<RemoteValue> first = coordinator_->Schedule("sum_dataset", {}, {*dataset});
  ASSERT_TRUE(coordinator_->Join().ok());
  EXPECT_EQ((*first->Fetch())[0].scalar<int64_t>(), 6);
  ASSERT_TRUE(cluster_->RestartTask({"worker", 0}).ok());
  hooks_.barrier = std::make_unique<Barrier>(1);
  absl::StatusOr<RemoteValue> second = coordinator_->Schedule("sum_dataset", {}, {*dataset});
  ASSERT_TRUE(coordinator_->Join().ok());
  EXPECT_EQ((*second->Fetch())[0].scalar<int64_t>(), 6) << "a fresh iterator after the restart";
}

// A dataset registered while its worker was down, that the worker then can't create when it comes
// back: the job fails with that error instead of its closures waiting for the worker forever.
TEST_F(CoordinatorTest, WorkerBackButItsDatasetFails_JobFailsWithThatError) {
  StartCluster(/*workers=*/1, /*ps=*/1);
  ASSERT_TRUE(cluster_->StopTask({"worker", 0}).ok());
  // The worker is down: nothing to create it on, so this succeeds (it is created on rejoining).
  absl::StatusOr<PerWorkerDataset> dataset = coordinator_->CreatePerWorkerDataset("failing", {});
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  hooks_.datasets_fail = true;
  ASSERT_TRUE(cluster_->StartTask({"worker", 0}).ok());
  // (Before the fix, this waited forever: the closure queued for a worker that never got ready.)
  absl::StatusOr<RemoteValue> value = coordinator_->Schedule("sum_dataset", {}, {*dataset});
  const absl::Status job = value.ok() ? coordinator_->Join() : value.status();
  EXPECT_EQ(job.code(), absl::StatusCode::kFailedPrecondition) << job;
  EXPECT_THAT(std::string(job.message()), HasSubstr("no GPU here"));
}

TEST_F(CoordinatorTest, PsFailureInClosure_RetriedThenSurfaced) {
  StartCluster(/*workers=*/1, /*ps=*/1);
  hooks_.ps_failures_left = 2;
  absl::StatusOr<RemoteValue> v = coordinator_->Schedule("flaky_ps", {});
  ASSERT_TRUE(coordinator_->Join().ok());
  EXPECT_EQ((*v->Fetch())[0].scalar<int64_t>(), 7);
  hooks_.ps_failures_left = 10;
  v = coordinator_->Schedule("flaky_ps", {});
  absl::Status s = coordinator_->Join();
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(s.message()), HasSubstr("ps failure"));
}

}  // namespace
}  // namespace pstrain
