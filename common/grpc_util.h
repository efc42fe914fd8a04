// gRPC plumbing shared by every task: channels with our settings, and servers on a picked or given port.
#ifndef PSTRAIN_COMMON_GRPC_UTIL_H_
#define PSTRAIN_COMMON_GRPC_UTIL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/channel.h"
#include "grpcpp/server.h"
#include "grpcpp/support/slice.h"
#include "grpcpp/impl/codegen/service_type.h"

namespace pstrain {

struct TransportSecurity;

// Largest message a task sends or accepts, in bytes. Set deliberately: large enough for one step's
// batched rows to one ps (e.g. 16 Mi rows of 16 floats would not fit, 4 Mi do), small enough that a
// malformed request can't make a server allocate without bound.
inline constexpr int kMaxMessageBytes = 512 << 20;

// Tunes this process's malloc for megabyte messages (once; CreateChannel and StartGrpcServer call
// it): blocks up to 32 MiB come from the heap instead of a fresh mmap each, and up to 256 MiB of
// freed heap is kept for reuse instead of being returned to the kernel. Without it every
// request's and reply's buffers were new pages: page faults and zeroing took a third of a sparse
// pull's time. Tables (ps/table_memory.h) map their own memory and are not affected.
void TuneMallocForLargeMessages();

// Views of `slices`' bytes, in order (valid while the slices live): a received message in pieces.
std::vector<absl::string_view> SliceViews(const std::vector<grpc::Slice>& slices);

// A channel to `address` ("host:port") with our message limits and a short reconnect backoff, so a
// restarted task is reached again within about a second.
// It uses the process's transport security (common/transport_security.h): mutual TLS, the token.
std::shared_ptr<grpc::Channel> CreateChannel(const std::string& address);
// The same with `security` instead of the process's.
std::shared_ptr<grpc::Channel> CreateChannel(const std::string& address,
                                             const TransportSecurity& security);

// A running gRPC server and the port it is bound to.
struct StartedServer {
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  std::string address;  // the listen address's host with the bound port, "host:port"
};

// Starts a server listening on `address` ("host:port"; port 0 picks a free one) that serves
// `services` (not owned; they must outlive the server), with the process's transport security; it
// logs a warning when it listens beyond loopback with neither TLS nor a token.
// Errors: kInvalidArgument for a malformed address; kUnavailable if the address can't be bound.
absl::StatusOr<StartedServer> StartGrpcServer(const std::string& address,
                                              const std::vector<grpc::Service*>& services);


// Splits "host:port" (also "[v6]:port"). Errors: kInvalidArgument naming the address.
absl::Status SplitHostPort(const std::string& address, std::string* host, int* port);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_GRPC_UTIL_H_
