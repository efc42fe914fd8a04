#include "models/tabular/transforms.h"

#include <string>
#include <vector>

#include "common/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/tabular/spec_test_util.h"
#include "partitioners/key_routing.h"

namespace pstrain {
namespace tabular {
namespace {

using ::testing::HasSubstr;

TEST(DateTest, ParseCivilTime_FormatsAndInvalidDates) {
  CivilTime t;
  ASSERT_TRUE(ParseCivilTime("2001-06-30 23:59", &t));
  EXPECT_EQ(t.year, 2001);
  EXPECT_EQ(t.month, 6);
  EXPECT_EQ(t.day, 30);
  EXPECT_EQ(t.hour, 23);
  EXPECT_EQ(t.minute, 59);
  EXPECT_TRUE(ParseCivilTime("2024-02-29", &t));
  EXPECT_EQ(t.hour, 0);
  EXPECT_TRUE(ParseCivilTime("2024/02/29T10:44:05.123Z", &t));
  EXPECT_EQ(t.minute, 44);
  EXPECT_TRUE(ParseCivilTime("2024-02-29T10:44:05+02:00", &t));
  for (const char* bad : {"2001-02-29", "2001-13-01", "2001-00-10", "01-02-2001", "2001-1-2",
                          "2001-01-01 24:00", "2001-01-01 10", "2001-01-01x", "2001-01-01 10:60",
                          "2001-01-01 10:00 PM", "", "yesterday"}) {
    EXPECT_FALSE(ParseCivilTime(bad, &t)) << bad;
  }
}

TEST(DateTest, PartsAgainstTheCalendar) {
  EXPECT_EQ(Weekday(2001, 1, 1), 0);    // a Monday
  EXPECT_EQ(Weekday(2024, 2, 29), 3);   // a Thursday
  EXPECT_EQ(Weekday(1999, 12, 31), 4);  // a Friday
  EXPECT_EQ(DayOfYear(2001, 1, 1), 1);
  EXPECT_EQ(DayOfYear(2001, 12, 31), 365);
  EXPECT_EQ(DayOfYear(2000, 12, 31), 366);
  EXPECT_EQ(DayOfYear(2001, 6, 1), 152);
  CivilTime t;
  ASSERT_TRUE(ParseCivilTime("2001-06-01 10:44", &t));
  EXPECT_EQ(DatePartValue(t, DatePart::kYear, 15), 2001);
  EXPECT_EQ(DatePartValue(t, DatePart::kMonth, 15), 6);
  EXPECT_EQ(DatePartValue(t, DatePart::kDay, 15), 1);
  EXPECT_EQ(DatePartValue(t, DatePart::kWeekday, 15), 4);  // a Friday
  EXPECT_EQ(DatePartValue(t, DatePart::kDayOfYear, 15), 152);
  EXPECT_EQ(DatePartValue(t, DatePart::kHour, 15), 10);
  EXPECT_EQ(DatePartValue(t, DatePart::kMinuteOfDay, 15), 644);
  EXPECT_EQ(DatePartValue(t, DatePart::kTimeSlot, 15), 42);
  EXPECT_EQ(DatePartValue(t, DatePart::kTimeSlot, 60), 10);
}

TEST(NumberTest, ParseNumberAndBucketize) {
  double v = 0;
  EXPECT_TRUE(ParseNumber("3.5", &v));
  EXPECT_EQ(v, 3.5);
  EXPECT_TRUE(ParseNumber(" +4 ", &v));
  EXPECT_EQ(v, 4);
  EXPECT_TRUE(ParseNumber("-1e-3", &v));
  EXPECT_EQ(v, -1e-3);
  for (const char* bad : {"", "abc", "1,5", "inf", "nan", "3.5x", "--1"}) {
    EXPECT_FALSE(ParseNumber(bad, &v)) << bad;
  }
  const std::vector<double> b = {1, 10, 100};
  EXPECT_EQ(Bucketize(0.5, b), 0);
  EXPECT_EQ(Bucketize(1, b), 1);
  EXPECT_EQ(Bucketize(9.99, b), 1);
  EXPECT_EQ(Bucketize(10, b), 2);
  EXPECT_EQ(Bucketize(1000, b), 3);
  EXPECT_EQ(Bucketize(-5, {}), 0);
}

// A spec with one feature of each kind, and its statistics.
class TransformTest : public ::testing::Test {
 protected:
  TransformTest()
      : spec_(MustParse(R"({
          'label': {'column': 'y', 'positive': ['yes'], 'negative': ['no']},
          'features': [
            {'name': 'city', 'column': 'city'},
            {'name': 'tags', 'column': 'tags', 'separator': '|', 'max_values': 3},
            {'name': 'income', 'type': 'numeric', 'column': 'income'},
            {'name': 'raw', 'type': 'numeric', 'column': 'raw', 'transform': 'none'},
            {'name': 'age', 'type': 'numeric', 'column': 'age', 'transform': 'bucketize',
             'boundaries': [18, 30, 65]},
            {'name': 'hour', 'type': 'datetime', 'column': 'when', 'part': 'hour'},
            {'name': 'day', 'type': 'datetime', 'column': 'when', 'part': 'day_of_year',
             'unknown_fraction': 0.25},
            {'name': 'city_x_age', 'type': 'cross', 'of': ['city', 'age']}
          ]})")) {
    stats_.features.resize(spec_.features.size());
    stats_.features[2].mean = 10;
    stats_.features[2].stddev = 2;
    stats_.features[4].boundaries = {18, 30, 65};
    stats_.features[6].vocabulary = {IntValue(32), IntValue(33)};
    header_ = {"y", "when", "city", "tags", "income", "raw", "age"};
  }

