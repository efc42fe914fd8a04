// The worker task binary: `worker_server --cluster_spec=cluster.json --task=worker:0` (or TF_CONFIG).
// It runs the built-in closures and every model's (models/registry.h).
#include "cluster/task_main.h"
#include "cluster/cluster_spec.h"
#include "models/registry.h"
#include "worker/worker_server.h"

int main(int argc, char** argv) {
  // The process's replica groups (models/devices.h): the worker's registry keeps it alive.
  auto replica_groups = std::make_shared<pstrain::ReplicaGroups>();
  return pstrain::RunTaskMain(
      argc, argv, "worker",
      [replica_groups](const pstrain::ClusterSpec& spec, int task_index, const std::string& listen,
                       pstrain::MetricsRegistry* metrics)
          -> absl::StatusOr<pstrain::RunningTask> {
        pstrain::WorkerServerOptions options;
        absl::StatusOr<std::shared_ptr<const pstrain::ClosureRegistry>> registry =
            pstrain::TrainingRegistry(replica_groups);
        if (!registry.ok()) return registry.status();
        options.registry = *registry;
        options.task_index = task_index;
        options.listen_address = listen;
        options.ps_addresses = spec.tasks(pstrain::kPs);
        options.num_workers = spec.num_workers();
        options.metrics = metrics;
        absl::StatusOr<std::unique_ptr<pstrain::WorkerServer>> server =
            pstrain::WorkerServer::Start(options);
        if (!server.ok()) return server.status();
        pstrain::RunningTask running;
        running.address = (*server)->address();
        running.description = (*server)->identity().DebugString();
        running.server = std::shared_ptr<pstrain::WorkerServer>(std::move(*server));
        return running;
      });
}
