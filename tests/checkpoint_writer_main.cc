// A process that trains and checkpoints in a loop, for the kill -9 test (checkpoint_kill_test):
// step k applies Gradients(k) to an Adagrad table on an in-process cluster (with --incremental, also
// a step of a dynamic table), then saves checkpoint k (with --incremental, chains of a full
// checkpoint and two deltas) and prints "saved k". It never stops by itself.
#include <cstdio>
#include <optional>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "common/logging.h"
#include "coordinator/checkpoint_manager.h"
#include "coordinator/cluster_coordinator.h"
#include "tests/checkpoint_kill_util.h"
#include "coordinator/in_process_cluster.h"

ABSL_FLAG(std::string, dir, "", "Checkpoint directory.");
ABSL_FLAG(bool, incremental, false, "Also a dynamic table, saved in incremental chains.");

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
  const bool incremental = absl::GetFlag(FLAGS_incremental);
  std::optional<pstrain::DynamicTable> dynamic;
  if (incremental) {
    auto t = (*coordinator)->variables()->CreateTable(pstrain::KillTestDynamicSpec(/*shards=*/2));
    CHECK(t.ok()) << t.status();
    dynamic = *t;
  }
  pstrain::CheckpointOptions c;
  c.dir = absl::GetFlag(FLAGS_dir);
  c.keep = 2;
  c.incremental = incremental;
  c.full_every = 3;
  auto manager = pstrain::CheckpointManager::Create(c, (*coordinator)->ps()->clients(),
                                                    (*coordinator)->variables());
  CHECK(manager.ok()) << manager.status();
  for (int64_t step = 1;; ++step) {
    CHECK(pstrain::ApplyKillTestStep(*table, step).ok());
    if (dynamic) CHECK(pstrain::ApplyKillTestDynamicStep(*dynamic, step).ok());
    absl::Status s = (*coordinator)->RunExclusive([&] { return (*manager)->Save(step, {}).status(); });
    CHECK(s.ok()) << s;
    std::printf("saved %lld\n", static_cast<long long>(step));
    std::fflush(stdout);
  }
}
