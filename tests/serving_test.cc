// Models out of the cluster (serving/): a model trained on an in-process cluster is exported from
// its checkpoint, loaded by a Predictor with no cluster, and predicts its test data to the
// cluster's own evaluation (the test log loss within 1e-6), whether its rows are all in memory or
// behind a cache of 1% of them; dynamic tables (tabular) and fixed hashed tables stored row by row
// (flights_ctr) both; a re-export writes the same manifest; the export's filters keep what they
// say; and bad model directories and bad requests get clear errors.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/flights_ctr.h"
#include "models/registry.h"
#include "serving/export.h"
#include "serving/predictor.h"
#include "tests/train_in_process.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A CSV file's header and rows (no quoting: the test files have none).
RawExamples ReadCsv(const std::string& path) {
  RawExamples out;
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  out.columns = absl::StrSplit(line, ',');
  while (std::getline(in, line)) {
    if (!line.empty()) out.rows.push_back(absl::StrSplit(line, ','));
  }
  return out;
}

double LogLoss(const std::vector<float>& p, const std::vector<int>& labels) {
  double sum = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    sum -= labels[i] ? std::log(static_cast<double>(p[i])) : std::log1p(-static_cast<double>(p[i]));
  }
  return sum / static_cast<double>(p.size());
}

TrainerOptions Trainer(const std::string& checkpoints, std::ostream* quiet) {
  TrainerOptions t;
  t.checkpoint_dir = checkpoints;
  t.restore = "none";
  t.keep_best = false;  // the test evaluation on the final weights: the last checkpoint's
  t.progress.out = quiet;
  return t;
}

class ServingTest : public ::testing::Test {
 protected:
  // A noisy table (buyers in Oslo and Rome 80%, elsewhere 20%; income helps a little): the
  // predictions are away from 0 and 1, so float rounding stays far below the 1e-6 compared.
  // `model` is added to the spec's model section (JSON text, double quotes).
  void WriteTabular(int train_rows, int test_rows, const std::string& model = "",
                    int embedding_dim = 4) {
    std::mt19937 rng(7);
    const char* cities[] = {"Oslo", "Rome", "Lima", "Kyiv", "Pune", "Graz"};
    auto write = [&](const std::string& path, int rows, std::vector<int>* labels) {
      std::ofstream out(path);
      out << "city,tag,income,when,label\n";
      for (int i = 0; i < rows; ++i) {
        const int c = static_cast<int>(rng() % 6);
        const int income = static_cast<int>(rng() % 1000);
        const int p = (c < 2 ? 80 : 20) + (income > 500 ? 5 : -5);
        const int y = static_cast<int>(rng() % 100) < p ? 1 : 0;
        out << cities[c] << ",t" << rng() % 5 << "," << income << ",2001-0" << 1 + rng() % 9
            << "-11," << y << "\n";
        if (labels != nullptr) labels->push_back(y);
      }
    };
    write(dir_ + "/train.csv", train_rows, nullptr);
    write(dir_ + "/test.csv", test_rows, &tabular_labels_);
    std::ofstream(dir_ + "/spec.json") << absl::StrReplaceAll(R"({
      'label': {'column': 'label'},
      'features': [{'name': 'city', 'column': 'city'}, {'name': 'tag', 'column': 'tag'},
                   {'name': 'income', 'type': 'numeric', 'column': 'income'},
                   {'name': 'month', 'type': 'datetime', 'column': 'when', 'part': 'month'},
                   {'name': 'city_x_tag', 'type': 'cross', 'of': ['city', 'tag']}],
      'split': {'test_data': 'TEST'},
      'model': {'type': 'wide_and_deep', 'embedding_dim': DIM, 'hidden': [8] MODEL}})",
                                                             {{"'", "\""},
                                                              {"TEST", dir_ + "/test.csv"},
                                                              {"DIM", std::to_string(embedding_dim)},
                                                              {"MODEL", model}});
  }

  // Trains the tabular model (2 workers, 2 ps) with checkpoints in `ckpt`.
  absl::StatusOr<TrainResult> TrainTabular(const std::string& ckpt) {
    ModelOptions o;
    o.data = dir_ + "/train.csv";
    o.epochs = 3;
    o.batch_size = 64;
    o.extra["feature_spec"] = dir_ + "/spec.json";
    auto model = CreateModel("tabular", o);
    if (!model.ok()) return model.status();
    return TrainInProcess(*TrainingRegistry(std::make_shared<ReplicaGroups>()), 2, 2, model->get(),
                          Trainer(ckpt, &null_));
  }

  void SetUp() override { dir_ = FreshTempDir("serving"); }

  std::string dir_;
  std::vector<int> tabular_labels_;
  std::ostream null_{nullptr};
};

