// The ps task binary: `ps_server --cluster_spec=cluster.json --task=ps:0` (or TF_CONFIG), with
// --memory_budget=20G to bound the memory its tables may take, --checkpoint_root=DIR to confine
// its checkpoints, --max_ids_per_request and --max_large_requests to bound what one client can ask,
// and the transport-security flags of cluster/security_flags.h.
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <algorithm>

#include "absl/flags/flag.h"
#include "cluster/task_main.h"
#include "common/byte_size.h"
#include "cluster/cluster_spec.h"
#include "ps/ps_server.h"

ABSL_FLAG(std::string, memory_budget, "0",
          "The memory this ps's tables may take (bytes, or with K, M, G, T): creating or growing a "
          "table past it fails with RESOURCE_EXHAUSTED naming the table and the bytes, instead of "
          "the kernel's out-of-memory kill. 0: no budget.");
ABSL_FLAG(std::string, checkpoint_root, ".",
          "The directory checkpoints may be saved in and restored from (created if missing): a "
          "request naming a database outside it, after '..' and symlinks, is refused with "
          "PERMISSION_DENIED. The job's --checkpoint_dir must lie under it. Default: the directory "
          "the ps was started in.");

ABSL_FLAG(int, data_port, 0,
          "The data plane's port: Lookup, Update and Read also over plain TCP beside gRPC (faster: "
          "no HTTP/2 framing, no per-call setup), on this host; 0 picks a free one (clients learn "
          "it from the ps's Health); -1: none. Never used with TLS (the frames are not encrypted).");
ABSL_FLAG(int64_t, max_ids_per_request, 16 << 20,
          "The most ids one lookup or update may carry; more is refused with RESOURCE_EXHAUSTED "
          "(a step's batch to one ps is thousands to a few million ids). 0: no limit.");
ABSL_FLAG(int, max_large_requests, 0,
          "Requests of 4 MiB or more served at once; more wait their turn (up to 30 s, then "
          "RESOURCE_EXHAUSTED), so that no client can make the ps hold unbounded replies. "
          "Default 0: twice the cores.");

int main(int argc, char** argv) {
  return pstrain::RunTaskMain(
      argc, argv, "ps",
      [](const pstrain::ClusterSpec&, int task_index, const std::string& listen,
         pstrain::MetricsRegistry* metrics) -> absl::StatusOr<pstrain::RunningTask> {
        pstrain::PsServerOptions options;
        absl::StatusOr<int64_t> budget = pstrain::ParseByteSize(absl::GetFlag(FLAGS_memory_budget));
        if (!budget.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat("--memory_budget: ", budget.status().message()));
        }
        options.memory_budget_bytes = *budget;
        options.checkpoint_root = absl::GetFlag(FLAGS_checkpoint_root);
        if (options.checkpoint_root.empty()) {
          return absl::InvalidArgumentError("--checkpoint_root is empty");
        }
        options.max_ids_per_request = absl::GetFlag(FLAGS_max_ids_per_request);
        if (options.max_ids_per_request < 0) {
          return absl::InvalidArgumentError("--max_ids_per_request is negative");
        }
        options.max_concurrent_large_requests = absl::GetFlag(FLAGS_max_large_requests);
        if (options.max_concurrent_large_requests < 0) {
          return absl::InvalidArgumentError("--max_large_requests is negative");
        }
        if (options.max_concurrent_large_requests == 0) {
          options.max_concurrent_large_requests =
              2 * static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
        }
        options.task_index = task_index;
        options.listen_address = listen;
        options.data_port = absl::GetFlag(FLAGS_data_port);
        options.metrics = metrics;
        absl::StatusOr<std::unique_ptr<pstrain::PsServer>> server =
            pstrain::PsServer::Start(options);
        if (!server.ok()) return server.status();
        pstrain::RunningTask running;
        running.address = (*server)->address();
        running.description = (*server)->identity().DebugString();
        running.server = std::shared_ptr<pstrain::PsServer>(std::move(*server));
        return running;
      });
}
