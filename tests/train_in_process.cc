#include "tests/train_in_process.h"

#include <sstream>
#include <utility>

#include "coordinator/in_process_cluster.h"

namespace pstrain {

absl::StatusOr<TrainResult> TrainInProcess(std::shared_ptr<const ClosureRegistry> registry,
                                           int workers, int ps, Model* model) {
  TrainerOptions trainer;
  trainer.checkpoint_dir = "";
  trainer.restore = "none";
  std::ostringstream progress;
  trainer.progress.out = &progress;
  return TrainInProcess(std::move(registry), workers, ps, model, trainer);
}

absl::StatusOr<TrainResult> TrainInProcess(std::shared_ptr<const ClosureRegistry> registry,
                                           int workers, int ps, Model* model,
                                           const TrainerOptions& trainer) {
  InProcessClusterOptions cluster_options;
  cluster_options.num_workers = workers;
  cluster_options.num_ps = ps;
  cluster_options.registry = std::move(registry);
  absl::StatusOr<std::unique_ptr<InProcessCluster>> cluster =
      InProcessCluster::Start(cluster_options);
  if (!cluster.ok()) return cluster.status();
  return Train((*cluster)->spec(), model, trainer);
}

}  // namespace pstrain
