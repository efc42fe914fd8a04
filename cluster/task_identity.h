// Who a task is: type, index, address, and the incarnation id that changes on every restart.
#ifndef PSTRAIN_CLUSTER_TASK_IDENTITY_H_
#define PSTRAIN_CLUSTER_TASK_IDENTITY_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "proto/cluster.pb.h"

namespace pstrain {

struct TaskIdentity {
  std::string type;          // "ps", "worker", ...
  int index = 0;
  std::string address;       // "host:port" the server listens on
  uint64_t incarnation = 0;  // random, non-zero, new on every start
  int64_t start_time_unix_micros = 0;
  int data_port = 0;         // a ps's data plane port (0: none)

  // A new identity for a task starting now: a fresh incarnation id and the current time.
  static TaskIdentity New(std::string type, int index, std::string address);

  // The port of `address` (0 if it has none).
  int port() const;
  void ToHealthResponse(HealthResponse* response) const;
  std::string DebugString() const;  // "ps:0 at localhost:1234 (incarnation 0x...)"
};

// A service's own identity, known only once its server is bound (the port is picked then). Set()
// once; Get() waits for it, so a call that arrives first never sees half an identity. Thread-safe.
class PendingIdentity {
 public:
  void Set(const TaskIdentity& identity) {
    absl::MutexLock lock(&mu_);
    identity_ = identity;
    set_ = true;
  }
  TaskIdentity Get() const {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&set_));
    return identity_;
  }

 private:
  mutable absl::Mutex mu_;
  // Below: guarded by mu_.
  TaskIdentity identity_ ABSL_GUARDED_BY(mu_);
  bool set_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace pstrain

#endif  // PSTRAIN_CLUSTER_TASK_IDENTITY_H_