TEST_F(ServingTest, Tabular_ExportedPredictorMatchesClusterEvaluation_WithAnyCache) {
  WriteTabular(/*train_rows=*/3000, /*test_rows=*/800);
  auto trained = TrainTabular(dir_ + "/ckpt");
  ASSERT_TRUE(trained.ok()) << trained.status();
  ExportOptions ex;
  ex.checkpoint = dir_ + "/ckpt";
  ex.out = dir_ + "/models/tabular/1";
  auto exported = ExportModel(ex);
  ASSERT_TRUE(exported.ok()) << exported.status();
  EXPECT_EQ(exported->manifest.model, "tabular");
  EXPECT_EQ(exported->manifest.step, trained->end_step);

  const RawExamples test = ReadCsv(dir_ + "/test.csv");
  std::vector<std::vector<float>> predictions;
  for (int64_t cache : {int64_t{-1}, int64_t{256} << 20, int64_t{0}}) {
    PredictorOptions options;
    options.store.cache_bytes = cache;
    auto predictor = Predictor::Load(ex.out, options);
    ASSERT_TRUE(predictor.ok()) << predictor.status();
    EXPECT_EQ((*predictor)->outputs(), std::vector<std::string>{"probability"});
    EXPECT_THAT((*predictor)->columns(),
                ::testing::UnorderedElementsAre("city", "tag", "income", "when"));
    std::vector<float> out;
    ASSERT_TRUE((*predictor)->Predict(test, &out).ok());
    ASSERT_EQ(out.size(), test.rows.size());
    predictions.push_back(std::move(out));
  }
  EXPECT_NEAR(LogLoss(predictions[0], tabular_labels_), trained->metrics.values["test_logloss"],
              1e-6);
  EXPECT_EQ(predictions[1], predictions[0]);  // the same floats through the cache
  EXPECT_EQ(predictions[2], predictions[0]);  // and with no cache at all
}

// Tables trained in bfloat16 (rows and slots) export as bfloat16, and the predictor serves those
// rows exactly as the cluster's evaluation read them; re-exported as int8, the embeddings (width
// 12; the wide part's width-1 tables stay bfloat16, smaller there) are smaller and the model
// predicts nearly the same.
TEST_F(ServingTest, Tabular_TablesInFewerBits_ExportedAsStoredAndServed) {
  WriteTabular(/*train_rows=*/3000, /*test_rows=*/800,
               R"(, "row_format": "bfloat16", "slot_format": "bfloat16")", /*embedding_dim=*/12);
  auto trained = TrainTabular(dir_ + "/ckpt");
  ASSERT_TRUE(trained.ok()) << trained.status();
  const RawExamples test = ReadCsv(dir_ + "/test.csv");
  auto serve = [&](const std::string& model, int64_t cache) {
    PredictorOptions options;
    options.store.cache_bytes = cache;
    auto predictor = Predictor::Load(model, options);
    EXPECT_TRUE(predictor.ok()) << predictor.status();
    std::vector<float> out;
    if (predictor.ok()) EXPECT_TRUE((*predictor)->Predict(test, &out).ok());
    return out;
  };
  ExportOptions ex;
  ex.checkpoint = dir_ + "/ckpt";
  ex.out = dir_ + "/bf16";
  auto bf16 = ExportModel(ex);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  ex.out = dir_ + "/int8";
  ex.table_format = "int8";
  auto int8 = ExportModel(ex);
  ASSERT_TRUE(int8.ok()) << int8.status();
  int tables = 0;
  for (size_t v = 0; v < bf16->manifest.variables.size(); ++v) {
    if (bf16->manifest.variables[v].kind != ExportedVariable::Kind::kTable) continue;
    ++tables;
    EXPECT_EQ(bf16->manifest.variables[v].dtype, "bfloat16");
    EXPECT_EQ(int8->manifest.variables[v].dtype,
              bf16->manifest.variables[v].shape[0] == 12 ? "int8" : "bfloat16");
    EXPECT_EQ(int8->manifest.variables[v].count, bf16->manifest.variables[v].count);
  }
  EXPECT_GT(tables, 0);
  EXPECT_LT(int8->bytes, bf16->bytes);

  const std::vector<float> from_bf16 = serve(dir_ + "/bf16", -1);
  EXPECT_NEAR(LogLoss(from_bf16, tabular_labels_), trained->metrics.values["test_logloss"], 1e-6);
  EXPECT_EQ(serve(dir_ + "/bf16", 0), from_bf16);
  const std::vector<float> from_int8 = serve(dir_ + "/int8", -1);
  EXPECT_EQ(serve(dir_ + "/int8", 0), from_int8);
  EXPECT_NE(from_int8, from_bf16);
  EXPECT_NEAR(LogLoss(from_int8, tabular_labels_), LogLoss(from_bf16, tabular_labels_), 0.01);

  ex.table_format = "int4";
  EXPECT_THAT(ExportModel(ex).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("int4")));
}

