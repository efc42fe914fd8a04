// The ranks' side of the collective rendezvous (collective/rendezvous_service.h), over gRPC with
// the process's transport security.
#ifndef PSTRAIN_COLLECTIVE_RENDEZVOUS_CLIENT_H_
#define PSTRAIN_COLLECTIVE_RENDEZVOUS_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/collective.grpc.pb.h"

namespace pstrain {

// Thread-safe. Every call names the group and generation it was made for. Errors: the service's
// (rendezvous_service.h), and kUnavailable naming the address when the rendezvous can't be reached
// within the call's time.
class RendezvousClient {
 public:
  RendezvousClient(const std::string& address, std::string group, uint64_t generation);

  const std::string& address() const { return address_; }

  absl::Status Set(const std::string& key, const std::string& value);
  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout);
  // Every rank's name, by rank, once all joined.
  absl::StatusOr<std::vector<std::string>> Join(int rank, int size, const std::string& name,
                                                absl::Duration timeout);
  // The abort reason ("" while the generation is fine).
  absl::StatusOr<std::string> Heartbeat(int rank);
  // Reports this rank's failure; answers the silent ranks' descriptions (waiting up to `wait`).
  // `deliberate`: this rank breaks the group itself (see RendezvousAbortRequest). `aborted`, if
  // given, receives the generation's abort reason (the first report).
  absl::StatusOr<std::vector<std::string>> Abort(int rank, const std::string& reason,
                                                 absl::Duration wait, bool deliberate = false,
                                                 std::string* aborted = nullptr);
  // Where the group stands (any generation: this client's is not used).
  absl::StatusOr<RendezvousStatusResponse> Status();

 private:
  // A context whose deadline is `wait` plus time for the call itself.
  std::unique_ptr<grpc::ClientContext> Context(absl::Duration wait) const;
  absl::Status Convert(const grpc::Status& status, const char* method) const;

  const std::string address_;
  const std::string group_;
  const uint64_t generation_;
  std::unique_ptr<CollectiveRendezvous::Stub> stub_;
};

}  // namespace pstrain

#endif  // PSTRAIN_COLLECTIVE_RENDEZVOUS_CLIENT_H_
