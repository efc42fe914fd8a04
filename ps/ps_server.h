// A parameter-server task: a gRPC server running the PsService (ps/ps_service_handlers.h).
#ifndef PSTRAIN_PS_PS_SERVER_H_
#define PSTRAIN_PS_PS_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "cluster/task_identity.h"
#include "common/metrics.h"
#include "ps/ps_client.h"

namespace pstrain {

struct PsServerOptions {
  // This task's index in the cluster's "ps" job. Default 0.
  int task_index = 0;
  // Where to listen, "host:port". Port 0 lets the kernel pick one (see PsServer::address()).
  // Default "localhost:0".
  std::string listen_address = "localhost:0";
  // The ps's memory budget in bytes: creating or growing a table past it fails with
  // RESOURCE_EXHAUSTED naming the table and the bytes. Default 0: none.
  int64_t memory_budget_bytes = 0;
  // Where dynamic tables with a disk tier (DynamicTableDef.disk_tier) keep the rows past their RAM:
  // a local disk's directory, made if missing. The ps's tiers go in a subdirectory of its own,
  // wiped when the ps starts or stops (they are a cache of the checkpoint). Default empty: a
  // temporary directory, made when a table first asks for a tier.
  std::string disk_dir;
  // Checkpoint databases a request names must lie under this directory (ps/checkpoint_root.h);
  // created if missing. Default empty: anywhere (the in-process cluster's servers).
  std::string checkpoint_root;
  // The most ids one Lookup or Update may carry; more is RESOURCE_EXHAUSTED. 0: no limit.
  // Default 16 Mi.
  int64_t max_ids_per_request = 16 << 20;
  // Requests of 4 MiB or more served at once (more wait their turn, up to 30 s); 0: no limit.
  // Default 0; the ps binary's --max_large_requests sets one.
  int max_concurrent_large_requests = 0;
  // Where this ps counts its requests and work (common/metrics.h; not owned, must outlive the
  // server). Default null: none.
  MetricsRegistry* metrics = nullptr;
  // The data plane (common/raw_tcp.h): Lookup, Update and Read also over plain TCP on this port of
  // the listen address's host (0: picked; -1: none), advertised in Health. Never with TLS (the
  // frames are not encrypted): then it is off whatever this says. Default 0.
  int data_port = 0;
  // The bytes of requests and replies this ps holds in flight on its data plane
  // (common/memory_account.h): a request waits for room (up to 60 s) before its bytes are read,
  // and one that could never fit is refused with RESOURCE_EXHAUSTED naming its size and this.
  // (Requests over gRPC are not counted yet: gRPC holds a whole message before any handler sees
  // it.) Default 0: no account (the in-process cluster's servers); the ps binary's
  // --inflight_bytes sets one.
  int64_t inflight_bytes = 0;
  // Data-plane connections served at once (each a thread); past it new ones are refused. Default
  // 256.
  int max_data_connections = 256;
};

// A running ps task. Thread-safe. Destroying it shuts the server down (Shutdown() is idempotent).
class PsServer {
 public:
  // Starts the server. Errors: kInvalidArgument for a malformed address, kUnavailable if it can't
  // be bound, kFailedPrecondition for a checkpoint root that can't be made a directory.
  static absl::StatusOr<std::unique_ptr<PsServer>> Start(const PsServerOptions& options);

  virtual ~PsServer() = default;

  // The address clients use ("host:port" with the bound port), its incarnation, and so on.
  virtual const TaskIdentity& identity() const = 0;
  const std::string& address() const { return identity().address; }
  int port() const { return identity().port(); }

  // Stops accepting calls, cancels those in flight, and waits for handlers to finish.
  virtual void Shutdown() = 0;

  // A client for this process's own use that calls the server's handlers in the calling thread
  // (ps/local_ps_client.h). It keeps the handlers (and the variables) alive, even past Shutdown.
  virtual std::unique_ptr<PsClient> NewLocalClient() const = 0;
};

}  // namespace pstrain

#endif  // PSTRAIN_PS_PS_SERVER_H_
