// What asynchronous training costs in accuracy, and what each answer to staleness costs in speed:
// the same model trained
//
//   sync            one worker, one step in flight: plain SGD order, the reference
//   async           the parameter-server strategy with the job's defaults (N workers, up to 16
//                   closures in flight each); dense gradients at their full rate
//   async_inverse   the same, each dense gradient's rate divided by its staleness (Zhang et al.,
//                   IJCAI 2016; the ps knows each gradient's staleness: ps/staleness.h)
//   async_inverse_sqrt   ... divided by the square root of its staleness
//   hybrid          dense part synchronous (all-reduce), tables asynchronous on shared ps tasks
//   torch           the click log's model trained by PyTorch, synchronously, in one process
//                   (bench/torch_tabular_peer.py; Debian's python3-torch), the peer
//
// on (a) a synthetic Criteo-shaped click log whose true click probabilities are known
// (bench/click_log.h: its best possible test AUC is printed beside), through the tabular model
// and the spec a user would write; (b) flights (flights_ctr; bash tools/fetch_data.sh flights).
// Each run prints its test AUC and log loss, examples/s, and the dense gradients' staleness as the
// ps measured it (mean and p99, over every fixed shard's gradients); then per dataset and variant
// the median over the seeds beside the synchronous run's.
//
//   bazel run -c opt //bench:async_accuracy_bench -- [--datasets=click,flights] [--seeds=3]
//       [--workers=2] [--variants=sync,async,async_inverse,...] [--rows=1000000]
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/match.h"
#include "bench/bench_loops.h"
#include "bench/click_log.h"
#include "common/json_parse.h"
#include "common/status_macros.h"
#include "coordinator/in_process_cluster.h"
#include "models/registry.h"
#include "nlohmann/json.hpp"
#include "ps/staleness.h"
#include "trainer/mirrored_strategy.h"
#include "trainer/trainer.h"

ABSL_FLAG(std::string, datasets, "click,flights", "Which: click (synthetic), flights.");
ABSL_FLAG(std::string, variants, "sync,async,async_inverse,async_inverse_sqrt,hybrid",
          "Which ways of training, each against sync.");
ABSL_FLAG(int, seeds, 3, "Training seeds per variant (the click log's own seed stays 1).");
ABSL_FLAG(int, workers, 2, "Workers of the asynchronous and hybrid runs (2 ps).");
ABSL_FLAG(int64_t, rows, 1000000, "Click log: training rows (and a fifth as many test rows).");
ABSL_FLAG(std::string, dir, "/tmp/pstrain_click_log", "Click log: where its files go.");
ABSL_FLAG(std::string, flights, "data/flights/flights.csv", "Flights: the CSV.");
ABSL_FLAG(int, epochs, 1, "Epochs of every run.");
ABSL_FLAG(std::string, python, "/usr/bin/python3",
          "The python with torch (Debian's python3-torch) for the torch variant.");

