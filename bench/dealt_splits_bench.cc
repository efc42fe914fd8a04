// What dealing the data on demand (coordinator/split_ledger.h) buys when workers die or lag, and
// what it costs when they don't: the tabular model on the synthetic click log (bench/click_log.h),
// 3 workers and 2 ps in-process, one epoch, each case with the data dealt by the coordinator
// ("dealt", the default) and with each worker owning a fixed share of the files ("shares",
// deal_splits=false, the code before it):
//
//   clean       no failure
//   kill        a third of the way in, worker 1 is stopped and started again and worker 2 stopped
//               for good; half way, ps 1 is stopped and started again (its shards reloaded from
//               the latest checkpoint, one every tenth of the epoch)
//   straggler   worker 2's steps take 3x as long (slow_worker=2, slow_factor=3); beside it, the
//               same job with 2 workers (the job without the slow worker)
//
// Prints per run the test AUC, examples/s, the epoch's wall time and the rows trained (and
// trained twice, as the ledger counted them); then per case the median over the seeds.
//
//   bazel run -c opt //bench:dealt_splits_bench -- [--rows=400000] [--seeds=3]
//       [--cases=clean,kill,straggler]
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/bench_loops.h"
#include "bench/click_log.h"
#include "common/status_macros.h"
#include "coordinator/in_process_cluster.h"
#include "models/registry.h"
#include "nlohmann/json.hpp"
#include "trainer/trainer.h"

ABSL_FLAG(int64_t, rows, 400000, "Click log: training rows (and a fifth as many test rows).");
ABSL_FLAG(int, seeds, 3, "Training seeds per case.");
ABSL_FLAG(std::string, cases, "clean,kill,straggler", "Which cases.");
ABSL_FLAG(std::string, dir, "/tmp/pstrain_click_log", "Click log: where its files go.");
ABSL_FLAG(bool, kill_ps, true, "kill: also restart ps 1 half way.");

namespace pstrain {
namespace {

struct Run {
  double auc = 0, examples_per_s = 0, seconds = 0, rows_trained = 0, rows_twice = 0;
  double examples = 0;  // trained, repeats included
};

// One epoch on `workers` workers; `kill`: the failures above; `slow`: worker 2 at a third speed.
absl::StatusOr<Run> TrainOnce(const ModelOptions& base, bool dealt, int workers, bool kill,
                              bool slow) {
  ModelOptions mo = base;
  mo.extra["deal_splits"] = dealt ? "true" : "false";
  if (slow) {
    mo.extra["slow_worker"] = "2";
    mo.extra["slow_factor"] = "3";
  }
  InProcessClusterOptions co;
  co.num_workers = workers;
  co.num_ps = 2;
  co.registry = *TrainingRegistry(std::make_shared<ReplicaGroups>());
  ASSIGN_OR_RETURN(std::unique_ptr<InProcessCluster> cluster, InProcessCluster::Start(co));
  ASSIGN_OR_RETURN(std::unique_ptr<Model> model, CreateModel("tabular", mo));
  TrainerOptions to;
  std::ostringstream progress;
  to.progress.out = &progress;
  to.validate = false;
  to.validate_at_start = false;
  const std::string ckpt = absl::StrCat(absl::GetFlag(FLAGS_dir), "/dealt_bench_ckpt");
  std::error_code ec;
  std::filesystem::remove_all(ckpt, ec);
  if (kill) {
    // The trainer's model: its steps per epoch are known once it is set up; the hook reads them
    // then.
    Model* m = model.get();
    InProcessCluster* c = cluster.get();
    to.checkpoint_dir = ckpt;
    to.checkpoint_every = absl::ZeroDuration();
    to.keep_checkpoints = 2;
    to.after_step = [m, c, workers](int64_t step) -> absl::Status {
      const int64_t total = m->steps_per_epoch();
      if (step + 1 == total / 3 && workers >= 3) {
        RETURN_IF_ERROR(c->RestartTask({"worker", 1}));
        RETURN_IF_ERROR(c->StopTask({"worker", 2}));
      }
      if (step + 1 == total / 2 && absl::GetFlag(FLAGS_kill_ps)) {
        RETURN_IF_ERROR(c->RestartTask({"ps", 1}));
      }
      return absl::OkStatus();
    };
    // A checkpoint every tenth of the epoch (the steps are known from the data's rows).
    to.checkpoint_every_steps = std::max<int64_t>(1, absl::GetFlag(FLAGS_rows) / 256 / 10);
  }
  CoordinatorOptions coordinator;
  ASSIGN_OR_RETURN(TrainResult r, Train(cluster->spec(), model.get(), to, coordinator));
  std::filesystem::remove_all(ckpt, ec);
  Run run;
  run.auc = r.metrics.values["test_auc"];
  run.examples_per_s = r.examples_per_sec;
  run.seconds = r.train_seconds;
  run.rows_trained = r.metrics.values["data_rows_trained"];
  run.rows_twice = r.metrics.values["data_rows_twice"];
  run.examples = static_cast<double>(r.examples);
  return run;
}

int Main() {
  ClickLogOptions o;
  o.train_rows = absl::GetFlag(FLAGS_rows);
  o.test_rows = o.train_rows / 5;
  absl::StatusOr<ClickLog> log = WriteClickLog(absl::GetFlag(FLAGS_dir), o);
  if (!log.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(log.status().message()).c_str());
    return 2;
  }
  ModelOptions mo;
  mo.epochs = 1;
  mo.data = log->train_path;
  mo.extra["feature_spec"] = log->spec_path;
  Emit({{"name", "dataset"}, {"train_rows", log->train_rows}, {"test_rows", log->test_rows},
        {"best_test_auc", log->best_test_auc}, {"workers", 3}, {"ps", 2}});

