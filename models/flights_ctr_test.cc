#include "models/flights_ctr.h"

#include <cstdlib>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/test_util.h"
#include "models/train_in_process.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

ModelOptions WithExtra(std::map<std::string, std::string> extra) {
  ModelOptions options;
  options.extra = std::move(extra);
  return options;
}

TEST(FlightsCtrOptionsTest, Defaults) {
  auto config = FlightsCtrConfigFromOptions(ModelOptions{});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->hash_rows, int64_t{1} << 22);
  EXPECT_EQ(config->shape.dim, 16);
  EXPECT_EQ(config->shape.features, kNumFlightFeatures);
  EXPECT_EQ(config->epochs, 1);
  EXPECT_EQ(config->flights.path, "data/flights/flights.csv");
  auto model = CreateFlightsCtr(ModelOptions{});
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->name(), "flights_ctr");
}

TEST(FlightsCtrOptionsTest, UnknownOption_InvalidArgumentNamingIt) {
  EXPECT_THAT(CreateFlightsCtr(WithExtra({{"hash_row", "10"}})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("flights_ctr"), HasSubstr("hash_row"))));
}

TEST(FlightsCtrOptionsTest, BadValues_InvalidArgument) {
  EXPECT_THAT(CreateFlightsCtr(WithExtra({{"hash_rows", "0"}})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("hash_rows")));
  EXPECT_THAT(CreateFlightsCtr(WithExtra({{"partitioner", "fixed"}})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("min_size or max_size")));
  EXPECT_THAT(CreateFlightsCtr(WithExtra({{"partitioner", "big"}})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("big")));
  EXPECT_THAT(CreateFlightsCtr(WithExtra({{"test_from_month", "1"}})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("test_from_month")));
}

TEST(FlightsCtrVariablesTest, HashedTablesPartitioned_DenseWhole) {
  ModelOptions options = WithExtra({{"partitioner", "max_size"}, {"max_shard_bytes", "1048576"}});
  auto config = FlightsCtrConfigFromOptions(options);
  ASSERT_TRUE(config.ok()) << config.status();
  const std::vector<VariableSpec> vars =
      FlightsCtrVariables(*config, /*num_ps=*/2, /*train_positive_rate=*/0.2);
  ASSERT_EQ(vars.size(), 7u);
  EXPECT_EQ(vars[0].name, kCtrEmbedding);
  EXPECT_EQ(vars[0].shape, (Shape{int64_t{1} << 22, 16}));
  EXPECT_EQ(vars[0].partitioner.kind, PartitionerKind::kMaxSize);
  EXPECT_EQ(vars[0].partitioner.max_shard_bytes, 1 << 20);
  EXPECT_EQ(vars[1].name, kCtrLrWeights);
  EXPECT_EQ(vars[1].shape, (Shape{int64_t{1} << 22, 1}));
  EXPECT_EQ(vars[2].name, kCtrW1);
  EXPECT_EQ(vars[2].shape, (Shape{kNumFlightFeatures * 16, 64}));
  EXPECT_EQ(vars[2].partitioner.kind, PartitionerKind::kNone);
  EXPECT_NEAR(vars[5].initializer.value(), std::log(0.2 / 0.8), 1e-12);  // b2 starts at the prior
  for (const VariableSpec& v : vars) {
    ASSERT_TRUE(v.optimizer.has_value()) << v.name;
    EXPECT_EQ(v.optimizer->kind(), OptimizerDef::ADAGRAD);
  }
}

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
  EXPECT_TRUE(RegisterFlightsCtr(registry.get()).ok());
  return registry;
}

// The whole model on a real in-process cluster (2 workers, 2 ps, hashed tables split over both):
// both it and the baseline learn the toy signal, and every metric is reported.
TEST(FlightsCtrTrainTest, ToyData_TwoWorkersTwoPs_LearnsAndReportsMetrics) {
  ModelOptions options;
  options.data = WriteToyFlights(/*rows=*/6000);
  options.epochs = 3;
  options.batch_size = 50;
  options.extra = {{"hash_rows", "4096"}, {"hidden", "8"}, {"min_shard_bytes", "65536"}};
  auto model = CreateFlightsCtr(options);
  ASSERT_TRUE(model.ok()) << model.status();
  auto result = TrainInProcess(Registry(), /*workers=*/2, /*ps=*/2, model->get());
  ASSERT_TRUE(result.ok()) << result.status();

  EXPECT_EQ(result->end_step, 3 * 100);
  EXPECT_EQ(result->examples, 3 * 5000);
  const auto& values = result->metrics.values;
  // The best possible AUC here is ~0.83 (scoring the risky quarter above the rest).
  EXPECT_GT(values.at("test_auc"), 0.78);
  EXPECT_GT(values.at("baseline_lr_test_auc"), 0.75);
  EXPECT_LT(values.at("test_logloss"), values.at("prior_test_logloss"));
  EXPECT_LT(values.at("baseline_lr_test_logloss"), values.at("prior_test_logloss"));
  EXPECT_EQ(result->metrics.notes.at("train_flights"), "5000");
  EXPECT_EQ(result->metrics.notes.at("test_flights"), "1000");
  EXPECT_EQ(result->metrics.notes.at("embedding"), "4096x16 in 2 shards");
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
  options.extra = {{"hash_rows", "4096"}, {"hidden", "8"}};
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
  options.extra = {{"hash_rows", "64"}};
  auto model = CreateFlightsCtr(options);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_THAT(TrainInProcess(Registry(), /*workers=*/1, /*ps=*/1, model->get()),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no_such_flights.csv")));
}

}  // namespace
}  // namespace pstrain
