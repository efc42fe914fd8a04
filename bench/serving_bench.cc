// Serving an exported model (serving/predictor.h) against the training cluster's own path:
//
//   1. trains the flights model (flights_ctr, dynamic tables) and a tabular model (the flights
//      spec, models/tabular/specs/flights_ctr.json) for --train_steps each on an in-process
//      cluster (2 workers, 2 ps) with checkpoints, and exports each (serving/export.h)
//   2. for each model, with every table row in memory and with a cache of 10% of the rows: the
//      latency of one Predict call (p50, p99) at batches of 1 and 256 test examples, and the
//      examples/s with 1 and 2 threads calling at once; the cache's hit rate
//   3. the same serving head and batches with its lookups through gRPC to the in-process training
//      cluster's ps (the checkpoint restored there): what predicting through the cluster costs
//
//   bazel run -c opt //bench:serving_bench [-- --train_steps=2000 --seconds=2]
//
// Prints one JSON object per figure.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/bench_loops.h"
#include "common/logging.h"
#include "coordinator/checkpoint_manager.h"
#include "coordinator/in_process_cluster.h"
#include "models/data/csv_records.h"
#include "models/registry.h"
#include "serving/export.h"
#include "serving/predictor.h"
#include "trainer/trainer.h"

ABSL_FLAG(std::string, data, "data/flights/flights.csv", "The flights CSV (tools/fetch_data.sh).");
ABSL_FLAG(std::string, spec, "models/tabular/specs/flights_ctr.json", "The tabular model's spec.");
ABSL_FLAG(int64_t, train_steps, 2000, "Training steps per model before export.");
ABSL_FLAG(double, seconds, 2, "Timed seconds per figure.");
ABSL_FLAG(int, test_rows, 65536, "June flights used as requests.");
ABSL_FLAG(std::string, work_dir, "/tmp/pstrain-serving-bench", "Checkpoints and exports go here.");

namespace pstrain {
namespace {

// The first `n` test (June) flights as text rows with the file's header.
RawExamples TestRows(const std::string& path, int n) {
  RawExamples out;
  auto reader = data::CsvRecordReader::Open(path);
  if (!reader.ok()) Die(reader.status(), "open data");
  if (!*(*reader)->Next()) Die(absl::InvalidArgumentError("empty"), "data");
  for (absl::string_view f : (*reader)->fields()) out.columns.emplace_back(f);
  while (static_cast<int>(out.rows.size()) < n) {
    absl::StatusOr<bool> got = (*reader)->Next();
    if (!got.ok()) Die(got.status(), "read data");
    if (!*got) break;
    if ((*reader)->field(0).substr(5, 2) != "06") continue;
    std::vector<std::string>& row = out.rows.emplace_back();
    for (absl::string_view f : (*reader)->fields()) row.emplace_back(f);
  }
  return out;
}

// Trains `model` for --train_steps with checkpoints in `ckpt`, on a fresh in-process cluster.
void TrainModel(const std::string& name, ModelOptions options, const std::string& ckpt) {
  options.max_steps = absl::GetFlag(FLAGS_train_steps);
  auto model = CreateModel(name, options);
  if (!model.ok()) Die(model.status(), name);
  InProcessClusterOptions c;
  c.num_workers = 2;
  c.num_ps = 2;
  c.registry = *TrainingRegistry(std::make_shared<ReplicaGroups>());
  auto cluster = InProcessCluster::Start(c);
  if (!cluster.ok()) Die(cluster.status(), "cluster");
  TrainerOptions t;
  t.checkpoint_dir = ckpt;
  t.restore = "none";
  t.keep_best = false;
  std::ostream quiet(nullptr);
  t.progress.out = &quiet;
  auto result = Train((*cluster)->spec(), model->get(), t);
  if (!result.ok()) Die(result.status(), absl::StrCat("train ", name));
}

struct Latency {
  double p50_us = 0, p99_us = 0, examples_per_s = 0;
};

// `threads` threads calling predict(batch) back to back for --seconds: per-call latency
// percentiles and examples/s. Each thread walks the rows in its own order.
Latency Measure(const std::function<absl::Status(const RawExamples&, std::vector<float>*)>& predict,
                const RawExamples& rows, int batch, int threads) {
  const absl::Duration duration = absl::Seconds(absl::GetFlag(FLAGS_seconds));
  std::vector<std::vector<double>> us(threads);
  std::vector<int64_t> examples(threads, 0);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      RawExamples b;
      b.columns = rows.columns;
      std::vector<float> out;
      size_t at = (rows.rows.size() / threads) * t;
      // Warm-up: a tenth of the time.
      const absl::Time warm_end = absl::Now() + duration / 10;
      bool timing = false;
      absl::Time end = absl::InfiniteFuture();
      for (;;) {
        const absl::Time now = absl::Now();
        if (!timing && now >= warm_end) {
          timing = true;
          end = now + duration;
        }
        if (timing && now >= end) break;
        b.rows.clear();
        for (int i = 0; i < batch; ++i) {
          b.rows.push_back(rows.rows[at]);
          at = (at + 1) % rows.rows.size();
        }
        const absl::Time start = absl::Now();
        absl::Status s = predict(b, &out);
        if (!s.ok()) Die(s, "predict");
        if (timing) {
          us[t].push_back(absl::ToDoubleMicroseconds(absl::Now() - start));
          examples[t] += batch;
        }
      }
    });
  }
  for (auto& t : pool) t.join();
  std::vector<double> all;
  int64_t total = 0;
  for (int t = 0; t < threads; ++t) {
    all.insert(all.end(), us[t].begin(), us[t].end());
    total += examples[t];
  }
  std::sort(all.begin(), all.end());
  Latency l;
  if (!all.empty()) {
    l.p50_us = all[all.size() / 2];
    l.p99_us = all[std::min(all.size() - 1, all.size() * 99 / 100)];
  }
  l.examples_per_s = total / absl::ToDoubleSeconds(duration);
  return l;
}

