// Rows in fewer bits (ps/row_format.h) in training jobs: each model trained with its dynamic tables'
// rows in float32, float16, bfloat16 and int8 (the optimizer's slots in float32 for float16 rows,
// in bfloat16 for the others), 2 workers and 2 ps in-process, in the same run and with the same
// seeds (--workers workers, 2 by default; with 1 the job is deterministic, so that float32's two runs
// agree and a format's difference is its own). Two models:
//
//   click     the tabular model on the synthetic click log (bench/click_log.h: 26 id columns,
//             vocabularies up to 1M ids; its generator's true probabilities give the best test AUC
//             any model can reach), which nothing here was tuned on
//   flights   flights_ctr on data/flights/flights.csv (train January-May, test June)
//
// Per run: test AUC, examples/s, the tables' bytes per key in RAM (records, index, free memory),
// and the differences from float32's run of the same seed. float32 runs twice per seed: the
// difference between its two runs is what asynchronous training alone moves the AUC (the noise
// floor the formats' differences are read against). Each seed runs the formats in another order
// (rotated by the seed), so that no format always runs first. Then per format over the seeds: the
// mean AUC and its difference from the mean of every float32 run, the medians of the per-seed
// differences and speed ratios.
//
//   bazel run -c opt //bench:row_format_bench -- [--models=click,flights] [--seeds=3]
//       [--rows=400000] [--epochs=1]
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
#include "ps/grpc_ps_client.h"
#include "ps/row_format.h"
#include "trainer/trainer.h"

ABSL_FLAG(std::string, models, "click,flights", "Which jobs: click, flights.");
ABSL_FLAG(int, seeds, 3, "Training seeds per format.");
ABSL_FLAG(int, workers, 2, "Workers per job (1: a deterministic job).");
ABSL_FLAG(int, epochs, 1, "Epochs per run.");
ABSL_FLAG(int64_t, rows, 400000, "Click log: training rows (and a fifth as many test rows).");
ABSL_FLAG(std::string, dir, "/tmp/pstrain_click_log", "Click log: where its files go.");
ABSL_FLAG(std::string, flights, "data/flights/flights.csv", "The flights data.");

