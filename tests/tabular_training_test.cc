// The tabular model trained by the trainer on a real in-process cluster, from CSV files and JSON
// specs the tests write: a separable binary table (quoted fields, text labels) is learned to
// AUC 1; a regression to its noise; a multiclass table to its classes; data spread over plain and
// gzip files with bad rows skipped and counted; and bad input fails before training with a
// message naming the file, line and column.
#include <sys/stat.h>
#include <zlib.h>

#include <cmath>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "common/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/registry.h"
#include "models/tabular/tabular_model.h"
#include "tests/row_log.h"
#include "tests/train_in_process.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

void Write(const std::string& path, const std::string& text) {
  if (absl::EndsWith(path, ".gz")) {
    gzFile f = gzopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
    gzclose(f);
    return;
  }
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// `spec` with single quotes for double ones, written into `dir`.
std::string WriteSpec(const std::string& dir, const std::string& spec) {
  const std::string path = dir + "/spec.json";
  Write(path, absl::StrReplaceAll(spec, {{"'", "\""}}));
  return path;
}

absl::StatusOr<TrainResult> Train(const std::string& spec, const std::string& data, int epochs,
                                  std::map<std::string, std::string> extra = {},
                                  int workers = 2) {
  ModelOptions o;
  o.data = data;
  o.epochs = epochs;
  o.batch_size = 32;
  o.extra = std::move(extra);
  o.extra["feature_spec"] = spec;
  absl::StatusOr<std::unique_ptr<Model>> model = CreateTabular(o);
  if (!model.ok()) return model.status();
  return TrainInProcess(*TrainingRegistry(std::make_shared<ReplicaGroups>()), workers, /*ps=*/2,
                        model->get());
}

const char* kCities[] = {"Oslo", "Rome", "Lima", "Kyiv", "Pune, MH", "Graz"};

// Insurance is bought in Oslo and Rome only: a separable table, with noise columns, R-style quoting
// and a field holding the delimiter.
TEST(TabularTrainTest, SeparableBinary_LearnedToAucOne) {
  const std::string dir = FreshTempDir("tab_binary");
  std::mt19937 rng(3);
  std::string csv = "\"id\",\"city\",\"tags\",\"income\",\"when\",\"CARAVAN\"\n";
  for (int i = 0; i < 3000; ++i) {
    const int c = static_cast<int>(rng() % 6);
    absl::StrAppend(&csv, "\"c", i, "\",\"", kCities[c], "\",\"t", rng() % 4, "|t", rng() % 4,
                    "\",", rng() % 1000, ",\"2001-", absl::StrFormat("%02d", 1 + rng() % 12),
                    "-11 10:00\",\"", c < 2 ? "insurance" : "noinsurance", "\"\n");
  }
  Write(dir + "/t.csv", csv);
  const std::string spec = WriteSpec(dir, R"({
    'label': {'column': 'CARAVAN', 'positive': ['insurance'], 'negative': ['noinsurance']},
    'features': [
      {'name': 'city', 'column': 'city'},
      {'name': 'tags', 'column': 'tags', 'separator': '|', 'pooling': 'mean'},
      {'name': 'income', 'type': 'numeric', 'column': 'income'},
      {'name': 'month', 'type': 'datetime', 'column': 'when', 'part': 'month'}],
    'model': {'type': 'wide_and_deep', 'embedding_dim': 4, 'hidden': [8], 'interaction': 'dot'}})");
  absl::StatusOr<TrainResult> r = Train(spec, dir + "/t.csv", /*epochs=*/4);
  ASSERT_TRUE(r.ok()) << r.status();
  const auto& v = r->metrics.values;
  EXPECT_GT(v.at("test_auc"), 0.999);
  EXPECT_GT(v.at("test_baseline_auc"), 0.999);
  EXPECT_LT(v.at("test_logloss"), 0.5 * v.at("test_prior_logloss"));
  EXPECT_GT(v.at("val_auc"), 0.999);
  EXPECT_EQ(r->monitor, "val_auc");
  const int64_t train = std::stoll(r->metrics.notes.at("train_rows"));
  const int64_t test = std::stoll(r->metrics.notes.at("test_rows"));
  const int64_t val = std::stoll(r->metrics.notes.at("validation_rows"));
  EXPECT_EQ(train + test + val, 3000);
  EXPECT_NEAR(test, 600, 80);
  // Every training row exactly once per epoch (the coordinator deals the splits); a batch can
  // come short at the end, which leaves a step or two more than the count of full batches.
  EXPECT_EQ(v.at("data_rows_trained"), 4 * train);
  EXPECT_EQ(v.at("data_rows_twice"), 0);
  EXPECT_EQ(v.at("data_rows_left"), 0);
  EXPECT_GE(r->end_step, 4 * ((train + 31) / 32));
  EXPECT_LE(r->end_step, 4 * ((train + 31) / 32) + 2);
  EXPECT_EQ(r->metrics.notes.at("test_rows_evaluated"), absl::StrCat(test));
  EXPECT_EQ(r->tables.count("tabular/embedding"), 1u);
  EXPECT_EQ(r->tables.count("tabular/wide"), 1u);
  EXPECT_EQ(r->tables.count("tabular/baseline"), 1u);
}

