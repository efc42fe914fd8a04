// flights_ctr trained by the trainer on a real in-process cluster, on a toy flights file with a
// signal in the hour and the origin: it and its baseline learn, on CPU replicas too, and missing
// data is a clear error.
#include <cstdlib>
#include <fstream>
#include <random>

#include "absl/strings/str_format.h"
#include "common/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/devices.h"
#include "models/flights_ctr.h"
#include "models/flights_ctr_worker.h"
#include "tests/train_in_process.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

// A toy flights file with a signal in the hour and the origin: flights leaving from noon on from
// "AAA" or "BBB" (a quarter of them) are late 80% of the time, the rest 10%. Jan-May train, June
// test.
std::string WriteToyFlights(int rows) {
  const std::string path = TempDir() + "/toy_flights.csv";
  std::ofstream out(path);
  out << "date,delay,distance,origin,destination\n";
  std::mt19937 rng(5);
  const char* airports[] = {"AAA", "BBB", "CCC", "DDD"};
  for (int i = 0; i < rows; ++i) {
    const int month = 1 + i * 6 / rows;
    const int day = 1 + static_cast<int>(rng() % 28);
    const int hour = static_cast<int>(rng() % 24);
    const int origin = static_cast<int>(rng() % 4);
    const int destination = (origin + 1 + static_cast<int>(rng() % 3)) % 4;
    const bool risky = hour >= 12 && origin < 2;
    const bool late = (rng() % 100) < (risky ? 80u : 10u);
    out << absl::StrFormat("2001-%02d-%02d %02d:%02d,%d,%d,%s,%s\n", month, day, hour,
                           static_cast<int>(rng() % 60), late ? 40 : 0,
                           100 + 100 * (origin + destination), airports[origin],
                           airports[destination]);
  }
  return path;
}

std::shared_ptr<const ClosureRegistry> Registry() {
  auto registry = std::make_shared<ClosureRegistry>();
  EXPECT_TRUE(RegisterBuiltinClosures(registry.get()).ok());
  EXPECT_TRUE(RegisterFlightsCtr(registry.get(), std::make_shared<ReplicaGroups>()).ok());
  return registry;
}

// The whole model on a real in-process cluster (2 workers, 2 ps, hashed tables split over both):
// both it and the baseline learn the toy signal, and every metric is reported.
TEST(FlightsCtrTrainTest, ToyData_TwoWorkersTwoPs_LearnsAndReportsMetrics) {
  ModelOptions options;
  options.data = WriteToyFlights(/*rows=*/6000);
  options.epochs = 3;
  options.batch_size = 50;
  options.extra = {{"hidden", "8"}};
  auto model = CreateFlightsCtr(options);
  ASSERT_TRUE(model.ok()) << model.status();
  auto result = TrainInProcess(Registry(), /*workers=*/2, /*ps=*/2, model->get());
  ASSERT_TRUE(result.ok()) << result.status();

  // 10% of the training flights validate (the default): the rest train.
  const int64_t train = std::stoll(result->metrics.notes.at("train_flights"));
  const int64_t validation = std::stoll(result->metrics.notes.at("validation_flights"));
  EXPECT_EQ(train + validation, 5000);
  EXPECT_NEAR(validation, 500, 80);
  EXPECT_EQ(result->end_step, 3 * ((train + 49) / 50));
  EXPECT_EQ(result->examples, 3 * train);
  const auto& values = result->metrics.values;
  // Validated at step 0 and every epoch; the test evaluation names what it ran on.
  EXPECT_EQ(result->validations, 4);
  EXPECT_EQ(result->monitor, "val_auc");
  EXPECT_GT(values.at("val_auc"), 0.75);
  EXPECT_GT(values.at("val_baseline_lr_auc"), 0.7);
  EXPECT_GE(result->best_step, 0);
  EXPECT_FALSE(result->evaluated.empty());
  // The best possible AUC here is ~0.83 (scoring the risky quarter above the rest).
  EXPECT_GT(values.at("test_auc"), 0.78);
  EXPECT_GT(values.at("baseline_lr_test_auc"), 0.75);
  EXPECT_LT(values.at("test_logloss"), values.at("prior_test_logloss"));
  EXPECT_LT(values.at("baseline_lr_test_logloss"), values.at("prior_test_logloss"));
  EXPECT_EQ(result->metrics.notes.at("test_flights"), "1000");
  EXPECT_EQ(result->metrics.notes.at("embedding").rfind("dynamic, ", 0), 0u)
      << result->metrics.notes.at("embedding");
  // Every key the training data has (14 features' values) is stored: 14 * ~40 distinct values.
  ASSERT_EQ(result->tables.count(kCtrEmbedding), 1u);
  EXPECT_GT(result->tables.at(kCtrEmbedding).keys(), 100);
  EXPECT_EQ(result->tables.at(kCtrEmbedding).keys(), result->tables.at(kCtrLrWeights).keys());
}

// The hashed tables (embedding=hashed) learn the same toy signal.
TEST(FlightsCtrTrainTest, ToyData_HashedTables_Learns) {
  ModelOptions options;
  options.data = WriteToyFlights(/*rows=*/6000);
  options.epochs = 3;
  options.batch_size = 50;
  options.extra = {{"embedding", "hashed"}, {"hash_rows", "4096"}, {"hidden", "8"},
                   {"min_shard_bytes", "65536"}};
  auto model = CreateFlightsCtr(options);
  ASSERT_TRUE(model.ok()) << model.status();
  auto result = TrainInProcess(Registry(), /*workers=*/2, /*ps=*/2, model->get());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_GT(result->metrics.values.at("test_auc"), 0.78);
  EXPECT_EQ(result->metrics.notes.at("embedding"), "hashed, 4096x16 in 2 shards");
}

// Each worker splits its batches over 3 CPU replicas (the path a worker with 3 GPUs takes, with
// the CPU's all-reduce): it learns as well.
TEST(FlightsCtrTrainTest, ToyData_ThreeReplicasPerWorker_Learns) {
  ModelOptions options;
  options.data = WriteToyFlights(/*rows=*/6000);
  options.epochs = 3;
  options.batch_size = 50;
  options.devices.kind = DeviceOptions::Kind::kCpu;
  options.devices.replicas = 3;
  options.validation_fraction = 0;  // every training flight trains
  options.extra = {{"hidden", "8"}};
  auto model = CreateFlightsCtr(options);
  ASSERT_TRUE(model.ok()) << model.status();
  auto result = TrainInProcess(Registry(), /*workers=*/2, /*ps=*/1, model->get());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->end_step, 3 * 100);
  EXPECT_GT(result->metrics.values.at("test_auc"), 0.78);
  EXPECT_GT(result->metrics.values.at("baseline_lr_test_auc"), 0.75);
}

TEST(FlightsCtrTrainTest, MissingData_SetupNotFoundNamingTheFile) {
  ModelOptions options;
  options.data = TempDir() + "/no_such_flights.csv";
  options.extra = {{"embedding", "hashed"}, {"hash_rows", "64"}};
  auto model = CreateFlightsCtr(options);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_THAT(TrainInProcess(Registry(), /*workers=*/1, /*ps=*/1, model->get()),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no_such_flights.csv")));
}

}  // namespace
}  // namespace pstrain
