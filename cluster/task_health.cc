#include "cluster/task_health.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "common/grpc_util.h"
#include "grpcpp/client_context.h"
#include "proto/ps_service.grpc.pb.h"
#include "proto/worker_service.grpc.pb.h"

namespace pstrain {

absl::StatusOr<HealthResponse> CheckTaskHealth(const TaskRef& task, const std::string& address,
                                               absl::Duration timeout) {
  const std::string who = absl::StrCat(task.ToString(), " at ", address);
  std::shared_ptr<grpc::Channel> channel = CreateChannel(address);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  context.set_wait_for_ready(true);  // wait for a task that is still starting, up to the deadline
  HealthRequest request;
  HealthResponse response;
  grpc::Status status;
  if (task.type == "ps") {
    status = PsService::NewStub(channel)->Health(&context, request, &response);
  } else if (task.type == "worker") {
    status = WorkerService::NewStub(channel)->Health(&context, request, &response);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": job \"", task.type, "\" runs no server to check"));
  }
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
      status.error_code() == grpc::StatusCode::UNAVAILABLE) {
    return absl::UnavailableError(absl::StrCat(who, " unreachable after ",
                                               absl::FormatDuration(timeout), ": ",
                                               status.error_message()));
  }
  if (!status.ok()) return FromGrpcStatus(status, who);
  if (response.task().type() != task.type || response.task().index() != task.index) {
    return absl::FailedPreconditionError(
        absl::StrCat(who, " answered as ", response.task().type(), ":", response.task().index(),
                     "; is the cluster spec the same on every task?"));
  }
  return response;
}

}  // namespace pstrain