// A straggler: worker 2's steps take 3x as long. The coordinator deals the splits on demand, so it
// is dealt fewer of them than each of the others, and every row is still trained exactly once
// (counted from the ids each worker logs; the epoch's wall time is bench/dealt_splits_bench's).
TEST(TabularTrainTest, SlowWorker_DealtFewerRowsEveryRowOnce) {
  const std::string dir = FreshTempDir("tab_straggler");
  std::mt19937 rng(7);
  std::string csv = "city,income,bought\n";
  for (int i = 0; i < 12000; ++i) {
    const int c = static_cast<int>(rng() % 6);
    absl::StrAppend(&csv, kCities[c][0] == 'P' ? "Pune" : kCities[c], ",", rng() % 1000, ",",
                    c < 2 ? "1" : "0", "\n");
  }
  Write(dir + "/t.csv", csv);
  const std::string spec = WriteSpec(dir, R"({
    'label': {'column': 'bought'},
    'features': [{'name': 'city', 'column': 'city'},
                 {'name': 'income', 'type': 'numeric', 'column': 'income'}],
    'model': {'type': 'wide_and_deep', 'embedding_dim': 4, 'hidden': [8]}})");
  absl::StatusOr<TrainResult> r =
      Train(spec, dir + "/t.csv", /*epochs=*/1,
            {{"slow_worker", "2"}, {"slow_factor", "3"}, {"row_log", dir + "/rows"}, {"hold_rows", "512"}},
            /*workers=*/3);
  ASSERT_TRUE(r.ok()) << r.status();
  const int64_t train = std::stoll(r->metrics.notes.at("train_rows"));
  std::vector<int64_t> per_worker;
  const std::map<int64_t, int> seen = LoggedRows(dir, "rows", &per_worker);
  ASSERT_EQ(per_worker.size(), 3u);
  EXPECT_EQ(static_cast<int64_t>(seen.size()), train);
  for (const auto& [id, times] : seen) ASSERT_EQ(times, 1) << id;
  EXPECT_EQ(per_worker[0] + per_worker[1] + per_worker[2], train);
  EXPECT_LT(per_worker[2], per_worker[0]) << r->metrics.notes.at("data_splits");
  EXPECT_LT(per_worker[2], per_worker[1]) << per_worker[0] << " " << per_worker[2];
  EXPECT_EQ(r->metrics.values.at("data_rows_left"), 0);
}

