// Asks a task who it is and whether it is alive (the Health RPC of the ps and worker services).
#ifndef PSTRAIN_CLUSTER_TASK_HEALTH_H_
#define PSTRAIN_CLUSTER_TASK_HEALTH_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cluster/cluster_spec.h"
#include "proto/cluster.pb.h"

namespace pstrain {

// Calls Health on the ps or worker task `task` at `address`, waiting up to `timeout` for it to come
// up (the call waits for the connection, so a task that is still starting is fine).
// Errors (each names the task and address): kUnavailable if it can't be reached in time (message
// says "unreachable"); kFailedPrecondition if the task answers as a different task (wrong spec);
// kInvalidArgument for a job that runs no server (chief, evaluator).
absl::StatusOr<HealthResponse> CheckTaskHealth(const TaskRef& task, const std::string& address,
                                               absl::Duration timeout);

}  // namespace pstrain

#endif  // PSTRAIN_CLUSTER_TASK_HEALTH_H_
