#include "tests/prediction/tabular_export.h"

#include <fstream>
#include <random>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "coordinator/in_process_cluster.h"
#include "models/registry.h"
#include "serving/export.h"
#include "trainer/trainer.h"

namespace pstrain {

absl::StatusOr<TrainedTabular> TrainSmallTabular(const std::string& dir,
                                                 const SmallTabularOptions& options) {
  std::mt19937 rng(7);
  const char* cities[] = {"Oslo", "Rome", "Lima", "Kyiv", "Pune", "Graz"};
  auto write = [&](const std::string& path, int rows) {
    std::ofstream out(path);
    out << "city,tag,income,when,label\n";
    for (int i = 0; i < rows; ++i) {
      const int c = static_cast<int>(rng() % 6);
      const int income = static_cast<int>(rng() % 1000);
      const int p = (c < 2 ? 80 : 20) + (income > 500 ? 5 : -5);
      const int y = static_cast<int>(rng() % 100) < p ? 1 : 0;
      out << cities[c] << ",t" << rng() % 5 << "," << income << ",2001-0" << 1 + rng() % 9
          << "-11," << y << "\n";
    }
    return out.good();
  };
  if (!write(dir + "/train.csv", options.train_rows) ||
      !write(dir + "/test.csv", options.test_rows)) {
    return absl::InternalError(absl::StrCat("can't write the tables under ", dir));
  }
  std::ofstream(dir + "/spec.json") << absl::StrReplaceAll(R"({
      'label': {'column': 'label'},
      'features': [{'name': 'city', 'column': 'city'}, {'name': 'tag', 'column': 'tag'},
                   {'name': 'income', 'type': 'numeric', 'column': 'income'},
                   {'name': 'month', 'type': 'datetime', 'column': 'when', 'part': 'month'},
                   {'name': 'city_x_tag', 'type': 'cross', 'of': ['city', 'tag']}],
      'split': {'test_data': 'TEST'},
      'model': {'type': 'wide_and_deep', 'embedding_dim': 4, 'hidden': [8]}})",
                                                           {{"'", "\""},
                                                            {"TEST", dir + "/test.csv"}});
  ModelOptions o;
  o.data = dir + "/train.csv";
  o.epochs = options.epochs;
  o.batch_size = 64;
  o.extra["feature_spec"] = dir + "/spec.json";
  absl::StatusOr<std::unique_ptr<Model>> model = CreateModel("tabular", o);
  if (!model.ok()) return model.status();
  absl::StatusOr<std::shared_ptr<const ClosureRegistry>> registry =
      TrainingRegistry(std::make_shared<ReplicaGroups>());
  if (!registry.ok()) return registry.status();

  InProcessClusterOptions c;
  c.num_workers = 1;
  c.num_ps = 1;
  c.registry = *registry;
  absl::StatusOr<std::unique_ptr<InProcessCluster>> cluster = InProcessCluster::Start(c);
  if (!cluster.ok()) return cluster.status();
  TrainedTabular trained;
  trained.checkpoint_dir = dir + "/ckpt";
  TrainerOptions t;
  t.checkpoint_dir = trained.checkpoint_dir;
  t.restore = "none";
  t.keep_best = false;
  std::ostringstream progress;
  t.progress.out = &progress;
  absl::StatusOr<TrainResult> result = Train((*cluster)->spec(), model->get(), t);
  if (!result.ok()) return result.status();

  std::ifstream in(dir + "/test.csv");
  std::string line;
  std::getline(in, line);
  trained.test.columns = absl::StrSplit(line, ',');
  while (std::getline(in, line)) {
    if (!line.empty()) trained.test.rows.push_back(absl::StrSplit(line, ','));
  }
  return trained;
}

absl::Status ExportSmallTabular(const TrainedTabular& trained, const std::string& out,
                                int64_t top_k) {
  ExportOptions ex;
  ex.checkpoint = trained.checkpoint_dir;
  ex.out = out;
  ex.top_k = top_k;
  absl::StatusOr<ExportResult> exported = ExportModel(ex);
  return exported.ok() ? absl::OkStatus() : exported.status();
}

}  // namespace pstrain
