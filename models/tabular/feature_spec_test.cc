#include "models/tabular/feature_spec.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace tabular {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// JSON with single quotes for readability.
std::string J(const std::string& text) { return absl::StrReplaceAll(text, {{"'", "\""}}); }

absl::StatusOr<Spec> Parse(const std::string& text) { return ParseSpec(J(text), "spec.json"); }

// A spec with `features` (a JSON array's inside) and `extra` top-level fields.
std::string WithFeatures(const std::string& features, const std::string& extra = "") {
  return absl::StrCat("{'label': {'column': 'y'}, 'features': [", features, "]", extra, "}");
}

TEST(FeatureSpecTest, EveryField_Parsed) {
  absl::StatusOr<Spec> s = Parse(R"({
    'label': {'column': 'CARAVAN', 'task': 'binary',
              'positive': ['insurance'], 'negative': ['noinsurance']},
    'features': [
      {'name': 'kind', 'type': 'categorical', 'column': 'MOSTYPE', 'min_count': 5,
       'unknown_fraction': 0.05},
      {'name': 'genres', 'column': 'genres', 'separator': '|', 'pooling': 'mean',
       'max_values': 4},
      {'name': 'income', 'type': 'numeric', 'column': 'MINKGEM'},
      {'name': 'raw', 'type': 'numeric', 'column': 'x', 'transform': 'none'},
      {'name': 'age', 'type': 'numeric', 'column': 'age', 'transform': 'bucketize',
       'quantiles': 10},
      {'name': 'dist', 'type': 'numeric', 'column': 'd', 'transform': 'bucketize',
       'boundaries': [1, 10, 100]},
      {'name': 'slot', 'type': 'datetime', 'column': 'when', 'part': 'time_slot',
       'slot_minutes': 30},
      {'name': 'kind_x_age', 'type': 'cross', 'of': ['kind', 'age', 'slot']}
    ],
    'split': {'test': {'column': 'when', 'at_least': '2001-06'}},
    'model': {'type': 'wide_and_deep', 'embedding_dim': 8, 'hidden': [32, 16],
              'interaction': 'dot', 'init_stddev': 0.02,
              'row_format': 'int8', 'slot_format': 'bfloat16',
              'optimizers': {
                'embeddings': {'kind': 'adagrad', 'learning_rate': 0.1,
                               'initial_accumulator_value': 0.01},
                'dense': {'kind': 'adam', 'learning_rate': 0.001, 'staleness': 'inverse_sqrt',
                          'schedule': {'kind': 'cosine_decay', 'decay_steps': 1000,
                                       'warmup_steps': 100, 'warmup_target': 0.002}},
                'wide': {'kind': 'ftrl', 'learning_rate': 0.05,
                         'l1_regularization_strength': 0.001}}},
    'delimiter': ';',
    'missing_values': ['-', '']
  })");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->label.column, "CARAVAN");
  EXPECT_EQ(s->label.task, Task::kBinary);
  EXPECT_THAT(s->label.positive, ElementsAre("insurance"));
  EXPECT_THAT(s->label.negative, ElementsAre("noinsurance"));
  ASSERT_EQ(s->features.size(), 8u);
  EXPECT_EQ(s->features[0].min_count, 5);
  EXPECT_DOUBLE_EQ(s->features[0].unknown_fraction, 0.05);
  EXPECT_EQ(s->features[1].separator, "|");
  EXPECT_EQ(s->features[1].pooling, Pooling::kMean);
  EXPECT_EQ(s->features[1].max_values, 4);
  EXPECT_EQ(s->features[2].transform, NumericTransform::kStandardize);
  EXPECT_FALSE(s->features[2].embedded());
  EXPECT_EQ(s->features[3].transform, NumericTransform::kNone);
  EXPECT_EQ(s->features[4].quantiles, 10);
  EXPECT_TRUE(s->features[4].embedded());
  EXPECT_THAT(s->features[5].boundaries, ElementsAre(1, 10, 100));
  EXPECT_EQ(s->features[6].part, DatePart::kTimeSlot);
  EXPECT_EQ(s->features[6].slot_minutes, 30);
  EXPECT_THAT(s->features[7].of, ElementsAre("kind", "age", "slot"));
  EXPECT_EQ(s->split.test_column, "when");
  EXPECT_EQ(s->split.test_at_least, "2001-06");
  EXPECT_EQ(s->model.type, ModelType::kWideAndDeep);
  EXPECT_EQ(s->model.embedding_dim, 8);
  EXPECT_THAT(s->model.hidden, ElementsAre(32, 16));
  EXPECT_EQ(s->model.interaction, Interaction::kDot);
  EXPECT_DOUBLE_EQ(s->model.init_stddev, 0.02);
  EXPECT_EQ(s->model.row_format, ROW_INT8);
  EXPECT_EQ(s->model.slot_format, ROW_BFLOAT16);
  EXPECT_EQ(s->model.embeddings.kind(), OptimizerDef::ADAGRAD);
  EXPECT_DOUBLE_EQ(s->model.embeddings.learning_rate(), 0.1);
  EXPECT_DOUBLE_EQ(s->model.embeddings.initial_accumulator_value(), 0.01);
  EXPECT_EQ(s->model.dense.kind(), OptimizerDef::ADAM);
  EXPECT_EQ(s->model.dense.staleness_scaling(), OptimizerDef::STALENESS_INVERSE_SQRT);
  EXPECT_FALSE(s->model.embeddings.has_staleness_scaling());  // the job's default
  EXPECT_EQ(s->model.dense.schedule().kind(), LearningRateSchedule::COSINE_DECAY);
  EXPECT_EQ(s->model.dense.schedule().warmup_steps(), 100);
  EXPECT_TRUE(s->model.dense_schedule);
  EXPECT_FALSE(s->model.embeddings_schedule);
  EXPECT_EQ(s->model.wide.kind(), OptimizerDef::FTRL);
  EXPECT_EQ(s->delimiter, ';');
  EXPECT_THAT(s->missing_values, ElementsAre("-", ""));
}