// A job that dies mid-epoch resumes from its last checkpoint with the splits not yet done: the
// resumed run trains the rows the checkpoint had not, each once, and no row the checkpoint had.
TEST(TabularTrainTest, ResumedMidEpoch_TrainsOnlyTheRowsNotYetTrained) {
  const std::string dir = FreshTempDir("tab_resume");
  std::mt19937 rng(9);
  std::string csv = "city,income,bought\n";
  for (int i = 0; i < 6000; ++i) {
    const int c = static_cast<int>(rng() % 6);
    absl::StrAppend(&csv, c, ",", rng() % 1000, ",", c < 2 ? "1" : "0", "\n");
  }
  Write(dir + "/t.csv", csv);
  const std::string spec = WriteSpec(dir, R"({
    'label': {'column': 'bought'},
    'features': [{'name': 'city', 'column': 'city'},
                 {'name': 'income', 'type': 'numeric', 'column': 'income'}],
    'model': {'type': 'wide', 'embedding_dim': 4}})");
  auto run = [&](const std::string& log, bool die) {
    ModelOptions o;
    o.data = dir + "/t.csv";
    o.epochs = 1;
    o.batch_size = 32;
    o.extra = {{"feature_spec", spec}, {"row_log", dir + "/" + log}, {"hold_rows", "256"}};
    absl::StatusOr<std::unique_ptr<Model>> model = CreateTabular(o);
    EXPECT_TRUE(model.ok()) << model.status();
    TrainerOptions t;
    t.checkpoint_dir = dir + "/ckpt";
    t.checkpoint_every_steps = 40;
    t.checkpoint_every = absl::ZeroDuration();
    t.validate = false;
    t.keep_best = false;
    if (die) {
      t.after_step = [](int64_t step) -> absl::Status {
        return step + 1 == 60 ? absl::InternalError("the job dies") : absl::OkStatus();
      };
    }
    return TrainInProcess(*TrainingRegistry(std::make_shared<ReplicaGroups>()), /*workers=*/2,
                          /*ps=*/2, model->get(), t);
  };
  absl::StatusOr<TrainResult> first = run("first", /*die=*/true);
  ASSERT_FALSE(first.ok());
  absl::StatusOr<TrainResult> second = run("second", /*die=*/false);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->start_step, 40);
  const int64_t train = std::stoll(second->metrics.notes.at("train_rows"));
  const std::map<int64_t, int> before = LoggedRows(dir, "first");
  const std::map<int64_t, int> after = LoggedRows(dir, "second");
  for (const auto& [id, times] : after) ASSERT_EQ(times, 1) << id;
  // The checkpoint at step 40 holds 40 full batches; the resumed run trains the rest.
  EXPECT_EQ(static_cast<int64_t>(after.size()), train - 40 * 32);
  std::map<int64_t, int> all = before;
  for (const auto& [id, times] : after) all[id] += times;
  EXPECT_EQ(static_cast<int64_t>(all.size()), train);
  EXPECT_EQ(second->metrics.values.at("data_rows_trained"), train);
  EXPECT_EQ(second->metrics.values.at("data_rows_left"), 0);
}

// y = 2 x + 3 (if kind is a) - 1 (else) + noise(0.1): learned to about the noise.
TEST(TabularTrainTest, Regression_LearnedToItsNoise) {
  const std::string dir = FreshTempDir("tab_regression");
  std::mt19937 rng(5);
  std::normal_distribution<double> noise(0, 0.1), x(0, 1);
  std::string csv = "x,kind,price\n";
  for (int i = 0; i < 4000; ++i) {
    const double xv = x(rng);
    const int k = static_cast<int>(rng() % 3);
    absl::StrAppend(&csv, xv, ",", std::string(1, 'a' + k), ",",
                    1000 + 2 * xv + (k == 0 ? 3 : -1) + noise(rng), "\n");
  }
  Write(dir + "/r.csv", csv);
  const std::string spec = WriteSpec(dir, R"({
    'label': {'column': 'price', 'task': 'regression'},
    'features': [{'name': 'x', 'type': 'numeric', 'column': 'x'},
                 {'name': 'kind', 'column': 'kind'}],
    'model': {'type': 'wide'}})");
  absl::StatusOr<TrainResult> r = Train(spec, dir + "/r.csv", /*epochs=*/10);
  ASSERT_TRUE(r.ok()) << r.status();
  const auto& v = r->metrics.values;
  EXPECT_LT(v.at("test_rmse"), 0.2);
  EXPECT_GT(v.at("test_prior_rmse"), 1.5);
  EXPECT_EQ(v.count("test_baseline_rmse"), 0u);  // a wide model is its own baseline
  EXPECT_EQ(r->monitor, "val_rmse");
}

