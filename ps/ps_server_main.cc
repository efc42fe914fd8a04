// The ps task binary: `ps_server --cluster_spec=cluster.json --task=ps:0` (or TF_CONFIG), with
// --memory_budget=20G to bound the memory its tables may take and --checkpoint_root=DIR to confine
// its checkpoints.
#include <cstdio>
#include <cstdlib>

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

int main(int argc, char** argv) {
  return pstrain::RunTaskMain(
      argc, argv, "ps",
      [](const pstrain::ClusterSpec&, int task_index, const std::string& listen) -> absl::StatusOr<pstrain::RunningTask> {
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
        options.task_index = task_index;
        options.listen_address = listen;
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