TEST(FeatureSpecTest, Defaults) {
  absl::StatusOr<Spec> s = Parse(WithFeatures("{'name': 'a', 'column': 'a'}"));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->label.task, Task::kBinary);
  EXPECT_TRUE(s->label.positive.empty());
  EXPECT_EQ(s->features[0].type, FeatureType::kCategorical);
  EXPECT_DOUBLE_EQ(s->split.test_fraction, 0.2);
  EXPECT_EQ(s->model.type, ModelType::kDeep);
  EXPECT_EQ(s->model.embedding_dim, 16);
  EXPECT_THAT(s->model.hidden, ElementsAre(64));
  EXPECT_EQ(s->model.embeddings.kind(), OptimizerDef::ADAGRAD);
  EXPECT_DOUBLE_EQ(s->model.dense.learning_rate(), 0.2);
  EXPECT_DOUBLE_EQ(s->model.embeddings.learning_rate(), 0.05);
  EXPECT_DOUBLE_EQ(s->model.wide.learning_rate(), 0.05);
  EXPECT_EQ(s->delimiter, ',');
}

// The embeddings' and the wide part's default rates shrink with the number of features (past 16);
// a part the spec names keeps its rate.
TEST(FeatureSpecTest, DefaultSparseRates_ScaleWithFeatures) {
  EXPECT_DOUBLE_EQ(DefaultSparseRate(1), 0.05);
  EXPECT_DOUBLE_EQ(DefaultSparseRate(16), 0.05);
  EXPECT_DOUBLE_EQ(DefaultSparseRate(32), 0.025);
  EXPECT_DOUBLE_EQ(DefaultSparseRate(80), 0.01);
  std::string features;
  for (int i = 0; i < 32; ++i) {
    absl::StrAppend(&features, i > 0 ? ", " : "", "{'name': 'f", i, "', 'column': 'c", i, "'}");
  }
  absl::StatusOr<Spec> s = Parse(WithFeatures(features));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_DOUBLE_EQ(s->model.embeddings.learning_rate(), 0.025);
  EXPECT_DOUBLE_EQ(s->model.wide.learning_rate(), 0.025);
  EXPECT_DOUBLE_EQ(s->model.dense.learning_rate(), 0.2);
  s = Parse(WithFeatures(features, ", 'model': {'optimizers': {'wide': {'learning_rate': 0.3}}}"));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_DOUBLE_EQ(s->model.embeddings.learning_rate(), 0.025);
  EXPECT_DOUBLE_EQ(s->model.wide.learning_rate(), 0.3);
}

TEST(FeatureSpecTest, RegressionAndMulticlassLabels) {
  absl::StatusOr<Spec> r = Parse(
      "{'label': {'column': 'price', 'task': 'regression'}, 'features': [{'name': 'a', "
      "'column': 'a'}]}");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->label.task, Task::kRegression);
  absl::StatusOr<Spec> m = Parse(
      "{'label': {'column': 'region', 'task': 'multiclass', 'classes': ['n', 's', 'w']}, "
      "'features': [{'name': 'a', 'column': 'a'}], 'split': {'test_data': 'test/*.csv'}}");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_THAT(m->label.classes, ElementsAre("n", "s", "w"));
  EXPECT_EQ(m->split.test_data, "test/*.csv");
  absl::StatusOr<Spec> t = Parse("{'label': {'column': 'delay', 'threshold': 15}, 'features': "
                                 "[{'name': 'a', 'column': 'a'}]}");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t->label.threshold, 15);
}