namespace pstrain {
namespace {

// The dense gradients' staleness over every ps's fixed shards, from their metrics: the mean
// weighted by each shard's gradients, and the largest p99.
struct Staleness {
  double mean = 0;
  double p99 = 0;
  double gradients = 0;
};

Staleness ParseStaleness(const std::string& metrics) {
  std::map<std::string, double> mean, count, p99;  // by shard (ps tasks hold distinct shards)
  std::istringstream in(metrics);
  std::string line;
  auto shard_of = [](const std::string& l) {
    const size_t a = l.find("shard=\"");
    if (a == std::string::npos) return std::string();
    const size_t b = l.find('"', a + 7);
    return l.substr(a + 7, b - a - 7);
  };
  auto value_of = [](const std::string& l) {
    double v = 0;
    if (!absl::SimpleAtod(l.substr(l.rfind(' ') + 1), &v)) return 0.0;
    return v;
  };
  for (; std::getline(in, line);) {
    if (line.rfind("pstrain_ps_gradient_staleness_mean{", 0) == 0) {
      mean[shard_of(line)] = value_of(line);
    } else if (line.rfind("pstrain_ps_gradient_staleness_count{", 0) == 0) {
      count[shard_of(line)] = value_of(line);
    } else if (line.rfind("pstrain_ps_gradient_staleness{", 0) == 0 &&
               line.find("quantile=\"0.99\"") != std::string::npos) {
      p99[shard_of(line)] = value_of(line);
    }
  }
  Staleness s;
  double weighted = 0;
  for (const auto& [shard, n] : count) {
    s.gradients += n;
    weighted += n * mean[shard];
    s.p99 = std::max(s.p99, p99[shard]);
  }
  if (s.gradients > 0) s.mean = weighted / s.gradients;
  return s;
}

struct Run {
  double auc = 0, logloss = 0, examples_per_s = 0, seconds = 0;
  Staleness staleness;
};

// The same model trained synchronously by PyTorch (bench/torch_tabular_peer.py: the tabular model
// on the click log, in one process, one thread), or an error saying why it did not run.
absl::StatusOr<Run> TrainTorch(const ModelOptions& mo) {
  const std::string command = absl::StrCat(
      absl::GetFlag(FLAGS_python), " bench/torch_tabular_peer.py --spec ",
      mo.extra.at("feature_spec"), " --train ", mo.data, " --seed ", mo.seed, " --epochs ",
      mo.epochs > 0 ? mo.epochs : 1, " --threads 1 2>&1");
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return absl::UnavailableError("could not start python");
  Run run;
  bool got = false;
  std::string last;
  char line[8192];
  while (fgets(line, sizeof(line), pipe) != nullptr) {
    last = line;
    absl::StatusOr<nlohmann::json> j = ParseJson(line);
    if (!j.ok() || !j->is_object() || j->value("name", "") != "torch_peer") continue;
    run.auc = j->value("test_auc", 0.0);
    run.logloss = j->value("test_logloss", 0.0);
    run.examples_per_s = j->value("examples_per_s", 0.0);
    run.seconds = j->value("train_seconds", 0.0);
    got = true;
  }
  const int rc = pclose(pipe);
  if (!got) {
    return absl::UnavailableError(absl::StrCat("the torch peer exited with ", rc, ": ", last));
  }
  return run;
}

absl::StatusOr<Run> TrainOnce(const std::string& model, const ModelOptions& mo,
                              const std::string& variant, int workers) {
  if (variant == "torch") {
    if (model != "tabular") {
      return absl::InvalidArgumentError("the torch peer trains the tabular model (the click log)");
    }
    return TrainTorch(mo);
  }
  TrainerOptions to;
  std::ostringstream progress;
  to.progress.out = &progress;
  to.validate = false;
  to.validate_at_start = false;
  Run run;
  if (absl::StartsWith(variant, "hybrid")) {
    MirroredOptions mirrored;
    mirrored.num_workers = workers;
    // Experiments: hybrid_inflight<N> runs N steps in flight per worker.
    if (absl::StartsWith(variant, "hybrid_inflight") &&
        !absl::SimpleAtoi(variant.substr(15), &mirrored.steps_in_flight)) {
      return absl::InvalidArgumentError(absl::StrCat("variant ", variant));
    }
    // Experiments: hybrid_batch<K> trains a global batch of K x 256 (each worker's share K x 256
    // / workers).
    ModelOptions mo_hybrid = mo;
    if (absl::StartsWith(variant, "hybrid_batch")) {
      int k = 0;
      if (!absl::SimpleAtoi(variant.substr(12), &k) || k < 1) {
        return absl::InvalidArgumentError(absl::StrCat("variant ", variant));
      }
      mo_hybrid.batch_size = 256 * k;
    }
    ASSIGN_OR_RETURN(MirroredResult r, TrainHybridInProcess(model, mo_hybrid, to, mirrored, 2));
    run.auc = r.chief.metrics.values["test_auc"];
    run.logloss = r.chief.metrics.values["test_logloss"];
    run.examples_per_s = r.chief.examples_per_sec;
    run.seconds = r.chief.train_seconds;
    return run;
  }
  InProcessClusterOptions co;
  co.num_workers = variant == "sync" || variant == "async_1w" ? 1 : workers;
  co.num_ps = 2;
  co.metrics_port = 0;
  co.registry = *TrainingRegistry(std::make_shared<ReplicaGroups>());
  ASSIGN_OR_RETURN(std::unique_ptr<InProcessCluster> cluster, InProcessCluster::Start(co));
  if (variant == "sync") to.max_pending_steps = 1;
  // Experiments: async_pending<N> bounds the steps in flight in the whole job to N;
  // async_1w runs one worker with the defaults.
  if (absl::StartsWith(variant, "async_pending")) {
    int n = 0;
    if (!absl::SimpleAtoi(variant.substr(13), &n) || n < 1) {
      return absl::InvalidArgumentError(absl::StrCat("variant ", variant));
    }
    to.max_pending_steps = n;
  }
  ModelOptions mo_run = mo;
  if (absl::StartsWith(variant, "async_turns")) {
    int n = 0;
    if (!absl::SimpleAtoi(variant.substr(11), &n) || n < 0) {
      return absl::InvalidArgumentError(absl::StrCat("variant ", variant));
    }
    mo_run.dense_turns = n;
  }
  if (variant == "async_inverse") to.staleness_scaling = OptimizerDef::STALENESS_INVERSE;
  if (variant == "async_inverse_sqrt") {
    to.staleness_scaling = OptimizerDef::STALENESS_INVERSE_SQRT;
  }
  CoordinatorOptions coordinator;
  // Experiments: async_inflight<N> keeps up to N closures in flight per worker (default 16).
  if (absl::StartsWith(variant, "async_inflight") &&
      !absl::SimpleAtoi(variant.substr(14), &coordinator.max_inflight_per_worker)) {
    return absl::InvalidArgumentError(absl::StrCat("variant ", variant));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Model> m, CreateModel(model, mo_run));
  ASSIGN_OR_RETURN(TrainResult r, Train(cluster->spec(), m.get(), to, coordinator));
  run.auc = r.metrics.values["test_auc"];
  run.logloss = r.metrics.values["test_logloss"];
  run.examples_per_s = r.examples_per_sec;
  run.seconds = r.train_seconds;
  run.staleness = ParseStaleness(cluster->RenderMetrics());
  return run;
}

int Main() {
  const std::vector<std::string> datasets = absl::StrSplit(absl::GetFlag(FLAGS_datasets), ',');
  const std::vector<std::string> variants = absl::StrSplit(absl::GetFlag(FLAGS_variants), ',');
  const int workers = absl::GetFlag(FLAGS_workers);
  for (const std::string& dataset : datasets) {
    std::string model;
    ModelOptions mo;
    mo.epochs = absl::GetFlag(FLAGS_epochs);
    nlohmann::json about = {{"name", "dataset"}, {"dataset", dataset}};
    if (dataset == "click") {
      ClickLogOptions o;
      o.train_rows = absl::GetFlag(FLAGS_rows);
      o.test_rows = o.train_rows / 5;
      absl::StatusOr<ClickLog> log = WriteClickLog(absl::GetFlag(FLAGS_dir), o);
      if (!log.ok()) {
        std::fprintf(stderr, "error: %s\n", std::string(log.status().message()).c_str());
        return 2;
      }
      model = "tabular";
      mo.data = log->train_path;
      mo.extra["feature_spec"] = log->spec_path;
      about.update({{"train_rows", log->train_rows}, {"test_rows", log->test_rows},
                    {"train_ctr", log->train_ctr}, {"best_test_auc", log->best_test_auc},
                    {"best_test_logloss", log->best_test_logloss},
                    {"note", "the best: the true click probabilities"}});
    } else if (dataset == "flights") {
      model = "flights_ctr";
      mo.data = absl::GetFlag(FLAGS_flights);
    } else {
      std::fprintf(stderr, "error: --datasets: '%s' is not click or flights\n", dataset.c_str());
      return 2;
    }
    Emit(about);
    std::map<std::string, std::vector<double>> auc, logloss, eps, st_mean, st_p99;
    for (int seed = 1; seed <= absl::GetFlag(FLAGS_seeds); ++seed) {
      mo.seed = static_cast<uint64_t>(seed);
      for (const std::string& variant : variants) {
        absl::StatusOr<Run> r = TrainOnce(model, mo, variant, workers);
        if (!r.ok()) {
          std::fprintf(stderr, "error: %s %s: %s\n", dataset.c_str(), variant.c_str(),
                       std::string(r.status().message()).c_str());
          return 2;
        }
        auc[variant].push_back(r->auc);
        logloss[variant].push_back(r->logloss);
        eps[variant].push_back(r->examples_per_s);
        st_mean[variant].push_back(r->staleness.mean);
        st_p99[variant].push_back(r->staleness.p99);
        Emit({{"name", "run"}, {"dataset", dataset}, {"variant", variant}, {"seed", seed},
               {"workers", variant == "sync" ? 1 : workers}, {"test_auc", r->auc},
               {"test_logloss", r->logloss}, {"examples_per_s", r->examples_per_s},
               {"train_seconds", r->seconds}, {"staleness_mean", r->staleness.mean},
               {"staleness_p99", r->staleness.p99},
               {"dense_gradients", r->staleness.gradients}});
      }
    }
    const double sync_auc = Median(auc["sync"]);
    const double async_eps = Median(eps["async"]);
    for (const std::string& variant : variants) {
      nlohmann::json j = {{"name", "median"},
                          {"dataset", dataset},
                          {"variant", variant},
                          {"seeds", auc[variant].size()},
                          {"test_auc", Median(auc[variant])},
                          {"test_logloss", Median(logloss[variant])},
                          {"examples_per_s", Median(eps[variant])},
                          {"staleness_mean", Median(st_mean[variant])},
                          {"staleness_p99", Median(st_p99[variant])}};
      if (!auc["sync"].empty()) {
        j["auc_minus_sync"] = Median(auc[variant]) - sync_auc;
        j["target_auc"] = "within 0.001 of sync";
      }
      if (async_eps > 0) j["examples_per_s_vs_async"] = Median(eps[variant]) / async_eps;
      Emit(j);
    }
  }
  return 0;
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return pstrain::Main();
}