  // Transforms one record; returns its keys, dense inputs and label.
  absl::Status Run(const std::vector<std::string>& record, bool training, uint64_t row_hash,
                   std::vector<int64_t>* keys, std::vector<float>* dense, float* label) {
    Transformer t(spec_, stats_, /*seed=*/1);
    absl::StatusOr<ColumnMap> columns = t.MapColumns(header_, "d.csv");
    EXPECT_TRUE(columns.ok()) << columns.status();
    keys->assign(t.layout().num_slots, 0);
    dense->assign(t.layout().num_dense, -1);
    std::vector<absl::string_view> fields(record.begin(), record.end());
    return t.Transform(fields, *columns, training, row_hash,
                       ExampleRef{keys->data(), dense->data(), label});
  }

  Spec spec_;
  Stats stats_;
  std::vector<std::string> header_;
};

TEST_F(TransformTest, Layout_SlotsAndDenseInputs) {
  ExampleLayout l(spec_);
  EXPECT_EQ(l.num_slots, 1 + 3 + 1 + 1 + 1 + 1);  // city, tags x3, age, hour, day, cross
  EXPECT_EQ(l.num_dense, 2);
  EXPECT_EQ(l.first_slot[1], 1);
  EXPECT_EQ(l.slots[1], 3);
  EXPECT_EQ(l.dense_index[2], 0);
  EXPECT_EQ(l.dense_index[3], 1);
}

TEST_F(TransformTest, EachTransformAgainstHandComputedKeys) {
  std::vector<int64_t> keys;
  std::vector<float> dense;
  float label = -1;
  ASSERT_TRUE(Run({"yes", "2001-02-01 07:30", "Oslo", "a||b", "14", "-2.5", "30"}, false, 0,
                  &keys, &dense, &label)
                  .ok());
  EXPECT_EQ(label, 1.0f);
  auto key = [](const char* name, uint64_t value) { return FeatureKey(FeatureSalt(name), value); };
  EXPECT_EQ(keys[0], key("city", TextValue("Oslo")));
  EXPECT_EQ(keys[1], key("tags", TextValue("a")));  // the empty piece is skipped
  EXPECT_EQ(keys[2], key("tags", TextValue("b")));
  EXPECT_EQ(keys[3], kNoKey);
  EXPECT_EQ(keys[4], key("age", IntValue(2)));  // 30 is in [30, 65)
  EXPECT_EQ(keys[5], key("hour", IntValue(7)));
  EXPECT_EQ(keys[6], key("day", IntValue(32)));  // Feb 1: in the vocabulary
  const uint64_t salt = FeatureSalt("city_x_age");
  const uint64_t cross = MixKey(static_cast<int64_t>(
      MixKey(static_cast<int64_t>(salt ^ TextValue("Oslo"))) ^ IntValue(2)));
  EXPECT_EQ(keys[7], FeatureKey(salt, cross));
  EXPECT_FLOAT_EQ(dense[0], 2.0f);  // (14 - 10) / 2
  EXPECT_FLOAT_EQ(dense[1], -2.5f);
}

TEST_F(TransformTest, MissingValuesGetTheirOwnKeyOrTheMean) {
  std::vector<int64_t> keys;
  std::vector<float> dense;
  float label = -1;
  ASSERT_TRUE(Run({"no", "", "NA", "", "", "?", ""}, false, 0, &keys, &dense, &label).ok());
  EXPECT_EQ(label, 0.0f);
  auto key = [](const char* name, uint64_t value) { return FeatureKey(FeatureSalt(name), value); };
  EXPECT_EQ(keys[0], key("city", kMissingValue));
  EXPECT_EQ(keys[1], key("tags", kMissingValue));
  EXPECT_EQ(keys[2], kNoKey);
  EXPECT_EQ(keys[4], key("age", kMissingValue));
  EXPECT_EQ(keys[5], key("hour", kMissingValue));
  EXPECT_EQ(keys[6], key("day", kUnknownValue));  // missing was never seen in training
  EXPECT_FLOAT_EQ(dense[0], 0.0f);
  EXPECT_FLOAT_EQ(dense[1], 0.0f);
}

TEST_F(TransformTest, UnknownFraction_UnseenValuesAndAShareOfTrainingRows) {
  std::vector<int64_t> keys;
  std::vector<float> dense;
  float label;
  const int64_t unknown = FeatureKey(FeatureSalt("day"), kUnknownValue);
  // A held-out row on a day training never had.
  ASSERT_TRUE(Run({"no", "2001-06-01", "x", "a", "1", "1", "1"}, false, 0, &keys, &dense, &label)
                  .ok());
  EXPECT_EQ(keys[6], unknown);
  // Training rows: a quarter of them (by row hash) read unknown.
  int unknowns = 0;
  for (uint64_t h = 0; h < 4000; ++h) {
    ASSERT_TRUE(Run({"no", "2001-02-01", "x", "a", "1", "1", "1"}, true,
                    MixKey(static_cast<int64_t>(h)), &keys, &dense, &label)
                    .ok());
    unknowns += keys[6] == unknown;
  }
  EXPECT_NEAR(unknowns / 4000.0, 0.25, 0.03);
}

TEST_F(TransformTest, BadValues_NameTheColumnAndValue) {
  std::vector<int64_t> keys;
  std::vector<float> dense;
  float label;
  EXPECT_THAT(Run({"yes", "2001-02-01", "x", "a", "ten", "1", "1"}, false, 0, &keys, &dense, &label),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("column 'income': 'ten' is not a number")));
  EXPECT_THAT(Run({"yes", "2001-02-30", "x", "a", "1", "1", "1"}, false, 0, &keys, &dense, &label),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("column 'when': '2001-02-30' is not a date")));
  EXPECT_THAT(Run({"maybe", "2001-02-01", "x", "a", "1", "1", "1"}, false, 0, &keys, &dense, &label),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("column 'y': 'maybe' is neither positive (yes) nor negative (no)")));
  EXPECT_THAT(Run({"", "2001-02-01", "x", "a", "1", "1", "1"}, false, 0, &keys, &dense, &label),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is a missing label")));
}

