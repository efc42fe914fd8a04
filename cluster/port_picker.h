// Picks free TCP ports for servers started in tests and in-process clusters, like Python's portpicker.
#ifndef PSTRAIN_CLUSTER_PORT_PICKER_H_
#define PSTRAIN_CLUSTER_PORT_PICKER_H_

#include <cstdint>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace pstrain {

// Hands out TCP ports that were free when picked: each is bound (IPv4 and, where the machine has it,
// IPv6) before it is returned, and a PortPicker never returns the same port twice. Ports are drawn
// at random from 10000-19999, OUTSIDE the kernel's ephemeral range (net.ipv4.ip_local_port_range,
// 32768-60999 by default; above it where it covers those): a picked port is bound by its server a
// little later, and in between the kernel could otherwise hand the same port to a socket bound to
// port 0 (a ps's data plane) or to an outgoing connection (seen: a worker of an in-process cluster
// failing "port in use" under TSan). Only if no such port is free, one the kernel picks.
// Thread-safe.
class PortPicker {
 public:
  PortPicker();

  // A port that is free now and that this picker has not returned before.
  // Errors: kUnavailable if no free port was found after many tries.
  absl::StatusOr<int> PickUnusedPort();

  // The ports drawn from first: [first, last], outside the ephemeral range.
  int first() const { return first_; }
  int last() const { return last_; }

 private:
  int first_ = 0;
  int last_ = 0;
  absl::Mutex mu_;
  // Below: guarded by mu_.
  absl::flat_hash_set<int> handed_out_ ABSL_GUARDED_BY(mu_);
  uint64_t random_state_ ABSL_GUARDED_BY(mu_) = 0;
};

// The kernel's ephemeral port range (net.ipv4.ip_local_port_range; Linux's default 32768-60999 if it
// can't be read).
std::pair<int, int> EphemeralPortRange();

// PickUnusedPort() of one process-wide PortPicker, so ports never repeat within a process.
absl::StatusOr<int> PickUnusedPort();

// Whether `port` can be bound for TCP on loopback right now (IPv4, and IPv6 where present).
bool IsPortFree(int port);

}  // namespace pstrain

#endif  // PSTRAIN_CLUSTER_PORT_PICKER_H_
