// A training job whose tables don't fit its ps tasks' memory: the tabular model on the synthetic
// click log (bench/click_log.h: 26 id columns, vocabularies up to 1M ids drawn log-uniformly by
// rank), 2 workers and 2 ps in-process, in the same run:
//
//   all_in_ram   no memory budget: the tables' own size per ps is read from the ps tasks
//   tier_<k>x    every dynamic table with a disk tier (--disk_tier) and each ps's memory budget set
//                to 1/k of its tables' bytes (plus its fixed variables and 1 MiB; the disk store's
//                buffers come out of it): rows past it live on the ps's disk
//   budget_only  the same budget without a tier: what a user gets today (the job stops)
//   tier_<k>x_<format>  with --table_format: the same budget (from the float32 tables), the tables'
//                rows stored in that format (slots in bfloat16): more keys fit in RAM
//
// Prints per run examples/s, test AUC, the tables' keys and bytes in RAM and on disk, and the keys
// read from disk; then the medians over the seeds.
//
//   bazel run -c opt //bench:tier_train_bench -- [--rows=400000] [--seeds=1] [--ratios=8]
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
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

ABSL_FLAG(int64_t, rows, 400000, "Click log: training rows (and a fifth as many test rows).");
ABSL_FLAG(int, seeds, 1, "Training seeds per case.");
ABSL_FLAG(int, epochs, 1, "Epochs per run.");
ABSL_FLAG(std::string, ratios, "8", "Tables' bytes over the memory budget, one run each.");
ABSL_FLAG(std::string, dir, "/tmp/pstrain_click_log", "Click log: where its files go.");
ABSL_FLAG(std::string, disk_dir, "/tmp/tier_train_bench", "Where the ps tasks' tiers go.");
ABSL_FLAG(std::string, table_format, "",
          "Also run each tiered case with rows in this format (float16, bfloat16, int8; slots in "
          "bfloat16) under the same budget.");

