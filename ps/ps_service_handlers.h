// The PsService's methods on the bytes of a request: what ps_server runs for each call (through
// common/raw_service.h), and what the fuzz target drives directly (tests/fuzz/ps_service_fuzz.cc).
// Every request is parsed here; one that doesn't parse is INVALID_ARGUMENT naming the method.
#ifndef PSTRAIN_PS_PS_SERVICE_HANDLERS_H_
#define PSTRAIN_PS_PS_SERVICE_HANDLERS_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cluster/task_identity.h"
#include "common/metrics.h"
#include "common/raw_service.h"
#include "google/protobuf/descriptor.h"
#include "ps/checkpoint_root.h"
#include "ps/variable_store.h"

namespace pstrain {

struct PsServiceLimits {
  // The ps's memory budget in bytes (ps/memory_budget.h); 0: none.
  int64_t memory_budget_bytes = 0;
  // Where dynamic tables' disk tiers go (VariableStore); empty: a temporary directory.
  std::string disk_dir;
  // Pool threads large requests are split across (VariableStore); -1: one per core.
  int data_threads = -1;
  // The most ids one Lookup or Update may carry (VariableStore::set_max_ids_per_request); 0: none.
  int64_t max_ids_per_request = kDefaultMaxIdsPerRequest;
  // Requests of kLargeRequestBytes or more served at once; more wait for a turn (up to
  // kLargeRequestWait, then kResourceExhausted). 0: no limit.
  int max_concurrent_large_requests = 0;

  // 16 Mi: a step's batch to one ps is thousands to a few million ids.
  static constexpr int64_t kDefaultMaxIdsPerRequest = 16 << 20;
  static constexpr size_t kLargeRequestBytes = 4 << 20;
  static constexpr absl::Duration kLargeRequestWait = absl::Seconds(30);
};

// Thread-safe: calls run concurrently, as gRPC delivers them.
class PsServiceHandlers {
 public:
  PsServiceHandlers(const PsServiceLimits& limits, CheckpointRoot root);

  // pstrain.PsService.
  static const google::protobuf::ServiceDescriptor* Service();

  // The identity Health reports (set once the server's port is known).
  void SetIdentity(const TaskIdentity& identity) { identity_.Set(identity); }

  ~PsServiceHandlers();

  // Counts this ps's work into `registry` (not owned; it must outlive the handlers). Call before
  // serving. Series: rows looked up and read, checkpoint save and restore seconds and bytes, and
  // at each scrape every variable's bytes, each dynamic table's keys, admissions, rejections and
  // evictions, and the memory budget's use.
  void ExportMetrics(MetricsRegistry* registry);

  // Serves one call of Service()->method(method) on `request` (its bytes, in pieces).
  // Errors: the method's own; kInvalidArgument "<Method>: malformed request" for bytes that don't
  // parse; kUnimplemented for a method number out of range.
  absl::Status Serve(int method, const std::vector<absl::string_view>& request,
                     const ReplyAllocator& reply);

 private:
  using Method = std::function<absl::Status(const std::vector<absl::string_view>& request,
                                            const ReplyAllocator& reply)>;
  Method Bind(absl::string_view name);

  // Waits for a turn among the large requests. Errors: kResourceExhausted after kLargeRequestWait.
  absl::Status EnterLarge(absl::string_view method, size_t bytes);
  void LeaveLarge();

  // Metrics (ExportMetrics): null until then.
  MetricsRegistry* metrics_ = nullptr;
  int collector_ = 0;
  Counter* rows_looked_up_ = nullptr;
  Counter* rows_read_ = nullptr;
  Histogram* save_seconds_ = nullptr;
  Histogram* restore_seconds_ = nullptr;
  Counter* saved_bytes_ = nullptr;
  Counter* restored_bytes_ = nullptr;

  const int max_large_;
  absl::Mutex large_mu_;
  int large_in_flight_ ABSL_GUARDED_BY(large_mu_) = 0;

  VariableStore store_;
  const CheckpointRoot root_;  // where checkpoint databases may be
  PendingIdentity identity_;
  std::vector<Method> methods_;  // by method number
};

}  // namespace pstrain

#endif  // PSTRAIN_PS_PS_SERVICE_HANDLERS_H_
