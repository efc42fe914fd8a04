// The C++ counterpart of TensorFlow's ClusterCoordinator: schedules closures onto workers, returns
// their results as RemoteValues, keeps per-worker datasets, and survives worker failures.
//
// Error semantics (as TF): a closure's own error is recorded (the first one only); running closures
// finish, queued closures are cancelled (their Fetch() says kCancelled); the error is returned once
// by Join(), Done() or Schedule(), and after that scheduling works again. A worker that fails (its
// calls fail in transport, or it comes back with a new incarnation) has its closures put back in the
// queue to run elsewhere; the coordinator reconnects with backoff and, when the worker returns,
// re-creates its per-worker datasets before giving it work again.
//
// ps failures (beyond TF, where they end the job): a closure that could not reach a ps, or found
// it without its shards, comes back ABORTED. Dispatch then stops while the coordinator checks every
// ps: it waits (up to ps_unavailable_timeout) for an unreachable one, and a ps that came back
// without its shards gets them re-created and then `on_ps_restarted` (a checkpoint restore) before
// dispatch resumes. The closures go back in the queue meanwhile; none fails because of it.
#ifndef PSTRAIN_COORDINATOR_CLUSTER_COORDINATOR_H_
#define PSTRAIN_COORDINATOR_CLUSTER_COORDINATOR_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "common/tensor.h"
#include "cluster/cluster_spec.h"
#include "coordinator/closure_dealer.h"
#include "coordinator/variable_creator.h"
#include "coordinator/worker_client.h"
#include "worker/ps_connection.h"

namespace pstrain {

struct CoordinatorOptions {
  // Closures queued but not yet running, at most; Schedule() blocks when full. Default 1024.
  int max_queued_closures = 1024;
  // Closures running on one worker at once. Default 16 (enough to hide round trips).
  int max_inflight_per_worker = 16;
  // How often a closure that hit a ps failure is run again before its error is surfaced. Default 5.
  // Each failure holds dispatch while the coordinator checks the ps tasks, and failures close
  // together hold it longer (reconnect_backoff_initial doubling, up to reconnect_backoff_max), so
  // the retries span the workers' own reconnect backoff.
  int ps_failure_retries = 5;
  // Reconnect backoff for a failed worker: first wait, and the cap. Defaults 100 ms and 5 s.
  absl::Duration reconnect_backoff_initial = absl::Milliseconds(100);
  absl::Duration reconnect_backoff_max = absl::Seconds(5);
  // Called when a ps task is back without its shards (it restarted), after they were re-created
  // with their initial values and while no closure runs: e.g. restore them from the latest
  // checkpoint (CheckpointManager::RestorePs). An error fails the job. Default: none (the shards
  // start again from their initial values, and a warning says so).
  std::function<absl::Status(int ps)> on_ps_restarted;
  // How long closures wait for an unreachable ps task before the job fails. Default 10 minutes.
  absl::Duration ps_unavailable_timeout = absl::Minutes(10);
  // Which ps tasks take fixed variables and which dynamic tables. Default: all take both.
  PlacementOptions placement;
  // What fixed variables' optimizers take when their spec leaves staleness scaling unset
  // (ps/staleness.h). Default: TrainerOptions's (the coordinator's own default is NONE).
  OptimizerDef::StalenessScaling staleness_scaling = OptimizerDef::STALENESS_NONE;
  // Where the coordinator counts closures, failures and recoveries (common/metrics.h; not owned,
  // must outlive the coordinator). Default null: none.
  MetricsRegistry* metrics = nullptr;
};

namespace coordinator_internal {
struct ValueState;
}  // namespace coordinator_internal

// The result of a scheduled closure. Copyable handle to shared state; thread-safe.
//
//   PENDING --(ran OK)--> READY
//      |  \--(its own error / retries spent)--> FAILED
//       \---(another closure failed while this one was queued)--> CANCELLED
//   (a worker failure sends a running closure back to PENDING)
class RemoteValue {
 public:
  RemoteValue() = default;
  // Blocks until the closure finished; its outputs, or its error (kCancelled if cancelled).
  absl::StatusOr<std::vector<Tensor>> Fetch() const;
  // Whether Fetch() would return at once.
  bool IsReady() const;

  // For the coordinator's implementation.
  explicit RemoteValue(std::shared_ptr<coordinator_internal::ValueState> state)
      : state_(std::move(state)) {}

 private:
  std::shared_ptr<coordinator_internal::ValueState> state_;
};

// A per-worker dataset: each worker holds its own instance (its shard). Pass it to Schedule() and
// the closure receives its own worker's instance.
struct PerWorkerDataset {
  int64_t resource_id = 0;
};

class ClusterCoordinator {
 public:
  // Connects to the tasks of `spec` (workers and ps) and starts dispatching.
  static absl::StatusOr<std::unique_ptr<ClusterCoordinator>> Create(
      const ClusterSpec& spec, const CoordinatorOptions& options = {});
  // Over given clients (fakes in tests); `ps` may be null if closures need no ps.
  static absl::StatusOr<std::unique_ptr<ClusterCoordinator>> Create(
      std::vector<std::unique_ptr<WorkerClient>> workers, std::unique_ptr<PsConnection> ps,
      const CoordinatorOptions& options = {});

  virtual ~ClusterCoordinator() = default;

  // Queues closure `name` with `args` (and per-worker `datasets`) and returns its value at once;
  // blocks while the queue is full. With a `dealer` (coordinator/closure_dealer.h), the closure goes
  // only to a worker the dealer lets take it, with the dealer's extra arguments after `args`, and
  // the dealer hears how it ended and which workers were lost. Errors: a pending error from an
  // earlier closure (returned once; nothing is scheduled then).
  virtual absl::StatusOr<RemoteValue> Schedule(const std::string& name, std::vector<Tensor> args,
                                               std::vector<PerWorkerDataset> datasets = {},
                                               std::shared_ptr<ClosureDealer> dealer = nullptr) = 0;
  // Blocks until every scheduled closure has finished; returns the first closure error (once).
  virtual absl::Status Join() = 0;
  // Whether every scheduled closure has finished; the first closure error (once) instead.
  virtual absl::StatusOr<bool> Done() = 0;

  // Creates a dataset on every worker: worker i's instance is `dataset_fn`(i, num_workers, args).
  // Errors: those of the workers reachable now (e.g. kNotFound for an unknown dataset function).
  virtual absl::StatusOr<PerWorkerDataset> CreatePerWorkerDataset(const std::string& dataset_fn,
                                                                  std::vector<Tensor> args) = 0;

  // Runs `fn` while no closure runs: stops dispatching, waits for the running closures to finish,
  // runs `fn`, and resumes. Closures scheduled meanwhile wait in the queue. For checkpoints.
  // Returns fn's status.
  virtual absl::Status RunExclusive(const std::function<absl::Status()>& fn) = 0;

  // Checks every ps task now, as after a closure's ps failure: waits (up to
  // ps_unavailable_timeout) for an unreachable one, and re-creates (and restores, through
  // on_ps_restarted) one that restarted. Not from inside RunExclusive. Errors: kUnavailable when a
  // ps stays unreachable; on_ps_restarted's.
  virtual absl::Status RecoverPs() = 0;

  // Creates variables on the ps tasks (partitioner and round-robin placement).
  virtual VariableCreator* variables() = 0;
  virtual PsConnection* ps() = 0;
  virtual int num_workers() const = 0;
  // Workers currently taking work.
  virtual int num_healthy_workers() const = 0;
};

}  // namespace pstrain

#endif  // PSTRAIN_COORDINATOR_CLUSTER_COORDINATOR_H_
