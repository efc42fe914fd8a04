#include "collective/rendezvous_client.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/grpc_util.h"

namespace pstrain {

RendezvousClient::RendezvousClient(const std::string& address, std::string group,
                                   uint64_t generation)
    : address_(address),
      group_(std::move(group)),
      generation_(generation),
      stub_(CollectiveRendezvous::NewStub(CreateChannel(address))) {}

std::unique_ptr<grpc::ClientContext> RendezvousClient::Context(absl::Duration wait) const {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(absl::ToChronoTime(absl::Now() + wait + absl::Seconds(5)));
  context->set_wait_for_ready(false);
  return context;
}

absl::Status RendezvousClient::Convert(const grpc::Status& status, const char* method) const {
  if (status.ok()) return absl::OkStatus();
  absl::Status converted = FromGrpcStatus(status);
  // The service never answers UNAVAILABLE, and its DEADLINE_EXCEEDED comes before the call's
  // own deadline (5 s later) with a message of its own: these are the transport's failures, so
  // say whom we could not reach.
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE ||
      (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED &&
       status.error_message() == "Deadline Exceeded")) {
    return absl::UnavailableError(absl::StrCat("collective rendezvous at ", address_,
                                               " unreachable (", method, "): ",
                                               converted.message()));
  }
  return converted;
}

absl::Status RendezvousClient::Set(const std::string& key, const std::string& value) {
  RendezvousSetRequest request;
  request.set_group(group_);
  request.set_generation(generation_);
  request.set_key(key);
  request.set_value(value);
  RendezvousSetResponse response;
  auto context = Context(absl::ZeroDuration());
  return Convert(stub_->Set(context.get(), request, &response), "Set");
}

absl::StatusOr<std::string> RendezvousClient::Get(const std::string& key, absl::Duration timeout) {
  RendezvousGetRequest request;
  request.set_group(group_);
  request.set_generation(generation_);
  request.set_key(key);
  request.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
  RendezvousGetResponse response;
  auto context = Context(timeout);
  absl::Status status = Convert(stub_->Get(context.get(), request, &response), "Get");
  if (!status.ok()) return status;
  return std::move(*response.mutable_value());
}

absl::StatusOr<std::vector<std::string>> RendezvousClient::Join(int rank, int size,
                                                                const std::string& name,
                                                                absl::Duration timeout) {
  RendezvousJoinRequest request;
  request.set_group(group_);
  request.set_generation(generation_);
  request.set_rank(rank);
  request.set_size(size);
  request.set_name(name);
  request.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
  RendezvousJoinResponse response;
  auto context = Context(timeout);
  absl::Status status = Convert(stub_->Join(context.get(), request, &response), "Join");
  if (!status.ok()) return status;
  return std::vector<std::string>(response.names().begin(), response.names().end());
}

absl::StatusOr<std::string> RendezvousClient::Heartbeat(int rank) {
  RendezvousHeartbeatRequest request;
  request.set_group(group_);
  request.set_generation(generation_);
  request.set_rank(rank);
  RendezvousHeartbeatResponse response;
  auto context = Context(absl::ZeroDuration());
  absl::Status status = Convert(stub_->Heartbeat(context.get(), request, &response), "Heartbeat");
  if (!status.ok()) return status;
  return response.aborted();
}

absl::StatusOr<std::vector<std::string>> RendezvousClient::Abort(int rank, const std::string& reason,
                                                                 absl::Duration wait,
                                                                 bool deliberate,
                                                                 std::string* aborted) {
  RendezvousAbortRequest request;
  request.set_group(group_);
  request.set_generation(generation_);
  request.set_rank(rank);
  request.set_reason(reason);
  request.set_wait_ms(absl::ToInt64Milliseconds(wait));
  request.set_deliberate(deliberate);
  RendezvousAbortResponse response;
  auto context = Context(wait);
  absl::Status status = Convert(stub_->Abort(context.get(), request, &response), "Abort");
  if (!status.ok()) return status;
  if (aborted != nullptr) *aborted = response.aborted();
  return std::vector<std::string>(response.silent().begin(), response.silent().end());
}

absl::StatusOr<RendezvousStatusResponse> RendezvousClient::Status() {
  RendezvousStatusRequest request;
  request.set_group(group_);
  RendezvousStatusResponse response;
  auto context = Context(absl::ZeroDuration());
  absl::Status status = Convert(stub_->Status(context.get(), request, &response), "Status");
  if (!status.ok()) return status;
  return response;
}

}  // namespace pstrain
