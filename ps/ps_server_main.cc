// The ps task binary: `ps_server --cluster_spec=cluster.json --task=ps:0` (or TF_CONFIG), with
// --memory_budget=20G to bound the memory its tables may take.
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
