// The feature spec of the tabular model (models/tabular/tabular_model.h): a JSON file naming the
// label and the task, the features made from a CSV's columns, the split and the model. Every field
// is documented in docs/feature-spec.md; an example:
//
//   {
//     "label": {"column": "CARAVAN", "task": "binary",
//               "positive": ["insurance"], "negative": ["noinsurance"]},
//     "features": [
//       {"name": "customer_type", "type": "categorical", "column": "MOSTYPE", "min_count": 5},
//       {"name": "genres", "type": "categorical", "column": "genres", "separator": "|",
//        "pooling": "mean"},
//       {"name": "income", "type": "numeric", "column": "MINKGEM"},
//       {"name": "age", "type": "numeric", "column": "age", "transform": "bucketize",
//        "quantiles": 10},
//       {"name": "hour", "type": "datetime", "column": "when", "part": "hour"},
//       {"name": "type_x_age", "type": "cross", "of": ["customer_type", "age"]}
//     ],
//     "split": {"test_fraction": 0.2},
//     "model": {"type": "wide_and_deep", "embedding_dim": 8, "hidden": [64, 32],
//               "optimizers": {"embeddings": {"kind": "adagrad", "learning_rate": 0.05}}}
//   }
//
// Unknown fields are errors (a typo must not be silently ignored); every error names the field by
// its JSON path ("features[3].transform") and the spec file.
#ifndef PSTRAIN_MODELS_TABULAR_FEATURE_SPEC_H_
#define PSTRAIN_MODELS_TABULAR_FEATURE_SPEC_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/ps_service.pb.h"
#include "ps/row_format.h"

namespace pstrain {
namespace tabular {

enum class Task { kBinary, kRegression, kMulticlass };
const char* TaskName(Task task);

struct LabelSpec {
  std::string column;
  Task task = Task::kBinary;
  // Binary: the label texts that are positive and negative (default: "1"/"true"/"yes" and
  // "0"/"false"/"no", case-insensitive), or a threshold: a numeric label > threshold is positive.
  std::vector<std::string> positive, negative;
  std::optional<double> threshold;
  // Multiclass: the classes in output order; empty: the labels the training data has, sorted.
  std::vector<std::string> classes;
};

enum class FeatureType { kCategorical, kNumeric, kDatetime, kCross };
// A numeric feature's transform: standardized with the training split's mean and standard
// deviation (a dense input), raw (a dense input as it is), or bucketized (an embedded id).
enum class NumericTransform { kStandardize, kNone, kBucketize };
enum class DatePart { kYear, kMonth, kDay, kWeekday, kDayOfYear, kHour, kMinuteOfDay, kTimeSlot };
enum class Pooling { kSum, kMean };

struct FeatureSpec {
  std::string name;
  FeatureType type = FeatureType::kCategorical;
  std::string column;  // every type but kCross
  // kCategorical: multi-valued when `separator` is set (its values pooled into one embedding; at
  // most max_values per row, the first ones).
  std::string separator;
  Pooling pooling = Pooling::kSum;
  int max_values = 16;
  // kCategorical, bucketized kNumeric, kDatetime: a key is stored (and trained) once seen in this
  // many training batches; until then it reads zeros (ps/dynamic_shard.h admission).
  int64_t min_count = 0;
  // kCategorical, kDatetime: values the training split never has become the feature's "unknown"
  // value, and so does this fraction of training rows' values (seeded), so the model learns what
  // unknown means (flights' day of year, whose test days never occur in training). 0: off.
  double unknown_fraction = 0;
  // kNumeric.
  NumericTransform transform = NumericTransform::kStandardize;
  std::vector<double> boundaries;  // bucketize: increasing; bucket i holds [b[i-1], b[i])
  int quantiles = 0;               // bucketize: boundaries at the training split's quantiles
  // kDatetime.
  DatePart part = DatePart::kHour;
  int slot_minutes = 15;  // kTimeSlot: the time of day in slots of this many minutes
  // kCross: the features crossed (2 or more single-valued embedded features, by name).
  std::vector<std::string> of;

  // Whether the feature becomes an embedding (every type but standardized or raw numeric).
  bool embedded() const {
    return type != FeatureType::kNumeric || transform == NumericTransform::kBucketize;
  }
};

// Where the test rows come from: a column's text at or after a value (a time split: "date" from
// "2001-06"), a seeded fraction of the rows, or other files (test_data).
struct SplitSpec {
  std::string test_column;
  std::string test_at_least;   // with test_column: rows whose text sorts >= this are test
  double test_fraction = 0.2;  // without test_column or test_data
  std::string test_data;       // a file, directory or glob
};

enum class ModelType { kWide, kDeep, kWideAndDeep };
enum class Interaction { kNone, kDot };

struct ModelSpec {
  ModelType type = ModelType::kDeep;
  int64_t embedding_dim = 16;
  std::vector<int64_t> hidden = {64};
  Interaction interaction = Interaction::kNone;
  double init_stddev = 0.01;
  // How the dynamic tables store their rows and their optimizer slots (ps/row_format.h):
  // "row_format": float32 (default), float16, bfloat16, int8; "slot_format": float32 (default),
  // float16, bfloat16.
  RowFormat row_format = ROW_FLOAT32;
  RowFormat slot_format = ROW_FLOAT32;
  // Per part: the embeddings (the deep part's tables), the wide part (its tables and numeric
  // weights, and the baseline's), the dense layers. Defaults: Adagrad, the dense layers at 0.2;
  // the embeddings and the wide part at 0.05 * min(1, 16 / inputs), inputs = the number of
  // features (DefaultSparseRate); a part the spec names keeps its rate (0.05 if it gives none). Adagrad moves every weight a step of
  // about its rate at first, so a logit summed over many features jumps by about rate x inputs:
  // with 85 features at 0.05 the validation logloss went from 0.22 to 2.5 in a few steps.
  OptimizerDef embeddings, wide, dense;
  bool embeddings_schedule = false, wide_schedule = false, dense_schedule = false;  // given?
  bool embeddings_given = false, wide_given = false, dense_given = false;
};

struct Spec {
  std::string path;  // the spec file (for messages)
  std::string text;  // its JSON text (shipped to the workers, who parse it again)
  LabelSpec label;
  std::vector<FeatureSpec> features;
  SplitSpec split;
  ModelSpec model;
  char delimiter = ',';
  // Field texts that mean "missing" (besides the empty field).
  std::vector<std::string> missing_values = {"NA", "N/A", "NaN", "nan", "null", "NULL", "?"};

  int FeatureIndex(absl::string_view name) const;  // -1 if none
};

// The default rate of the embeddings and the wide part for a spec with `inputs` inputs.
double DefaultSparseRate(int64_t inputs);

// Parses and checks a spec. `path` names it in messages. Errors: kInvalidArgument naming the
// field (a missing or unknown field, a wrong type, a value out of range, a duplicate or unknown
// feature name, a cross of a multi-valued or dense feature).
absl::StatusOr<Spec> ParseSpec(absl::string_view json_text, const std::string& path);
// Reads and parses the file. Errors: kNotFound (no file), and ParseSpec's.
absl::StatusOr<Spec> ReadSpec(const std::string& path);

}  // namespace tabular
}  // namespace pstrain

#endif  // PSTRAIN_MODELS_TABULAR_FEATURE_SPEC_H_