  struct Variant {
    std::string name;
    bool dealt;
    int workers;
    bool kill, slow;
  };
  std::vector<Variant> variants;
  const std::vector<std::string> cases = absl::StrSplit(absl::GetFlag(FLAGS_cases), ',');
  for (const std::string& c : cases) {
    for (bool dealt : {true, false}) {
      const std::string how = dealt ? "dealt" : "shares";
      if (c == "clean") variants.push_back({"clean_" + how, dealt, 3, false, false});
      if (c == "kill") variants.push_back({"kill_" + how, dealt, 3, true, false});
      if (c == "straggler") variants.push_back({"straggler_" + how, dealt, 3, false, true});
    }
    if (c == "straggler") variants.push_back({"two_workers_dealt", true, 2, false, false});
  }
  std::map<std::string, std::vector<double>> auc, eps, secs, twice, trained;
  for (int seed = 1; seed <= absl::GetFlag(FLAGS_seeds); ++seed) {
    mo.seed = static_cast<uint64_t>(seed);
    for (const Variant& v : variants) {
      absl::StatusOr<Run> r = TrainOnce(mo, v.dealt, v.workers, v.kill, v.slow);
      if (!r.ok()) {
        std::fprintf(stderr, "error: %s: %s\n", v.name.c_str(),
                     std::string(r.status().message()).c_str());
        return 2;
      }
      auc[v.name].push_back(r->auc);
      eps[v.name].push_back(r->examples_per_s);
      secs[v.name].push_back(r->seconds);
      twice[v.name].push_back(r->rows_twice);
      trained[v.name].push_back(r->rows_trained);
      Emit({{"name", "run"}, {"case", v.name}, {"seed", seed}, {"workers", v.workers},
            {"test_auc", r->auc}, {"examples_per_s", r->examples_per_s},
            {"train_seconds", r->seconds}, {"rows_trained", r->rows_trained},
            {"rows_twice", r->rows_twice}, {"examples", r->examples}});
    }
  }
  for (const Variant& v : variants) {
    nlohmann::json j = {{"name", "median"},
                        {"case", v.name},
                        {"seeds", auc[v.name].size()},
                        {"test_auc", Median(auc[v.name])},
                        {"examples_per_s", Median(eps[v.name])},
                        {"train_seconds", Median(secs[v.name])},
                        {"rows_trained", Median(trained[v.name])},
                        {"rows_twice", Median(twice[v.name])}};
    const std::string clean = v.dealt ? "clean_dealt" : "clean_shares";
    if (v.kill && !auc[clean].empty()) {
      j["auc_minus_clean"] = Median(auc[v.name]) - Median(auc[clean]);
      j["target"] = "kill within 0.002 AUC of clean";
    }
    if (v.slow && !secs["two_workers_dealt"].empty()) {
      j["seconds_vs_two_workers"] = Median(secs[v.name]) / Median(secs["two_workers_dealt"]);
      j["target"] = "straggler within 1.3x of the job without the slow worker";
    }
    Emit(j);
  }
  return 0;
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return pstrain::Main();
}
