#include "models/flights_data.h"

#include <cstdlib>
#include <fstream>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::string WriteCsv(const std::string& name, const std::string& text) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
  std::ofstream(path) << text;
  return path;
}

constexpr char kTiny[] =
    "date,delay,distance,origin,destination\n"
    "2001-01-01 00:01,33,2176,LAS,PHL\n"   // Monday, delayed
    "2001-03-04 13:47,15,215,ATL,SAV\n"    // Sunday, 15 is not > 15
    "2001-05-31 23:59,-3,405,MCI,MDW\n"
    "2001-06-01 06:05,16,0,PHL,LAS\n"      // test, delayed
    "2001-07-01 00:10,0,1,ATL,SAV\n";      // test

TEST(LoadFlightsTest, TinyFile_SplitsByMonthAndDecodesFields) {
  FlightsOptions options;
  options.path = WriteCsv("tiny.csv", kTiny);
  options.unknown_day_fraction = 0;
  absl::StatusOr<FlightsData> data = LoadFlights(options);
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_EQ(data->train.size(), 3u);
  ASSERT_EQ(data->test.size(), 2u);
  EXPECT_EQ(data->airports, 6);
  EXPECT_NEAR(data->train_positive_rate, 1.0 / 3, 1e-12);
  EXPECT_NEAR(data->test_positive_rate, 0.5, 1e-12);

  const Flight& a = data->train[0];
  EXPECT_EQ(a.month, 1);
  EXPECT_EQ(a.day_of_month, 1);
  EXPECT_EQ(a.day_of_year, 1);
  EXPECT_EQ(a.weekday, 0);  // 2001-01-01 was a Monday
  EXPECT_EQ(a.minute_of_day, 1);
  EXPECT_EQ(a.distance, 2176);
  EXPECT_EQ(a.label, 1);
  EXPECT_EQ(a.origin, Fnv1a32("LAS"));
  EXPECT_EQ(a.destination, Fnv1a32("PHL"));

  const Flight& b = data->train[1];
  EXPECT_EQ(b.day_of_year, 31 + 28 + 4);
  EXPECT_EQ(b.weekday, 6);  // Sunday
  EXPECT_EQ(b.minute_of_day, 13 * 60 + 47);
  EXPECT_EQ(b.label, 0);

  EXPECT_EQ(data->train[2].day_of_year, 151);
  EXPECT_EQ(data->test[0].origin, Fnv1a32("PHL"));  // by text, not by first appearance
  EXPECT_EQ(data->test[0].label, 1);
  EXPECT_EQ(data->test[1].month, 7);
  // Every training day is known; the test days are not training days, so they are unknown.
  for (const Flight& f : data->train) EXPECT_EQ(f.day_known, 1);
  for (const Flight& f : data->test) {
    EXPECT_EQ(f.day_known, 0);
    EXPECT_EQ(FlightFeatureValue(f, kDayOfYear), 0u);
  }
  EXPECT_EQ(FlightFeatureValue(data->train[1], kDayOfYear), 63u);
}

TEST(LoadFlightsTest, TestDayThatIsATrainingDay_Known) {
  FlightsOptions options;
  options.path = WriteCsv("leap.csv",
                          "date,delay,distance,origin,destination\n"
                          "2000-06-30 10:00,1,100,AAA,BBB\n"   // day 182 of a leap year: trains
                          "2001-07-01 10:00,1,100,AAA,BBB\n"   // day 182: tests, a known day
                          "2001-07-02 10:00,1,100,AAA,BBB\n");
  options.test_from_month = 7;
  options.unknown_day_fraction = 0;
  absl::StatusOr<FlightsData> data = LoadFlights(options);
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_EQ(data->test.size(), 2u);
  EXPECT_EQ(data->test[0].day_known, 1);
  EXPECT_EQ(data->test[1].day_known, 0);
}

