#include "models/flights_ctr.h"

#include "common/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/model_test_util.h"

namespace pstrain {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

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
  EXPECT_THAT(CreateFlightsCtr(WithExtra({{"embedding", "hashed"}, {"hash_rows", "0"}})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("hash_rows")));
  EXPECT_THAT(CreateFlightsCtr(WithExtra({{"embedding", "hashed"}, {"partitioner", "fixed"}})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("min_size or max_size")));
  EXPECT_THAT(CreateFlightsCtr(WithExtra({{"embedding", "hashed"}, {"partitioner", "big"}})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("big")));
  EXPECT_THAT(CreateFlightsCtr(WithExtra({{"test_from_month", "1"}})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("test_from_month")));
}

TEST(FlightsCtrVariablesTest, HashedTablesPartitioned_DenseWhole) {
  ModelOptions options = WithExtra(
      {{"embedding", "hashed"}, {"partitioner", "max_size"}, {"max_shard_bytes", "1048576"}});
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

// The default: the two tables are dynamic (keyed by the features' 64-bit keys), the dense weights
// fixed variables.
TEST(FlightsCtrVariablesTest, Dynamic_TwoTablesThenDenseVariables) {
  auto config = FlightsCtrConfigFromOptions(WithExtra({{"min_count", "2"}, {"ttl_steps", "500"}}));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->dynamic);
  const std::vector<TableSpec> tables = FlightsCtrTables(*config);
  ASSERT_EQ(tables.size(), 2u);
  EXPECT_EQ(tables[0].name, kCtrEmbedding);
  EXPECT_EQ(tables[0].dim, 16);
  EXPECT_EQ(tables[0].options.admit_min_count(), 2);
  EXPECT_EQ(tables[0].options.ttl_steps(), 500);
  EXPECT_EQ(tables[1].name, kCtrLrWeights);
  EXPECT_EQ(tables[1].dim, 1);
  const std::vector<VariableSpec> vars = FlightsCtrVariables(*config, /*num_ps=*/2, 0.2);
  ASSERT_EQ(vars.size(), 5u);
  EXPECT_EQ(vars[0].name, kCtrW1);
}

TEST(FlightsCtrOptionsTest, DynamicOnlyOptionsWithHashed_InvalidArgument) {
  EXPECT_THAT(FlightsCtrConfigFromOptions(WithExtra({{"embedding", "hashed"}, {"min_count", "3"}})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("embedding=dynamic")));
  EXPECT_THAT(FlightsCtrConfigFromOptions(WithExtra({{"hash_rows", "64"}})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("embedding=hashed")));
  EXPECT_THAT(FlightsCtrConfigFromOptions(WithExtra({{"embedding", "sparse"}})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dynamic or hashed")));
}

}  // namespace
}  // namespace pstrain
