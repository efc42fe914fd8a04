// The ps task binary: `ps_server --cluster_spec=cluster.json --task=ps:0` (or TF_CONFIG), with
// --memory_budget=20G to bound the memory its tables may take, --checkpoint_root=DIR to confine
// its checkpoints, --max_ids_per_request and --max_large_requests to bound what one client can ask,
// --inflight_bytes and --max_data_connections to bound what all of them hold at once, and the
// transport-security flags of cluster/security_flags.h.
#include <unistd.h>

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
ABSL_FLAG(std::string, disk_dir, "",
          "Where dynamic tables with a disk tier keep the rows past this ps's memory (a local "
          "disk's directory, made if missing; the ps's tiers go in a subdirectory of their own, "
          "wiped at start and exit: a cache of the checkpoint). Empty: a temporary directory.");
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

ABSL_FLAG(std::string, inflight_bytes, "auto",
          "The bytes of requests and replies this ps holds in flight on its data plane (bytes, or "
          "with K, M, G): a request waits for room before it is read, and one that could never fit "
          "is refused with RESOURCE_EXHAUSTED. 'auto': 1 GiB, or an eighth of the machine's memory "
          "if that is less. 0: no bound. With --memory_budget, the budget plus this must fit the "
          "machine's memory. (Requests over gRPC are not counted yet.)");
ABSL_FLAG(int, max_data_connections, 256,
          "Data-plane connections served at once (a thread each); past it new ones are refused "
          "with RESOURCE_EXHAUSTED. A worker opens 2 per ps.");

namespace {

// The machine's memory in bytes (0 if unknown).
int64_t MachineMemoryBytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
}

// --inflight_bytes, checked against the machine beside the tables' budget.
absl::StatusOr<int64_t> InflightBytes(int64_t budget) {
  const std::string text = absl::GetFlag(FLAGS_inflight_bytes);
  const int64_t machine = MachineMemoryBytes();
  int64_t bytes = 0;
  if (text == "auto") {
    bytes = int64_t{1} << 30;
    if (machine > 0) bytes = std::min(bytes, machine / 8);
  } else {
    absl::StatusOr<int64_t> parsed = pstrain::ParseByteSize(text);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--inflight_bytes: ", parsed.status().message()));
    }
    bytes = *parsed;
  }
  if (budget > 0 && bytes > 0 && machine > 0 && budget + bytes > machine) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--memory_budget (", budget, " bytes) plus --inflight_bytes (", bytes,
        ") is more than this machine's memory (", machine, " bytes): lower one of them"));
  }
  return bytes;
}

}  // namespace

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
        options.disk_dir = absl::GetFlag(FLAGS_disk_dir);
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
        absl::StatusOr<int64_t> inflight = InflightBytes(*budget);
        if (!inflight.ok()) return inflight.status();
        options.inflight_bytes = *inflight;
        options.max_data_connections = absl::GetFlag(FLAGS_max_data_connections);
        if (options.max_data_connections < 1) {
          return absl::InvalidArgumentError("--max_data_connections must be at least 1");
        }
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