TEST_F(ServingTest, Tabular_ReexportSameManifest_FiltersKeepWhatTheySay) {
  WriteTabular(/*train_rows=*/2000, /*test_rows=*/100);
  ASSERT_TRUE(TrainTabular(dir_ + "/ckpt").ok());
  ExportOptions ex;
  ex.checkpoint = dir_ + "/ckpt";
  ex.out = dir_ + "/a";
  auto a = ExportModel(ex);
  ASSERT_TRUE(a.ok()) << a.status();
  ex.out = dir_ + "/b";
  ASSERT_TRUE(ExportModel(ex).ok());
  EXPECT_EQ(ReadFile(dir_ + "/a/MANIFEST.json"), ReadFile(dir_ + "/b/MANIFEST.json"));
  // Exporting over an existing directory needs overwrite.
  EXPECT_THAT(ExportModel(ex).status(), StatusIs(absl::StatusCode::kAlreadyExists,
                                                 HasSubstr("--overwrite")));
  ex.overwrite = true;
  ex.top_k = 3;
  auto top = ExportModel(ex);
  ASSERT_TRUE(top.ok()) << top.status();
  for (const ExportedVariable& v : top->manifest.variables) {
    if (v.kind == ExportedVariable::Kind::kTable) EXPECT_LE(v.count, 3) << v.name;
  }
  // The top_k export still loads and predicts (absent keys read the default row).
  auto predictor = Predictor::Load(ex.out);
  ASSERT_TRUE(predictor.ok()) << predictor.status();
  std::vector<float> out;
  EXPECT_TRUE((*predictor)->Predict(ReadCsv(dir_ + "/test.csv"), &out).ok());
  EXPECT_EQ(out.size(), 100u);
}

// flights_ctr with a hashed (fixed) table, stored row by row and read through a cache of 1% of
// its rows.
TEST_F(ServingTest, FlightsHashed_RowsThroughSmallCache_MatchClusterEvaluation) {
  const std::string csv = dir_ + "/flights.csv";
  std::vector<int> june_labels;
  RawExamples june;
  june.columns = {"date", "delay", "distance", "origin", "destination"};
  {
    std::ofstream out(csv);
    out << "date,delay,distance,origin,destination\n";
    std::mt19937 rng(5);
    const char* airports[] = {"AAA", "BBB", "CCC", "DDD", "EEE"};
    const int rows = 6000;
    for (int i = 0; i < rows; ++i) {
      const int month = 1 + i * 6 / rows;
      const int hour = static_cast<int>(rng() % 24);
      const int origin = static_cast<int>(rng() % 5);
      const int destination = (origin + 1 + static_cast<int>(rng() % 4)) % 5;
      const bool late = (rng() % 100) < ((hour >= 12 && origin < 2) ? 70u : 20u);
      const std::string date = absl::StrFormat("2001-%02d-%02d %02d:%02d", month,
                                               1 + static_cast<int>(rng() % 28), hour,
                                               static_cast<int>(rng() % 60));
      const std::string distance = absl::StrCat(100 + 100 * (origin + destination));
      out << date << "," << (late ? 40 : 0) << "," << distance << "," << airports[origin] << ","
          << airports[destination] << "\n";
      if (month == 6) {
        june.rows.push_back({date, late ? "40" : "0", distance, airports[origin],
                             airports[destination]});
        june_labels.push_back(late ? 1 : 0);
      }
    }
  }
  ModelOptions o;
  o.data = csv;
  o.epochs = 2;
  o.batch_size = 64;
  o.extra = {{"embedding", "hashed"}, {"hash_rows", "4096"}, {"hidden", "8"}};
  auto model = CreateModel("flights_ctr", o);
  ASSERT_TRUE(model.ok()) << model.status();
  auto trained = TrainInProcess(*TrainingRegistry(std::make_shared<ReplicaGroups>()), 2, 2,
                                model->get(), Trainer(dir_ + "/ckpt", &null_));
  ASSERT_TRUE(trained.ok()) << trained.status();

  ExportOptions ex;
  ex.checkpoint = dir_ + "/ckpt";
  ex.out = dir_ + "/flights/1";
  ex.dense_bytes = 4096;  // the 4096 x 16 table goes row by row
  auto exported = ExportModel(ex);
  ASSERT_TRUE(exported.ok()) << exported.status();
  for (const ExportedVariable& v : exported->manifest.variables) {
    // The embedding, the logistic-regression weights and w1 are over 4 KiB.
    if (v.name == "ctr/embedding" || v.name == "ctr/lr_weights" || v.name == "ctr/w1") {
      EXPECT_EQ(v.kind, ExportedVariable::Kind::kRows) << v.name;
    }
  }
  PredictorOptions small;
  small.store.cache_bytes = 4096 * (64 + 64) / 100;  // ~1% of the embedding's rows
  auto predictor = Predictor::Load(ex.out, small);
  ASSERT_TRUE(predictor.ok()) << predictor.status();
  std::vector<float> out;
  ASSERT_TRUE((*predictor)->Predict(june, &out).ok());
  ASSERT_EQ(out.size(), june.rows.size());
  EXPECT_NEAR(LogLoss(out, june_labels), trained->metrics.values["test_logloss"], 1e-6);
  EXPECT_GT((*predictor)->cache_stats().misses, 0);

  // A request with a column missing, or a value that isn't one: errors naming it.
  RawExamples bad = june;
  bad.columns[3] = "from";
  EXPECT_THAT((*predictor)->Predict(bad, &out),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("origin")));
  bad = june;
  bad.rows[1][2] = "far";
  EXPECT_THAT((*predictor)->Predict(bad, &out),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("row 1"), HasSubstr("distance"), HasSubstr("far"))));
}