// Each error names the file and the field.
TEST(FeatureSpecErrorTest, EachErrorNamesTheField) {
  struct Case {
    std::string spec, message;
  };
  const std::string f = "{'name': 'a', 'column': 'a'}";
  const std::vector<Case> cases = {
      {"not json", "spec.json: not valid JSON"},
      {"[]", "spec.json: the spec: must be a JSON object"},
      {"{'features': [" + f + "]}", "spec.json: label: is required"},
      {"{'label': {'column': 'y'}}", "spec.json: features: is required"},
      {"{'label': {'column': 'y'}, 'features': []}", "features: must be a non-empty array"},
      {"{'label': {}, 'features': [" + f + "]}", "label.column: is required"},
      {"{'label': {'column': 'y'}, 'features': [" + f + "], 'model': {'optimizers': "
       "{'dense': {'staleness': 'linear'}}}}",
       "model.optimizers.dense.staleness: must be none, inverse or inverse_sqrt"},
      {"{'label': {'column': 'y', 'task': 'ranking'}, 'features': [" + f + "]}",
       "label.task: 'ranking' is not one of binary, regression, multiclass"},
      {"{'label': {'column': 'y', 'positive': ['a']}, 'features': [" + f + "]}",
       "label.negative: is needed with the other"},
      {"{'label': {'column': 'y', 'positive': ['a'], 'negative': ['a']}, 'features': [" + f + "]}",
       "label.positive: 'a' is negative too"},
      {"{'label': {'column': 'y', 'threshold': 'x'}, 'features': [" + f + "]}",
       "label.threshold: must be a number"},
      {"{'label': {'column': 'y', 'task': 'multiclass', 'classes': ['a', 'a']}, 'features': [" +
           f + "]}",
       "label.classes: 'a' is listed twice"},
      {"{'label': {'column': 'y', 'colour': 1}, 'features': [" + f + "]}",
       "label: unknown field colour"},
      {WithFeatures("{'column': 'a'}"), "features[0].name: is required"},
      {WithFeatures("{'name': 'a'}"), "features[0].column: is required"},
      {WithFeatures("{'name': 'a', 'column': 'a', 'type': 'text'}"),
       "features[0].type: 'text' is not one of categorical, numeric, datetime, cross"},
      {WithFeatures(f + "," + f), "features[1].name: 'a' is used twice"},
      {WithFeatures("{'name': 'a', 'column': 'y'}"), "features[0].column: 'y' is the label"},
      {WithFeatures("{'name': 'a', 'column': 'a', 'pooling': 'mean'}"),
       "features[0].separator: is needed for pooling"},
      {WithFeatures("{'name': 'a', 'column': 'a', 'separator': ',', 'max_values': 0}"),
       "features[0].max_values: must be in [1, 1024]"},
      {WithFeatures("{'name': 'a', 'column': 'a', 'min_count': -1}"),
       "features[0].min_count: must be >= 0"},
      {WithFeatures("{'name': 'a', 'column': 'a', 'unknown_fraction': 1}"),
       "features[0].unknown_fraction: must be in [0, 1)"},
      {WithFeatures("{'name': 'a', 'type': 'numeric', 'column': 'a', 'transform': 'bucketize'}"),
       "features[0].transform: bucketize needs either boundaries or quantiles"},
      {WithFeatures("{'name': 'a', 'type': 'numeric', 'column': 'a', 'transform': 'bucketize', "
                    "'boundaries': [3, 1]}"),
       "features[0].boundaries: must increase"},
      {WithFeatures("{'name': 'a', 'type': 'numeric', 'column': 'a', 'quantiles': 4}"),
       "features[0].quantiles: goes with \"transform\": \"bucketize\""},
      {WithFeatures("{'name': 'a', 'type': 'numeric', 'column': 'a', 'transform': 'bucketize', "
                    "'quantiles': 1}"),
       "features[0].quantiles: must be in [2, 10000]"},
      {WithFeatures("{'name': 'a', 'type': 'numeric', 'column': 'a', 'min_count': 2}"),
       "features[0]: unknown field min_count"},
      {WithFeatures("{'name': 'a', 'type': 'datetime', 'column': 'a'}"),
       "features[0].part: is required"},
      {WithFeatures("{'name': 'a', 'type': 'datetime', 'column': 'a', 'part': 'hour', "
                    "'slot_minutes': 10}"),
       "features[0].slot_minutes: goes with \"part\": \"time_slot\""},
      {WithFeatures("{'name': 'c', 'type': 'cross', 'of': ['a']}"),
       "features[0].of: must name at least 2 features"},
      {WithFeatures(f + ", {'name': 'c', 'type': 'cross', 'of': ['a', 'b']}"),
       "features[1].of: no feature named 'b'"},
      {WithFeatures(f + ", {'name': 'n', 'type': 'numeric', 'column': 'n'}, "
                        "{'name': 'c', 'type': 'cross', 'of': ['a', 'n']}"),
       "features[2].of: 'n' is a dense numeric feature: bucketize it to cross it"},
      {WithFeatures(f + ", {'name': 'm', 'column': 'm', 'separator': '|'}, "
                        "{'name': 'c', 'type': 'cross', 'of': ['a', 'm']}"),
       "features[2].of: 'm' is multi-valued and can't be crossed"},
      {WithFeatures(f, ", 'split': {'test_fraction': 0}"), "split.test_fraction: must be in (0, 1)"},
      {WithFeatures(f, ", 'split': {'test_fraction': 0.1, 'test_data': 'x'}"),
       "split: give one of test, test_fraction and test_data"},
      {WithFeatures(f, ", 'split': {'test': {'column': 'd'}}"), "split.test.at_least: is required"},
      {WithFeatures(f, ", 'model': {'type': 'tree'}"),
       "model.type: 'tree' is not one of wide, deep, wide_and_deep"},
      {WithFeatures(f, ", 'model': {'embedding_dim': 0}"), "model.embedding_dim: must be in"},
      {WithFeatures(f, ", 'model': {'hidden': [8, 0]}"), "model.hidden: widths must be integers"},
      {WithFeatures(f, ", 'model': {'type': 'wide', 'interaction': 'dot'}"),
       "model.interaction: needs a deep part"},
      {WithFeatures(f, ", 'model': {'row_format': 'int4'}"),
       "model.row_format: must be float32, float16, bfloat16 or int8"},
      {WithFeatures(f, ", 'model': {'slot_format': 'int8'}"),
       "model.slot_format: must be float32, float16 or bfloat16"},
      {WithFeatures(f, ", 'model': {'optimizers': {'sparse': {}}}"),
       "model.optimizers: unknown field sparse"},
      {WithFeatures(f, ", 'model': {'optimizers': {'dense': {'kind': 'rmsprop'}}}"),
       "model.optimizers.dense.kind: 'rmsprop' is not one of sgd, momentum, adagrad, adam, ftrl"},
      {WithFeatures(f, ", 'model': {'optimizers': {'dense': {'learning_rate': -1}}}"),
       "model.optimizers.dense: ADAGRAD optimizer: learning_rate must be > 0"},
      {WithFeatures(f, ", 'model': {'optimizers': {'dense': {'schedule': {'kind': "
                       "'exponential_decay', 'decay_steps': 10}}}}"),
       "model.optimizers.dense.schedule: exponential decay needs decay_rate > 0"},
      {WithFeatures(f, ", 'delimiter': '::'"), "delimiter: must be one character"},
      {WithFeatures(f, ", 'extra': 1"), "spec.json: the spec: unknown field extra"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<Spec> s = Parse(c.spec);
    ASSERT_FALSE(s.ok()) << "accepted: " << c.spec;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << s.status();
    EXPECT_THAT(std::string(s.status().message()), HasSubstr(c.message)) << c.spec;
  }
}

// The specs shipped as examples parse (the test runs in the workspace's runfiles).
TEST(FeatureSpecTest, ShippedSpecs_Parse) {
  absl::StatusOr<Spec> flights = ReadSpec("models/tabular/specs/flights_ctr.json");
  ASSERT_TRUE(flights.ok()) << flights.status();
  EXPECT_EQ(flights->label.column, "delay");
  EXPECT_EQ(flights->features.size(), 14u);
  absl::StatusOr<Spec> insurance = ReadSpec("models/tabular/specs/insurance.json");
  ASSERT_TRUE(insurance.ok()) << insurance.status();
  EXPECT_EQ(insurance->label.positive, std::vector<std::string>{"insurance"});
  EXPECT_EQ(insurance->features.size(), 85u);
  EXPECT_EQ(insurance->split.test_data, "data/insurance/ticdata_test.csv");
}

TEST(FeatureSpecErrorTest, MissingFile_NotFound) {
  EXPECT_THAT(ReadSpec("/no/such/spec.json"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/no/such/spec.json")));
}

}  // namespace
}  // namespace tabular
}  // namespace pstrain
