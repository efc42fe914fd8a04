// An in-process cluster: N ps and M worker tasks in this process, each a real gRPC server on a
// picked localhost port. The job's default (`coordinator --cluster_spec=in_process:...`), and what
// tests use.
#ifndef PSTRAIN_COORDINATOR_IN_PROCESS_CLUSTER_H_
#define PSTRAIN_COORDINATOR_IN_PROCESS_CLUSTER_H_

#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cluster/cluster_spec.h"
#include "common/metrics.h"
#include "common/metrics_http.h"
#include "ps/ps_server.h"
#include "worker/worker_server.h"

namespace pstrain {

struct InProcessClusterOptions {
  // Number of worker tasks. Default 2; at least 1.
  int num_workers = 2;
  // Number of ps tasks. Default 1; at least 1.
  int num_ps = 1;
  // Host part of every task's address. Default "localhost".
  std::string host = "localhost";
  // Each ps task's memory budget in bytes (see PsServerOptions). Default 0: none.
  int64_t ps_memory_budget_bytes = 0;
  // Where each ps task's disk tiers go (PsServerOptions::disk_dir). Default empty: temporary.
  std::string ps_disk_dir;
  // The closures and datasets every worker can run. Default (nullptr): the built-in ones.
  std::shared_ptr<const ClosureRegistry> registry;
  // Synchronous training: every worker's updates go through this group (WorkerServerOptions::
  // mirror). Default: none.
  MirrorOptions mirror;
  // ps tasks outside this cluster ("host:port"), listed first in its spec (ps 0 .. K-1), before
  // the num_ps it starts itself; it neither starts nor stops them. Default: none. The hybrid
  // strategy's workers reach the shared ps tasks this way.
  std::vector<std::string> external_ps;
  // Prometheus metrics (common/metrics.h): -1 (the default) none; 0 each task serves its own at
  // a picked port; P > 0 the tasks serve at P, P+1, ... (ps tasks first, then workers), on `host`.
  int metrics_port = -1;
};

// Parses "in_process:workers=2,ps=2" (either key may be left out; defaults as above).
// Errors: kInvalidArgument naming the bad key or value.
absl::StatusOr<InProcessClusterOptions> ParseInProcessSpec(absl::string_view text);

// Thread-safe. Destroying it shuts every task down.
class InProcessCluster {
 public:
  // Picks ports and starts every task. Errors: kUnavailable if a server can't be started.
  static absl::StatusOr<std::unique_ptr<InProcessCluster>> Start(
      const InProcessClusterOptions& options);

  ~InProcessCluster();
  InProcessCluster(const InProcessCluster&) = delete;
  InProcessCluster& operator=(const InProcessCluster&) = delete;

  // The cluster's spec (no "task": this process plays every role).
  const ClusterSpec& spec() const { return spec_; }

  // Stops one task's server, dropping whatever it held in memory, like a crash of that task.
  // Errors: kInvalidArgument for a task not in the cluster (or external); kFailedPrecondition if
  // already stopped.
  absl::Status StopTask(const TaskRef& task);
  // Starts a stopped task again at the same address, with a new incarnation.
  // Errors: kInvalidArgument (unknown task), kFailedPrecondition (running), kUnavailable (port taken).
  absl::Status StartTask(const TaskRef& task);
  // StopTask then StartTask.
  absl::Status RestartTask(const TaskRef& task);
  bool IsRunning(const TaskRef& task) const;
  // The running task's incarnation id. Errors: as StopTask.
  absl::StatusOr<uint64_t> Incarnation(const TaskRef& task) const;

  // Stops every task. Idempotent.
  void Shutdown();

  // Where each task serves its metrics ("ps:0" -> "localhost:9091"); empty without metrics.
  std::map<std::string, std::string> metrics_addresses() const;
  // Every task's metrics now, in Prometheus's text format, one task after another; empty without
  // metrics. (What a scrape of each address above returns, without the HTTP.)
  std::string RenderMetrics() const;

 private:
  explicit InProcessCluster(ClusterSpec spec) : spec_(std::move(spec)) {}
  absl::Status StartTaskLocked(const TaskRef& task) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckKnown(const TaskRef& task) const;

  const ClusterSpec spec_;
  int num_external_ps_ = 0;
  std::shared_ptr<const ClosureRegistry> registry_;
  MirrorOptions mirror_;
  // Metrics: each task's registry (kept across restarts) and its HTTP server.
  struct TaskMetrics {
    std::unique_ptr<MetricsRegistry> registry;
    std::unique_ptr<MetricsHttpServer> server;
  };
  std::map<TaskRef, TaskMetrics> metrics_;
  int64_t ps_memory_budget_bytes_ = 0;
  std::string ps_disk_dir_;
  mutable absl::Mutex mu_;
  // Below: guarded by mu_. A stopped task has no entry.
  std::map<int, std::unique_ptr<PsServer>> ps_ ABSL_GUARDED_BY(mu_);
  std::map<int, std::unique_ptr<WorkerServer>> workers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pstrain

#endif  // PSTRAIN_COORDINATOR_IN_PROCESS_CLUSTER_H_
