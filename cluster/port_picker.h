// Picks free TCP ports for servers started in tests and in-process clusters, like Python's portpicker.
#ifndef PSTRAIN_CLUSTER_PORT_PICKER_H_
#define PSTRAIN_CLUSTER_PORT_PICKER_H_

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace pstrain {

// Hands out TCP ports that were free when picked: each is bound (IPv4 and, where the machine has it,
// IPv6) before it is returned, and a PortPicker never returns the same port twice. Thread-safe.
class PortPicker {
 public:
  PortPicker() = default;

  // A port that is free now and that this picker has not returned before.
  // Errors: kUnavailable if no free port was found after many tries.
  absl::StatusOr<int> PickUnusedPort();

 private:
  absl::Mutex mu_;
  // Below: guarded by mu_.
  absl::flat_hash_set<int> handed_out_ ABSL_GUARDED_BY(mu_);
};

// PickUnusedPort() of one process-wide PortPicker, so ports never repeat within a process.
absl::StatusOr<int> PickUnusedPort();

// Whether `port` can be bound for TCP on loopback right now (IPv4, and IPv6 where present).
bool IsPortFree(int port);

}  // namespace pstrain

#endif  // PSTRAIN_CLUSTER_PORT_PICKER_H_
