// A worker task: a gRPC server running the WorkerService. It runs closures from its registry on a
// thread pool, keeps per-worker resources (datasets), and reaches the ps tasks for the closures.
#ifndef PSTRAIN_WORKER_WORKER_SERVER_H_
#define PSTRAIN_WORKER_WORKER_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cluster/task_identity.h"
#include "worker/closure_registry.h"
#include "common/metrics.h"
#include "worker/mirrored_ps_client.h"

namespace pstrain {

// The least threads a worker runs closures on by default (WorkerServerOptions::
// num_closure_threads): twice the coordinator's default closures in flight per worker.
inline constexpr int kMinClosureThreads = 32;

struct WorkerServerOptions {
  // This task's index in the cluster's "worker" job. Default 0.
  int task_index = 0;
  // Where to listen, "host:port". Port 0 lets the kernel pick one (see WorkerServer::address()).
  // Default "localhost:0".
  std::string listen_address = "localhost:0";
  // The closures and datasets it can run. Default (nullptr): the built-in ones only
  // (RegisterBuiltinClosures).
  std::shared_ptr<const ClosureRegistry> registry;
  // Addresses of the ps tasks, index = ps task. Default: none (closures can't reach ps tasks).
  std::vector<std::string> ps_addresses;
  // Number of workers in the cluster (datasets shard by it). Default 1.
  int num_workers = 1;
  // Threads running closures. Default 0: 4 per core, since closures mostly wait on ps RPCs, and
  // at least kMinClosureThreads. Fewer than the closures the coordinator sends at once
  // (ClusterCoordinatorOptions::max_inflight_per_worker) can stall a job whose closures wait on
  // one another: a closure waits until the rows dealt with the closures before it arrived
  // (models/tabular/example_stream.h, DealtStream::Next), and with every thread so waiting, an
  // earlier closure would sit in the queue behind them.
  int num_closure_threads = 0;
  // Synchronous training (multi-worker mirrored): with a group, the ps tasks from
  // mirror.replica_ps_begin on are this worker's own replica of every variable, and each update's
  // gradients are all-reduced across the group first (worker/mirrored_ps_client.h); closures train
  // on replica group->rank()'s share of each batch. Default: no group (asynchronous training).
  MirrorOptions mirror;
  // Makes the client of ps task i when that task runs in this process (a null return: the task
  // is reached over gRPC, as the others). The synchronous strategies' workers reach their own
  // replica this way (PsServer::NewLocalClient). Default: none.
  std::function<std::unique_ptr<PsClient>(int ps_task)> local_ps;
  // Where this worker counts its requests and closures (common/metrics.h; not owned, must
  // outlive the server). Default null: none.
  MetricsRegistry* metrics = nullptr;
};

// A running worker task. Thread-safe. Destroying it shuts the server down.
class WorkerServer {
 public:
  // Errors: kInvalidArgument for a malformed address, kUnavailable if it can't be bound.
  static absl::StatusOr<std::unique_ptr<WorkerServer>> Start(const WorkerServerOptions& options);

  virtual ~WorkerServer() = default;

  virtual const TaskIdentity& identity() const = 0;
  const std::string& address() const { return identity().address; }
  int port() const { return identity().port(); }

  // Stops accepting calls, waits for running closures and handlers, then stops the pool.
  virtual void Shutdown() = 0;
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_WORKER_SERVER_H_
