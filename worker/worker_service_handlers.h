// The WorkerService's methods on the bytes of a request: what worker_server runs for each call
// (through common/raw_service.h, closures on its pool), and what the fuzz target drives directly
// (tests/fuzz/worker_service_fuzz.cc). Every request is parsed here; one that doesn't parse is
// INVALID_ARGUMENT naming the method.
#ifndef PSTRAIN_WORKER_WORKER_SERVICE_HANDLERS_H_
#define PSTRAIN_WORKER_WORKER_SERVICE_HANDLERS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "cluster/task_identity.h"
#include "common/metrics.h"
#include "common/raw_service.h"
#include "google/protobuf/descriptor.h"
#include "proto/worker_service.pb.h"
#include "worker/closure_registry.h"
#include "worker/ps_connection.h"

namespace pstrain {

// Thread-safe: calls run concurrently. RunClosure and CreateResource block (closures call the ps
// tasks): the server runs them on its pool, never on gRPC's threads.
class WorkerServiceHandlers {
 public:
  WorkerServiceHandlers(std::shared_ptr<const ClosureRegistry> registry,
                        std::unique_ptr<PsConnection> ps, int num_workers);

  // pstrain.WorkerService.
  static const google::protobuf::ServiceDescriptor* Service();
  // Whether method number `method` blocks (runs closures or makes datasets).
  static bool Blocks(int method);

  // Synchronous training: closures train on replica `index` of `count`'s share of each batch,
  // their steps in order (ClosureContext::steps_in_order). Default: not synchronous, 0 of 1. Set
  // before serving.
  void SetReplica(int index, int count) {
    replica_index_ = index;
    num_replicas_ = count;
    synchronous_ = true;
  }

  // Counts closures into `registry` (not owned; it must outlive the handlers). Set before serving.
  // Series (by closure name): closures run and failed, their seconds (the step latency of a
  // training closure), and the examples their results report (a training closure's second output).
  void SetMetrics(MetricsRegistry* registry) { metrics_ = registry; }

  // The identity Health reports and incarnations are checked against (set once the port is known).
  void SetIdentity(const TaskIdentity& identity) { identity_.Set(identity); }

  // Serves one call of Service()->method(method) on `request` (its bytes, in pieces).
  // Errors: the method's own; kInvalidArgument "<Method>: malformed request" for bytes that don't
  // parse; kUnimplemented for a method number out of range.
  absl::Status Serve(int method, const std::vector<absl::string_view>& request,
                     const ReplyAllocator& reply);

 private:
  // One per-worker resource: this worker's dataset instance. Closures using it take its lock,
  // unless it says it is shared (thread-safe).
  struct Resource {
    absl::Mutex mu;
    std::unique_ptr<Dataset> dataset;
  };

  absl::Status CheckIncarnation(uint64_t expected, const TaskIdentity& me);
  absl::Status Create(const CreateResourceRequest& request);
  absl::Status Run(const RunClosureRequest& request, RunClosureResponse* response);

  // The closure's series (made on its first run).
  struct ClosureSeries {
    Counter* runs;
    Counter* failures;
    Counter* examples;
    Histogram* seconds;
  };
  ClosureSeries* SeriesOf(const std::string& closure);

  MetricsRegistry* metrics_ = nullptr;
  absl::Mutex series_mu_;
  std::map<std::string, ClosureSeries> series_ ABSL_GUARDED_BY(series_mu_);
  const std::shared_ptr<const ClosureRegistry> registry_;
  const std::unique_ptr<PsConnection> ps_;
  const int num_workers_;
  int replica_index_ = 0;
  int num_replicas_ = 1;
  bool synchronous_ = false;
  PendingIdentity identity_;
  absl::Mutex mu_;
  // Below: guarded by mu_.
  std::map<int64_t, std::shared_ptr<Resource>> resources_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_WORKER_SERVICE_HANDLERS_H_
