// The ps task binary: `ps_server --cluster_spec=cluster.json --task=ps:0` (or TF_CONFIG).
#include "cluster/task_main.h"
#include "cluster/cluster_spec.h"
#include "ps/ps_server.h"

int main(int argc, char** argv) {
  return pstrain::RunTaskMain(
      argc, argv, "ps",
      [](const pstrain::ClusterSpec&, int task_index, const std::string& listen) -> absl::StatusOr<pstrain::RunningTask> {
        pstrain::PsServerOptions options;
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