namespace pstrain {
namespace {

constexpr int kPs = 2;

struct Run {
  double auc = 0, examples_per_s = 0, seconds = 0;
  // Summed over the ps tasks; the largest of each ps's.
  int64_t keys = 0, ram_keys = 0, disk_keys = 0, disk_bytes = 0, disk_hits = 0, moved_to_ram = 0;
  int64_t most_table_bytes = 0, most_fixed_bytes = 0, most_tables = 0;
};

absl::StatusOr<Run> TrainOnce(const ModelOptions& mo, int64_t budget_bytes, bool tier,
                              std::optional<RowFormat> format = std::nullopt) {
  InProcessClusterOptions co;
  co.num_workers = 2;
  co.num_ps = kPs;
  co.ps_memory_budget_bytes = budget_bytes;
  co.ps_disk_dir = absl::GetFlag(FLAGS_disk_dir);
  co.registry = *TrainingRegistry(std::make_shared<ReplicaGroups>());
  ASSIGN_OR_RETURN(std::unique_ptr<InProcessCluster> cluster, InProcessCluster::Start(co));
  ModelOptions options = mo;
  ASSIGN_OR_RETURN(std::unique_ptr<Model> model, CreateModel("tabular", options));
  TrainerOptions to;
  std::ostringstream progress;
  to.progress.out = &progress;
  to.validate = false;
  to.validate_at_start = false;
  to.placement.tables_disk_tier = tier;
  if (format.has_value()) {
    to.placement.tables_row_format = *format;
    to.placement.tables_slot_format = ROW_BFLOAT16;
  }
  CoordinatorOptions coordinator;
  ASSIGN_OR_RETURN(TrainResult r, Train(cluster->spec(), model.get(), to, coordinator));
  Run run;
  run.auc = r.metrics.values["test_auc"];
  run.examples_per_s = r.examples_per_sec;
  run.seconds = r.train_seconds;
  for (int i = 0; i < kPs; ++i) {
    std::unique_ptr<PsClient> client = NewGrpcPsClient(i, *cluster->spec().address({"ps", i}));
    ListShardsResponse listed;
    RETURN_IF_ERROR(client->ListShards(ListShardsRequest(), &listed));
    int64_t table_bytes = 0, fixed_bytes = 0;
    for (const VariableShardDef& def : listed.shards()) {
      if (def.has_dynamic()) continue;
      int64_t width = 1;
      for (int d = 1; d < def.full_shape_size(); ++d) width *= def.full_shape(d);
      fixed_bytes += def.num_rows() * width * 4 * (1 + (def.has_optimizer() ? 2 : 0));
    }
    for (const DynamicShardStats& s : listed.dynamic_stats()) {
      run.keys += s.keys();
      run.ram_keys += s.ram_keys();
      run.disk_keys += s.disk_keys();
      run.disk_bytes += s.disk_bytes();
      run.disk_hits += s.disk_hits();
      run.moved_to_ram += s.moved_to_ram();
      table_bytes += s.bytes();
    }
    run.most_table_bytes = std::max(run.most_table_bytes, table_bytes);
    run.most_fixed_bytes = std::max(run.most_fixed_bytes, fixed_bytes);
    run.most_tables = std::max<int64_t>(run.most_tables, listed.dynamic_stats_size());
  }
  return run;
}

nlohmann::json Line(const std::string& name, const Run& r) {
  return {{"name", name},
          {"test_auc", Round(r.auc, 5)},
          {"examples_per_s", Round(r.examples_per_s, 0)},
          {"train_seconds", Round(r.seconds, 1)},
          {"keys", r.keys},
          {"ram_keys", r.ram_keys},
          {"disk_keys", r.disk_keys},
          {"disk_bytes", r.disk_bytes},
          {"keys_read_from_disk", r.disk_hits},
          {"keys_moved_to_ram", r.moved_to_ram},
          {"table_bytes_in_ram_most_ps", r.most_table_bytes}};
}

int Main() {
  ClickLogOptions o;
  o.train_rows = absl::GetFlag(FLAGS_rows);
  o.test_rows = o.train_rows / 5;
  absl::StatusOr<ClickLog> log = WriteClickLog(absl::GetFlag(FLAGS_dir), o);
  if (!log.ok()) Die(log.status(), "click log");
  ModelOptions mo;
  mo.epochs = absl::GetFlag(FLAGS_epochs);
  mo.data = log->train_path;
  mo.extra["feature_spec"] = log->spec_path;
  Emit({{"name", "dataset"}, {"train_rows", log->train_rows}, {"test_rows", log->test_rows},
        {"best_test_auc", log->best_test_auc}, {"workers", 2}, {"ps", kPs},
        {"epochs", mo.epochs}});
  std::vector<int> ratios;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_ratios), ',')) {
    int k = 0;
    if (!absl::SimpleAtoi(s, &k) || k < 1) Die(absl::InvalidArgumentError("--ratios"), "flags");
    ratios.push_back(k);
  }
  std::optional<RowFormat> table_format;
  if (const std::string f = absl::GetFlag(FLAGS_table_format); !f.empty()) {
    RowFormat format;
    if (absl::Status s = ParseRowFormat(f, &format); !s.ok()) Die(s, "--table_format");
    table_format = format;
  }
  std::map<std::string, std::vector<double>> auc, eps;
  for (int seed = 1; seed <= absl::GetFlag(FLAGS_seeds); ++seed) {
    mo.seed = static_cast<uint64_t>(seed);
    absl::StatusOr<Run> ram = TrainOnce(mo, 0, false);
    if (!ram.ok()) Die(ram.status(), "all_in_ram");
    nlohmann::json line = Line("all_in_ram", *ram);
    line["seed"] = seed;
    Emit(line);
    auc["all_in_ram"].push_back(ram->auc);
    eps["all_in_ram"].push_back(ram->examples_per_s);
    for (int k : ratios) {
      // The budget: 1/k of the largest ps's tables, plus its fixed variables and 1 MiB (the disk
      // store's buffers come out of it: a quarter, ps/disk_tier.h).
      const int64_t budget = ram->most_table_bytes / k + ram->most_fixed_bytes + (1 << 20);
      const std::string name = absl::StrCat("tier_", k, "x");
      absl::StatusOr<Run> tiered = TrainOnce(mo, budget, true);
      if (!tiered.ok()) Die(tiered.status(), name);
      line = Line(name, *tiered);
      line["seed"] = seed;
      line["budget_bytes"] = budget;
      line["budget_for_tables"] = ram->most_table_bytes / k;
      line["vs_all_in_ram_examples_per_s"] = Round(tiered->examples_per_s / ram->examples_per_s);
      line["auc_minus_all_in_ram"] = Round(tiered->auc - ram->auc, 5);
      Emit(line);
      auc[name].push_back(tiered->auc);
      eps[name].push_back(tiered->examples_per_s);
      if (table_format.has_value()) {
        const std::string fname = absl::StrCat(name, "_", RowFormatName(*table_format));
        absl::StatusOr<Run> small = TrainOnce(mo, budget, true, table_format);
        if (!small.ok()) Die(small.status(), fname);
        line = Line(fname, *small);
        line["seed"] = seed;
        line["budget_bytes"] = budget;
        line["vs_all_in_ram_examples_per_s"] = Round(small->examples_per_s / ram->examples_per_s);
        line["auc_minus_all_in_ram"] = Round(small->auc - ram->auc, 5);
        Emit(line);
        auc[fname].push_back(small->auc);
        eps[fname].push_back(small->examples_per_s);
      }
      if (seed == 1 && k == ratios.front()) {
        absl::StatusOr<Run> refused = TrainOnce(mo, budget, false);
        Emit({{"name", "budget_only"},
              {"budget_bytes", budget},
              {"result", refused.ok() ? std::string("trained")
                                      : std::string(refused.status().message()).substr(0, 300)}});
      }
    }
  }
  for (const auto& [name, values] : auc) {
    Emit({{"name", "median"},
          {"case", name},
          {"seeds", values.size()},
          {"test_auc", Round(Median(values), 5)},
          {"examples_per_s", Round(Median(eps[name]), 0)}});
  }
  std::error_code ec;
  std::filesystem::remove_all(absl::GetFlag(FLAGS_disk_dir), ec);
  return 0;
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return pstrain::Main();
}