TEST(LoadFlightsTest, UnknownDayFraction_PicksAboutThatShareOfTrainingFlights) {
  std::string csv = "date,delay,distance,origin,destination\n";
  for (int i = 0; i < 3200; ++i) {
    csv += absl::StrCat("2001-0", 1 + i % 6, "-1", i % 10, " 10:00,1,100,AAA,BBB\n");
  }
  FlightsOptions options;
  options.path = WriteCsv("many.csv", csv);
  absl::StatusOr<FlightsData> data = LoadFlights(options);  // default: 1/16
  ASSERT_TRUE(data.ok()) << data.status();
  int unknown = 0;
  for (const Flight& f : data->train) unknown += f.day_known == 0;
  EXPECT_NEAR(unknown, data->train.size() / 16.0, 60);  // ~167 +- 4 sigma
  // The same rows every time.
  absl::StatusOr<FlightsData> again = LoadFlights(options);
  ASSERT_TRUE(again.ok());
  for (size_t i = 0; i < data->train.size(); ++i) {
    ASSERT_EQ(data->train[i].day_known, again->train[i].day_known) << i;
  }
  options.unknown_day_fraction = 1.5;
  EXPECT_THAT(LoadFlights(options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown_day_fraction")));
}

TEST(LoadFlightsTest, Threshold_ChangesLabels) {
  FlightsOptions options;
  options.path = WriteCsv("threshold.csv", kTiny);
  options.delay_threshold = 14;
  absl::StatusOr<FlightsData> data = LoadFlights(options);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->train[1].label, 1);
}

TEST(LoadFlightsTest, MissingFile_NotFound) {
  FlightsOptions options;
  options.path = "/nonexistent/flights.csv";
  EXPECT_THAT(LoadFlights(options),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/flights.csv")));
}

TEST(LoadFlightsTest, BadDate_InvalidArgumentNamingIt) {
  FlightsOptions options;
  options.path = WriteCsv("bad_date.csv",
                          "date,delay,distance,origin,destination\n"
                          "2001-02-30 10:00,1,100,AAA,BBB\n"
                          "2001-06-01 10:00,1,100,AAA,BBB\n");
  EXPECT_THAT(LoadFlights(options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("2001-02-30 10:00")));
}

TEST(LoadFlightsTest, MissingColumn_InvalidArgument) {
  FlightsOptions options;
  options.path = WriteCsv("no_delay.csv",
                          "date,distance,origin,destination\n2001-01-01 10:00,100,AAA,BBB\n");
  EXPECT_THAT(LoadFlights(options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("delay")));
}

TEST(LoadFlightsTest, NoTestFlights_InvalidArgument) {
  FlightsOptions options;
  options.path = WriteCsv("no_test.csv", kTiny);
  options.test_from_month = 8;
  EXPECT_THAT(LoadFlights(options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("0 test")));
}

TEST(HashFeatureTest, Deterministic_InRange_FeaturesApart) {
  for (int64_t rows : {int64_t{1}, int64_t{7}, int64_t{1} << 22, int64_t{1} << 40}) {
    for (int f = 0; f < kNumFlightFeatures; ++f) {
      for (uint64_t v = 0; v < 100; ++v) {
        const int64_t h = HashFeature(f, v, rows);
        EXPECT_GE(h, 0);
        EXPECT_LT(h, rows);
        EXPECT_EQ(h, HashFeature(f, v, rows));
      }
    }
  }
  // The same value of different features lands on different rows; values spread over the table.
  std::set<int64_t> seen;
  for (int f = 0; f < kNumFlightFeatures; ++f) {
    for (uint64_t v = 0; v < 24; ++v) seen.insert(HashFeature(f, v, int64_t{1} << 22));
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(kNumFlightFeatures) * 24);
  // Fixed values (computed independently), so a change of the hash, which would orphan the rows
  // of trained tables in checkpoints, is noticed.
  EXPECT_EQ(Fnv1a32("SFO"), 1106848025u);
  EXPECT_EQ(HashFeature(kHour, 7, int64_t{1} << 22), 1473578);
  EXPECT_EQ(HashFeature(kOrigin, Fnv1a32("SFO"), int64_t{1} << 22), 2657946);
}

TEST(HashFlightsTest, RowsPerExampleInFeatureOrder) {
  Flight f;
  f.origin = Fnv1a32("SFO");
  f.destination = Fnv1a32("JFK");
  f.minute_of_day = 8 * 60 + 20;
  f.day_of_year = 40;
  f.weekday = 2;
  f.day_of_month = 9;
  f.month = 2;
  f.distance = 2586;
  Flight g = f;
  g.minute_of_day = 9 * 60;
  const std::vector<Flight> flights = {f, g};
  const std::vector<int64_t> rows = {1, 0};
  absl::StatusOr<std::vector<int>> all = ParseFlightFeatures("all");
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), static_cast<size_t>(kNumFlightFeatures));
  std::vector<int64_t> out(2 * kNumFlightFeatures);
  HashFlights(flights, rows, *all, /*hash_rows=*/1000, out.data());
  for (int k = 0; k < kNumFlightFeatures; ++k) {
    EXPECT_EQ(out[k], HashFeature(k, FlightFeatureValue(g, k), 1000)) << FlightFeatureName(k);
    EXPECT_EQ(out[kNumFlightFeatures + k], HashFeature(k, FlightFeatureValue(f, k), 1000));
  }
  // A subset, in the order asked.
  const std::vector<int> some = {kRoute, kHour};
  std::vector<int64_t> two(4);
  HashFlights(flights, rows, some, /*hash_rows=*/1000, two.data());
  EXPECT_EQ(two, (std::vector<int64_t>{out[kRoute], out[kHour], out[kNumFlightFeatures + kRoute],
                                       out[kNumFlightFeatures + kHour]}));
  EXPECT_EQ(FlightFeatureValue(f, kHour), 8u);
  EXPECT_EQ(FlightFeatureValue(f, kQuarterHour), 33u);
  EXPECT_NE(FlightFeatureValue(f, kRoute), FlightFeatureValue(f, kOrigin));
  EXPECT_NE(FlightFeatureValue(f, kOriginHour), FlightFeatureValue(g, kOriginHour));
  EXPECT_EQ(FlightFeatureValue(f, kRoute), FlightFeatureValue(g, kRoute));
  EXPECT_STREQ(FlightFeatureName(kOriginHour), "origin_x_hour");
}

TEST(ParseFlightFeaturesTest, NamesInOrder_CommaOrPlus) {
  absl::StatusOr<std::vector<int>> f = ParseFlightFeatures("hour,origin_x_hour+route");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(*f, (std::vector<int>{kHour, kOriginHour, kRoute}));
  EXPECT_EQ(FlightFeatureNames(*f), "hour,origin_x_hour,route");
}

TEST(ParseFlightFeaturesTest, UnknownOrRepeated_InvalidArgument) {
  EXPECT_THAT(ParseFlightFeatures("hour,carrier"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("\"carrier\""),
                             HasSubstr("origin_x_weekday"))));  // lists the known ones
  EXPECT_THAT(ParseFlightFeatures("hour+hour"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("twice")));
  EXPECT_THAT(ParseFlightFeatures(""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no feature \"\"")));
}

}  // namespace
}  // namespace pstrain