// The class is the colour's group: three classes, learned.
TEST(TabularTrainTest, Multiclass_LearnsTheClasses) {
  const std::string dir = FreshTempDir("tab_multiclass");
  std::mt19937 rng(9);
  const char* colours[] = {"red", "pink", "blue", "navy", "green", "lime"};
  const char* groups[] = {"warm", "cold", "leafy"};
  std::string csv = "colour,size,group\n";
  for (int i = 0; i < 3000; ++i) {
    const int c = static_cast<int>(rng() % 6);
    absl::StrAppend(&csv, colours[c], ",", rng() % 100, ",", groups[c / 2], "\n");
  }
  Write(dir + "/m.csv", csv);
  const std::string spec = WriteSpec(dir, R"({
    'label': {'column': 'group', 'task': 'multiclass'},
    'features': [{'name': 'colour', 'column': 'colour'},
                 {'name': 'size', 'type': 'numeric', 'column': 'size', 'transform': 'bucketize',
                  'quantiles': 4}],
    'model': {'embedding_dim': 4, 'hidden': [8]}})");
  absl::StatusOr<TrainResult> r = Train(spec, dir + "/m.csv", /*epochs=*/5);
  ASSERT_TRUE(r.ok()) << r.status();
  const auto& v = r->metrics.values;
  EXPECT_GT(v.at("test_accuracy"), 0.99);
  EXPECT_GT(v.at("test_baseline_accuracy"), 0.99);
  EXPECT_LT(v.at("test_prior_accuracy"), 0.45);
  EXPECT_EQ(r->monitor, "val_accuracy");
}

// Plain and gzip files in a directory, each worker streaming its own files; two bad rows skipped
// and counted; the rows evaluated are every held-out row.
TEST(TabularTrainTest, ManyFilesGzipAndBadRowsSkipped) {
  const std::string dir = FreshTempDir("tab_files");
  ::mkdir((dir + "/data").c_str(), 0755);
  std::mt19937 rng(1);
  int64_t rows = 0;
  for (int f = 0; f < 5; ++f) {
    std::string csv = "g,y\n";
    for (int i = 0; i < 400; ++i, ++rows) {
      const int g = static_cast<int>(rng() % 4);
      absl::StrAppend(&csv, "g", g, ",", g < 2 ? 1 : 0, "\n");
    }
    if (f == 3) csv += "g1,2\ng2\n";  // a label outside 0/1, and a short row
    Write(absl::StrCat(dir, "/data/part-", f, f % 2 ? ".csv.gz" : ".csv"), csv);
  }
  const std::string spec = WriteSpec(dir, R"({
    'label': {'column': 'y'}, 'features': [{'name': 'g', 'column': 'g'}]})");
  absl::StatusOr<TrainResult> strict = Train(spec, dir + "/data", 1);
  EXPECT_THAT(strict, StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("part-3.csv.gz:402: column 'y': '2' is not a binary label")));
  absl::StatusOr<TrainResult> r = Train(spec, dir + "/data", /*epochs=*/3, {{"bad_rows", "skip"}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->metrics.notes.at("bad_rows"), "2");
  EXPECT_EQ(r->metrics.notes.at("files"), "5");
  EXPECT_GT(r->metrics.values.at("test_auc"), 0.999);
  const int64_t train = std::stoll(r->metrics.notes.at("train_rows"));
  const int64_t test = std::stoll(r->metrics.notes.at("test_rows"));
  const int64_t val = std::stoll(r->metrics.notes.at("validation_rows"));
  EXPECT_EQ(train + test + val, rows);
  EXPECT_EQ(r->metrics.notes.at("test_rows_evaluated"), absl::StrCat(test));
}

TEST(TabularTrainTest, BadInput_ClearErrorsBeforeTraining) {
  const std::string dir = FreshTempDir("tab_bad");
  Write(dir + "/t.csv", "a,b,y\nx,1.5,1\nz,2,0\nw,abc,1\n");
  std::string spec = WriteSpec(dir, R"({'label': {'column': 'y'},
    'features': [{'name': 'a', 'column': 'a'}, {'name': 'b', 'type': 'numeric', 'column': 'b'}]})");
  EXPECT_THAT(Train(spec, dir + "/t.csv", 1),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("t.csv:4: column 'b': 'abc' is not a number")));
  spec = WriteSpec(dir, R"({'label': {'column': 'y'},
    'features': [{'name': 'c', 'column': 'c'}]})");
  EXPECT_THAT(Train(spec, dir + "/t.csv", 1),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("t.csv: no column 'c' (the spec")));
  Write(dir + "/empty.csv", "");
  EXPECT_THAT(Train(spec, dir + "/empty.csv", 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty.csv: empty file")));
  EXPECT_THAT(Train(spec, dir + "/none.csv", 1),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("none.csv")));
  EXPECT_THAT(Train(dir + "/no_spec.json", dir + "/t.csv", 1),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no_spec.json")));
  ModelOptions o;
  o.extra["feature_spec"] = spec;
  EXPECT_THAT(CreateTabular(o), StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("--data=FILE, DIRECTORY or GLOB is required")));
}

}  // namespace
}  // namespace pstrain
