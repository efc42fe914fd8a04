// The shared body of the ps and worker server binaries: flags, cluster spec, signals, shutdown.
#ifndef PSTRAIN_CLUSTER_TASK_MAIN_H_
#define PSTRAIN_CLUSTER_TASK_MAIN_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/metrics.h"

namespace pstrain {

class ClusterSpec;

// What a server binary starts: given the cluster, its task index and listen address, a running
// server whose destructor shuts it down, and the address it bound.
struct RunningTask {
  std::shared_ptr<void> server;  // keeps the server alive; reset to shut it down
  std::string address;
  std::string description;       // for the log, e.g. "ps:0 at 0.0.0.0:2222 (incarnation ...)"
};
// `metrics`: where the server counts its work (null without --metrics_port).
using StartTaskFn = std::function<absl::StatusOr<RunningTask>(
    const ClusterSpec& spec, int task_index, const std::string& listen_address,
    MetricsRegistry* metrics)>;

// Parses --cluster_spec (or TF_CONFIG) and --task, checks the task is of `job`, starts the server on
// the task's port (on --bind_host: 0.0.0.0 by default, or "spec" for the host of the task's spec
// address), serves its metrics at --metrics_port (0: none), logs its address, and waits for
// SIGTERM or SIGINT, then shuts down cleanly.
// Returns the process exit code; on bad input prints one line naming the problem and returns 2.
int RunTaskMain(int argc, char** argv, const std::string& job, const StartTaskFn& start);

}  // namespace pstrain

#endif  // PSTRAIN_CLUSTER_TASK_MAIN_H_