TEST(LabelTest, EachTaskAndItsErrors) {
  Stats stats;
  stats.features.resize(1);
  stats.classes = {"a", "b", "c"};
  const std::string f = "'features': [{'name': 'x', 'column': 'x'}]";
  auto label = [&](const std::string& label_spec, const std::string& value) {
    Spec spec = MustParse("{'label': " + label_spec + ", " + f + "}");
    Transformer t(spec, stats, 1);
    const std::vector<std::string> header = {"y", "x"};
    absl::StatusOr<ColumnMap> c = t.MapColumns(header, "d.csv");
    EXPECT_TRUE(c.ok()) << c.status();
    const std::vector<absl::string_view> fields = {value, "x"};
    return t.Label(fields, *c);
  };
  EXPECT_EQ(*label("{'column': 'y'}", "1"), 1.0f);
  EXPECT_EQ(*label("{'column': 'y'}", "True"), 1.0f);
  EXPECT_EQ(*label("{'column': 'y'}", "no"), 0.0f);
  EXPECT_EQ(*label("{'column': 'y'}", "0.0"), 0.0f);
  EXPECT_THAT(label("{'column': 'y'}", "2"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is not a binary label")));
  EXPECT_EQ(*label("{'column': 'y', 'threshold': 15}", "15"), 0.0f);
  EXPECT_EQ(*label("{'column': 'y', 'threshold': 15}", "16"), 1.0f);
  EXPECT_THAT(label("{'column': 'y', 'threshold': 15}", "late"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'late' is not a number")));
  EXPECT_EQ(*label("{'column': 'y', 'task': 'regression'}", "-2.5"), -2.5f);
  EXPECT_EQ(*label("{'column': 'y', 'task': 'multiclass'}", "c"), 2.0f);
  EXPECT_THAT(label("{'column': 'y', 'task': 'multiclass'}", "d"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'d' is not one of the 3 classes the training split has")));
  EXPECT_EQ(*label("{'column': 'y', 'task': 'multiclass', 'classes': ['d', 'e']}", "e"), 1.0f);
}

TEST(ColumnsTest, MissingOrRepeatedColumn_NamesTheFileAndTheHeader) {
  Spec spec = MustParse("{'label': {'column': 'y'}, 'features': [{'name': 'x', 'column': 'x'}]}");
  Stats stats;
  stats.features.resize(1);
  Transformer t(spec, stats, 1);
  const std::vector<std::string> no_x = {"y", "z"};
  EXPECT_THAT(t.MapColumns(no_x, "d.csv"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("d.csv: no column 'x' (the spec t.json needs it; columns: y, z)")));
  const std::vector<std::string> twice = {"y", "x", "x"};
  EXPECT_THAT(t.MapColumns(twice, "d.csv"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("the header names column 'x' twice")));
}

TEST(StatsTest, JsonRoundTrip) {
  Stats s;
  s.features.resize(2);
  s.features[0].mean = 1.5;
  s.features[0].stddev = 0.25;
  s.features[1].boundaries = {1, 2.5};
  s.features[1].vocabulary = {7, 0xFFFFFFFFFFFFFFF0ull};
  s.classes = {"a", "b"};
  s.class_rates = {0.25, 0.75};
  s.label_mean = 0.3;
  s.label_stddev = 2;
  absl::StatusOr<Stats> back = Stats::FromJson(nlohmann::json::parse(s.ToJson().dump()), 2);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->features[0].mean, 1.5);
  EXPECT_EQ(back->features[0].stddev, 0.25);
  EXPECT_EQ(back->features[1].boundaries, (std::vector<double>{1, 2.5}));
  EXPECT_TRUE(back->features[1].vocabulary.contains(0xFFFFFFFFFFFFFFF0ull));
  EXPECT_EQ(back->classes, s.classes);
  EXPECT_EQ(back->class_rates, s.class_rates);
  EXPECT_EQ(back->label_mean, 0.3);
  EXPECT_FALSE(Stats::FromJson(nlohmann::json::parse("{}"), 2).ok());
}

}  // namespace
}  // namespace tabular
}  // namespace pstrain