namespace pstrain {
namespace {

constexpr int kPs = 2;

struct Format {
  std::string name;
  RowFormat rows, slots;
};

struct Run {
  double auc = 0, examples_per_s = 0;
  int64_t keys = 0, bytes = 0;
};

absl::StatusOr<Run> TrainOnce(const std::string& model_name, const ModelOptions& mo,
                              const Format& f) {
  InProcessClusterOptions co;
  co.num_workers = absl::GetFlag(FLAGS_workers);
  co.num_ps = kPs;
  co.registry = *TrainingRegistry(std::make_shared<ReplicaGroups>());
  ASSIGN_OR_RETURN(std::unique_ptr<InProcessCluster> cluster, InProcessCluster::Start(co));
  ModelOptions options = mo;
  ASSIGN_OR_RETURN(std::unique_ptr<Model> model, CreateModel(model_name, options));
  TrainerOptions to;
  std::ostringstream progress;
  to.progress.out = &progress;
  to.validate = false;
  to.validate_at_start = false;
  to.placement.tables_row_format = f.rows;
  to.placement.tables_slot_format = f.slots;
  CoordinatorOptions coordinator;
  ASSIGN_OR_RETURN(TrainResult r, Train(cluster->spec(), model.get(), to, coordinator));
  Run run;
  run.auc = r.metrics.values["test_auc"];
  run.examples_per_s = r.examples_per_sec;
  for (int i = 0; i < kPs; ++i) {
    std::unique_ptr<PsClient> client = NewGrpcPsClient(i, *cluster->spec().address({"ps", i}));
    ListShardsResponse listed;
    RETURN_IF_ERROR(client->ListShards(ListShardsRequest(), &listed));
    for (const DynamicShardStats& s : listed.dynamic_stats()) {
      run.keys += s.keys();
      run.bytes += s.bytes();
    }
  }
  return run;
}

int Main() {
  const std::vector<Format> formats = {{"float32", ROW_FLOAT32, ROW_FLOAT32},
                                       {"float32_again", ROW_FLOAT32, ROW_FLOAT32},
                                       {"float16", ROW_FLOAT16, ROW_FLOAT32},
                                       {"bfloat16", ROW_BFLOAT16, ROW_BFLOAT16},
                                       {"int8", ROW_INT8, ROW_BFLOAT16}};
  for (absl::string_view which : absl::StrSplit(absl::GetFlag(FLAGS_models), ',')) {
    std::string model_name;
    ModelOptions mo;
    mo.epochs = absl::GetFlag(FLAGS_epochs);
    if (which == "click") {
      ClickLogOptions o;
      o.train_rows = absl::GetFlag(FLAGS_rows);
      o.test_rows = o.train_rows / 5;
      absl::StatusOr<ClickLog> log = WriteClickLog(absl::GetFlag(FLAGS_dir), o);
      if (!log.ok()) Die(log.status(), "click log");
      model_name = "tabular";
      mo.data = log->train_path;
      mo.extra["feature_spec"] = log->spec_path;
      Emit({{"name", "dataset"}, {"model", "click"}, {"train_rows", log->train_rows},
            {"test_rows", log->test_rows}, {"best_test_auc", log->best_test_auc},
            {"workers", absl::GetFlag(FLAGS_workers)}, {"ps", kPs}, {"epochs", mo.epochs}});
    } else if (which == "flights") {
      model_name = "flights_ctr";
      mo.data = absl::GetFlag(FLAGS_flights);
      Emit({{"name", "dataset"}, {"model", "flights"}, {"data", mo.data},
            {"workers", absl::GetFlag(FLAGS_workers)}, {"ps", kPs}, {"epochs", mo.epochs}});
    } else {
      Die(absl::InvalidArgumentError(absl::StrCat("--models: unknown \"", which, "\"")), "flags");
    }
    std::map<std::string, std::vector<double>> auc_diff, speed_ratio, auc, eps, bytes;
    for (int seed = 1; seed <= absl::GetFlag(FLAGS_seeds); ++seed) {
      mo.seed = static_cast<uint64_t>(seed);
      std::map<std::string, Run> runs;
      for (size_t i = 0; i < formats.size(); ++i) {
        const Format& f = formats[(i + static_cast<size_t>(seed) - 1) % formats.size()];
        absl::StatusOr<Run> r = TrainOnce(model_name, mo, f);
        if (!r.ok()) Die(r.status(), f.name);
        runs[f.name] = *r;
      }
      const Run& base = runs["float32"];
      for (const Format& f : formats) {
        const Run* r = &runs[f.name];
        const double per_key = r->keys > 0 ? static_cast<double>(r->bytes) / r->keys : 0;
        nlohmann::json line = {{"name", absl::StrCat(which, ".", f.name)},
                               {"seed", seed},
                               {"rows", RowFormatName(f.rows)},
                               {"slots", RowFormatName(f.slots)},
                               {"test_auc", Round(r->auc, 5)},
                               {"examples_per_s", Round(r->examples_per_s, 0)},
                               {"keys", r->keys},
                               {"table_bytes_per_key", Round(per_key, 1)}};
        line["auc_minus_float32"] = Round(r->auc - base.auc, 5);
        line["examples_per_s_vs_float32"] = Round(r->examples_per_s / base.examples_per_s);
        Emit(line);
        auc_diff[f.name].push_back(r->auc - base.auc);
        speed_ratio[f.name].push_back(r->examples_per_s / base.examples_per_s);
        auc[f.name].push_back(r->auc);
        eps[f.name].push_back(r->examples_per_s);
        bytes[f.name].push_back(per_key);
      }
    }
    auto mean = [](const std::vector<double>& v) {
      double sum = 0;
      for (double x : v) sum += x;
      return v.empty() ? 0.0 : sum / static_cast<double>(v.size());
    };
    std::vector<double> float32_runs = auc["float32"];
    float32_runs.insert(float32_runs.end(), auc["float32_again"].begin(),
                        auc["float32_again"].end());
    for (const Format& f : formats) {
      const std::vector<double>& d = auc_diff[f.name];
      Emit({{"name", absl::StrCat(which, ".summary.", f.name)},
            {"seeds", d.size()},
            {"test_auc_mean", Round(mean(auc[f.name]), 5)},
            {"auc_mean_minus_float32s_mean", Round(mean(auc[f.name]) - mean(float32_runs), 5)},
            {"auc_minus_float32_median", Round(Median(d), 5)},
            {"auc_minus_float32_range",
             {Round(*std::min_element(d.begin(), d.end()), 5),
              Round(*std::max_element(d.begin(), d.end()), 5)}},
            {"examples_per_s", Round(Median(eps[f.name]), 0)},
            {"examples_per_s_vs_float32", Round(Median(speed_ratio[f.name]))},
            {"table_bytes_per_key", Round(Median(bytes[f.name]), 1)}});
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