void BenchModel(const std::string& name, const ModelOptions& options, const RawExamples& rows) {
  const std::string dir = absl::StrCat(absl::GetFlag(FLAGS_work_dir), "/", name);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  const absl::Time train_start = absl::Now();
  TrainModel(name, options, dir + "/ckpt");
  const double train_s = absl::ToDoubleSeconds(absl::Now() - train_start);
  ExportOptions ex;
  ex.checkpoint = dir + "/ckpt";
  ex.out = dir + "/model/1";
  auto exported = ExportModel(ex);
  if (!exported.ok()) Die(exported.status(), "export");
  int64_t table_rows = 0, row_bytes = 0;
  for (const ExportedVariable& v : exported->manifest.variables) {
    if (v.kind != ExportedVariable::Kind::kDense) {
      table_rows += v.count;
      row_bytes = std::max(row_bytes, v.row_bytes());
    }
  }
  Emit({{"name", "export"}, {"model", name}, {"train_s", Round(train_s)},
        {"export_s", Round(exported->seconds)}, {"bytes", exported->bytes},
        {"table_rows", table_rows}});
  for (const char* cache : {"all", "10%"}) {
    PredictorOptions p;
    // 10% of the table rows at their cost in the cache (row + 64 bytes of bookkeeping).
    p.store.cache_bytes =
        std::string(cache) == "all" ? -1 : table_rows / 10 * (std::max<int64_t>(row_bytes, 4) + 64);
    auto predictor = Predictor::Load(ex.out, p);
    if (!predictor.ok()) Die(predictor.status(), "load");
    auto predict = [&](const RawExamples& b, std::vector<float>* out) {
      return (*predictor)->Predict(b, out);
    };
    for (int batch : {1, 256}) {
      for (int threads : {1, 2}) {
        const Latency l = Measure(predict, rows, batch, threads);
        Emit({{"name", "predictor"}, {"model", name}, {"cache", cache}, {"batch", batch},
              {"threads", threads}, {"p50_us", Round(l.p50_us, 1)},
              {"p99_us", Round(l.p99_us, 1)}, {"examples_per_s", Round(l.examples_per_s, 0)},
              {"cache_hit_rate", Round((*predictor)->cache_stats().hit_rate(), 4)}});
      }
    }
  }
  // The same head through the training cluster: the checkpoint restored into in-process ps
  // tasks, lookups over their data plane (PsConnection's gRPC clients use it by default).
  auto model = CreateModel(name, options);
  if (!model.ok()) Die(model.status(), name);
  InProcessClusterOptions c;
  c.num_workers = 1;
  c.num_ps = 2;
  c.registry = *TrainingRegistry(std::make_shared<ReplicaGroups>());
  auto cluster = InProcessCluster::Start(c);
  if (!cluster.ok()) Die(cluster.status(), "cluster");
  auto coordinator = ClusterCoordinator::Create((*cluster)->spec());
  if (!coordinator.ok()) Die(coordinator.status(), "coordinator");
  if (absl::Status s = (*model)->Setup(coordinator->get()); !s.ok()) Die(s, "setup");
  CheckpointOptions co;
  co.dir = dir + "/ckpt";
  auto manager = CheckpointManager::Create(co, (*coordinator)->ps()->clients(),
                                           (*coordinator)->variables());
  if (!manager.ok()) Die(manager.status(), "checkpoints");
  if (auto r = (*manager)->RestoreLatest(); !r.ok()) Die(r.status(), "restore");
  auto head = CreateServingHead(exported->manifest.model, exported->manifest.serving_config);
  if (!head.ok()) Die(head.status(), "head");
  std::unique_ptr<PsConnection> ps = PsConnection::ToAddresses((*cluster)->spec().tasks(kPs));
  auto through_cluster = [&](const RawExamples& b, std::vector<float>* out) {
    return (*head)->Predict(b, ps.get(), out);
  };
  for (int batch : {1, 256}) {
    for (int threads : {1, 2}) {
      const Latency l = Measure(through_cluster, rows, batch, threads);
      Emit({{"name", "cluster_ps"}, {"model", name}, {"batch", batch}, {"threads", threads},
            {"transport", "the ps data plane over localhost TCP (2 ps in this process)"},
            {"p50_us", Round(l.p50_us, 1)}, {"p99_us", Round(l.p99_us, 1)},
            {"examples_per_s", Round(l.examples_per_s, 0)}});
    }
  }
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  pstrain::SetMinLogLevelFromEnv();
  if (const char* dir = std::getenv("BUILD_WORKING_DIRECTORY"); dir != nullptr && *dir != '\0') {
    if (::chdir(dir) != 0) std::fprintf(stderr, "warning: can't chdir to %s\n", dir);
  }
  const pstrain::RawExamples rows =
      pstrain::TestRows(absl::GetFlag(FLAGS_data), absl::GetFlag(FLAGS_test_rows));
  pstrain::Emit({{"name", "requests"}, {"rows", rows.rows.size()}, {"cpus", std::thread::hardware_concurrency()}});
  pstrain::ModelOptions flights;
  flights.data = absl::GetFlag(FLAGS_data);
  pstrain::BenchModel("flights_ctr", flights, rows);
  pstrain::ModelOptions tabular;
  tabular.data = absl::GetFlag(FLAGS_data);
  tabular.extra["feature_spec"] = absl::GetFlag(FLAGS_spec);
  pstrain::BenchModel("tabular", tabular, rows);
  return 0;
}
