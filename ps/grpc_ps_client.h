// The gRPC implementation of PsClient.
#ifndef PSTRAIN_PS_GRPC_PS_CLIENT_H_
#define PSTRAIN_PS_GRPC_PS_CLIENT_H_

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "ps/ps_client.h"

namespace pstrain {

struct GrpcPsClientOptions {
  // Deadline of each call. Default 60 s: generous, since a large create or read can take seconds.
  absl::Duration timeout = absl::Seconds(60);
  // Use the ps's data plane (common/raw_tcp.h) for Lookup, Update and Read when the ps offers one
  // (its Health says so; never with TLS): found on the first such call, and again after it broke
  // (a restarted ps may have another port). Default true.
  bool data_plane = true;
};

// A client for the ps task `task_index` at `address` ("host:port"). Connects lazily. Lookup,
// Update and Read go over the ps's data plane when it has one (the same requests, handlers and
// errors), everything else over gRPC.
std::unique_ptr<PsClient> NewGrpcPsClient(int task_index, const std::string& address,
                                          const GrpcPsClientOptions& options = {});

}  // namespace pstrain

#endif  // PSTRAIN_PS_GRPC_PS_CLIENT_H_
