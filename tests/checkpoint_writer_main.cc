// A process that trains and checkpoints in a loop, for the kill -9 test (checkpoint_kill_test):
// step k applies Gradients(k) to an Adagrad table on an in-process cluster, then saves checkpoint
// k and prints "saved k". It never stops by itself.
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "common/logging.h"
#include "coordinator/checkpoint_manager.h"
#include "coordinator/cluster_coordinator.h"
#include "tests/checkpoint_kill_util.h"
#include "coordinator/in_process_cluster.h"

ABSL_FLAG(std::string, dir, "", "Checkpoint directory.");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  pstrain::SetMinLogLevel(pstrain::LogLevel::kWarning);
  pstrain::InProcessClusterOptions options;
  options.num_ps = 2;
  options.num_workers = 1;
  auto cluster = pstrain::InProcessCluster::Start(options);
  CHECK(cluster.ok()) << cluster.status();
  auto coordinator = pstrain::ClusterCoordinator::Create((*cluster)->spec());
  CHECK(coordinator.ok()) << coordinator.status();
  auto table = (*coordinator)->variables()->Create(pstrain::KillTestTableSpec());
  CHECK(table.ok()) << table.status();
  pstrain::CheckpointOptions c;
  c.dir = absl::GetFlag(FLAGS_dir);
  c.keep = 2;
  auto manager = pstrain::CheckpointManager::Create(c, (*coordinator)->ps()->clients(),
                                                    (*coordinator)->variables());
  CHECK(manager.ok()) << manager.status();
  for (int64_t step = 1;; ++step) {
    CHECK(pstrain::ApplyKillTestStep(*table, step).ok());
    absl::Status s = (*coordinator)->RunExclusive([&] { return (*manager)->Save(step, {}).status(); });
    CHECK(s.ok()) << s;
    std::printf("saved %lld\n", static_cast<long long>(step));
    std::fflush(stdout);
  }
}