TEST_F(ServingTest, BadModelDirectories_DataLossNamingTheFile) {
  WriteTabular(/*train_rows=*/1000, /*test_rows=*/50);
  ASSERT_TRUE(TrainTabular(dir_ + "/ckpt").ok());
  ExportOptions ex;
  ex.checkpoint = dir_ + "/ckpt";
  ex.out = dir_ + "/good";
  ASSERT_TRUE(ExportModel(ex).ok());
  namespace fs = std::filesystem;
  auto copy = [&](const std::string& name) {
    const std::string to = dir_ + "/" + name;
    fs::copy(dir_ + "/good", to, fs::copy_options::recursive);
    return to;
  };
  EXPECT_THAT(Predictor::Load(dir_ + "/nowhere").status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("nowhere")));
  const std::string no_manifest = copy("no_manifest");
  fs::remove(no_manifest + "/MANIFEST.json");
  EXPECT_THAT(Predictor::Load(no_manifest).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("MANIFEST.json")));
  const std::string truncated = copy("truncated");
  const std::string text = ReadFile(truncated + "/MANIFEST.json");
  std::ofstream(truncated + "/MANIFEST.json", std::ios::trunc) << text.substr(0, text.size() / 2);
  EXPECT_THAT(Predictor::Load(truncated).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("MANIFEST.json")));
  const std::string changed = copy("changed");
  std::string edited = text;
  edited.replace(edited.find("\"step\": "), 8, "\"step\": 9");
  std::ofstream(changed + "/MANIFEST.json", std::ios::trunc) << edited;
  EXPECT_THAT(Predictor::Load(changed).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("checksum")));
  const std::string no_db = copy("no_db");
  fs::remove_all(no_db + "/db");
  EXPECT_THAT(Predictor::Load(no_db).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("/db")));
  // A corrupt database file: caught by the dense variables' CRC or RocksDB's checksums, or by the
  // full scan (verify_tables).
  const std::string corrupt = copy("corrupt");
  for (const auto& entry : fs::directory_iterator(corrupt + "/db")) {
    if (entry.path().extension() != ".sst") continue;
    std::fstream f(entry.path(), std::ios::in | std::ios::out | std::ios::binary);
    for (int64_t at = 200; at < static_cast<int64_t>(fs::file_size(entry.path())) - 200; at += 97) {
      f.seekp(at);
      f.put('\x5a');
    }
  }
  PredictorOptions verify;
  verify.store.verify_tables = true;
  EXPECT_THAT(Predictor::Load(corrupt, verify).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("/db")));
}

}  // namespace
}  // namespace pstrain
