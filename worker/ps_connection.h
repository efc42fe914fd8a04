// A worker's (or the coordinator's) view of the ps tasks: one client per ps, and variable handles
// found by name from the shards the ps tasks hold.
#ifndef PSTRAIN_WORKER_PS_CONNECTION_H_
#define PSTRAIN_WORKER_PS_CONNECTION_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "ps/ps_client.h"
#include "ps/dynamic_table.h"
#include "ps/sharded_variable.h"

namespace pstrain {

// Thread-safe.
class PsConnection {
 public:
  // gRPC clients for the ps tasks at `addresses` (index = ps task).
  static std::unique_ptr<PsConnection> ToAddresses(const std::vector<std::string>& addresses);
  // Over given clients (e.g. fakes in tests).
  explicit PsConnection(std::vector<std::unique_ptr<PsClient>> clients);

  int num_ps() const { return static_cast<int>(clients_.size()); }
  PsClient* ps(int task) const { return clients_[task].get(); }
  std::vector<PsClient*> clients() const;

  // The handle of variable `name`, assembled from the shards every ps lists (cached after the
  // first call). Errors: kNotFound naming the variable (no ps holds it, or its shards don't cover
  // it: not all created yet), and the ps errors (kUnavailable naming the ps).
  absl::StatusOr<ShardedVariable> Variable(const std::string& name);
  // The handle of dynamic table `name`, from the shards the ps tasks list (cached). Errors:
  // kNotFound naming the table (not (completely) created), and the ps errors.
  absl::StatusOr<DynamicTable> Table(const std::string& name);
  // Forgets cached handles (after variables were re-created, e.g. a ps restarted).
  void Invalidate();

 private:
  absl::Status RefreshLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::vector<std::unique_ptr<PsClient>> clients_;
  absl::Mutex mu_;
  // Below: guarded by mu_.
  std::map<std::string, ShardedVariable> variables_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, DynamicTable> tables_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_PS_CONNECTION_H_
