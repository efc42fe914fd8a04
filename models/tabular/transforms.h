// From a CSV record to a training example, as the feature spec (feature_spec.h) says, with the
// statistics of the training split (FeatureStats: computed by the coordinator's scan, data_plan.h,
// and shipped to every worker):
//
//   categorical   the field's text -> a 64-bit key (FeatureKey of the feature's name and the text);
//                 multi-valued: split on the separator, up to max_values keys
//   numeric       standardize: (x - mean) / stddev of the training split (a dense input);
//                 none: x as it is; bucketize: the bucket's index as a key (bucket i holds
//                 [b[i-1], b[i]); the boundaries given or the training split's quantiles)
//   datetime      "YYYY-MM-DD[( |T)HH:MM[:SS[.fff]]][Z|+HH:MM]" -> one part's value as a key
//                 (weekday 0 = Monday; time_slot = minute of day / slot_minutes)
//   cross         the crossed features' values (after their own transforms) -> one key
//
// Missing values (the empty field, or one of the spec's missing_values): a categorical, datetime
// or bucketized feature gets its own "missing" key; a standardized numeric gets 0 (the training
// mean), a raw one 0. A feature with unknown_fraction maps values the training split never had
// to its "unknown" key, and that fraction of training rows too.
//
// Keys: FeatureKey(salt of the feature's name, value id): the same in every process for the same
// spec and data, so any worker, the evaluator and a later job agree (and the dynamic tables need
// no vocabulary).
#ifndef PSTRAIN_MODELS_TABULAR_TRANSFORMS_H_
#define PSTRAIN_MODELS_TABULAR_TRANSFORMS_H_

#include <array>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "models/tabular/feature_spec.h"
#include "nlohmann/json.hpp"

namespace pstrain {
namespace tabular {

// A slot that holds no key (a multi-valued feature with fewer values than max_values).
inline constexpr int64_t kNoKey = INT64_MIN;

// Value ids of the special values.
inline constexpr uint64_t kMissingValue = 0x6d697373696e6721ull;  // "missing!"
inline constexpr uint64_t kUnknownValue = 0x756e6b6e6f776e21ull;  // "unknown!"

// The value id of a text (FNV-1a 64 of its bytes) and of an integer (itself).
uint64_t TextValue(absl::string_view text);
inline uint64_t IntValue(int64_t v) { return static_cast<uint64_t>(v); }
// A feature's salt: its name's value id, mixed.
uint64_t FeatureSalt(absl::string_view name);
// The key of `value` of the feature with `salt`.
int64_t FeatureKey(uint64_t salt, uint64_t value);

// A date and time of day, as written (no time zone conversion).
struct CivilTime {
  int year = 0, month = 1, day = 1, hour = 0, minute = 0;
};
// Parses "YYYY-MM-DD" or "YYYY/MM/DD", optionally followed by ' ' or 'T' and "HH:MM", ":SS",
// ".fraction", and "Z" or "+HH:MM"/"-HH:MM" (ignored). False for anything else or an invalid date.
bool ParseCivilTime(absl::string_view text, CivilTime* out);
// 0 = Monday .. 6 = Sunday.
int Weekday(int year, int month, int day);
// 1 .. 366.
int DayOfYear(int year, int month, int day);
int64_t DatePartValue(const CivilTime& t, DatePart part, int slot_minutes);

// A number: decimal or scientific notation. False for anything else (including "inf", "nan").
bool ParseNumber(absl::string_view text, double* out);
// The bucket of `x`: the number of boundaries <= x.
int64_t Bucketize(double x, absl::Span<const double> boundaries);

// What the training split says of each feature, and of the label.
struct FeatureStats {
  double mean = 0;    // standardized numeric
  double stddev = 1;
  std::vector<double> boundaries;  // bucketized numeric (given, or the quantiles')
  // unknown_fraction features: the value ids the training split has.
  absl::flat_hash_set<uint64_t> vocabulary;
};
struct Stats {
  std::vector<FeatureStats> features;  // by spec feature
  std::vector<std::string> classes;    // multiclass: output order
  std::vector<double> class_rates;     // multiclass: each class's share of the training rows
  double label_mean = 0;               // binary: the positive rate; regression: the mean
  double label_stddev = 0;             // regression

  nlohmann::json ToJson() const;
  static absl::StatusOr<Stats> FromJson(const nlohmann::json& j, size_t num_features);
};

// Where each embedded feature's keys go in an example (its slots), and the dense inputs.
struct ExampleLayout {
  explicit ExampleLayout(const Spec& spec);
  // Per spec feature: its first slot and slot count (0 for dense features), or its dense input
  // (-1 for embedded ones).
  std::vector<int> first_slot, slots, dense_index;
  // The embedded features in slot order (spec indices), and the dense ones in input order.
  std::vector<int> embedded, dense;
  int num_slots = 0;
  int num_dense = 0;
};

// One example: its keys (num_slots, kNoKey in unused slots), dense inputs and label (binary 0/1;
// regression the value; multiclass the class index).
struct ExampleRef {
  int64_t* keys;
  float* dense;
  float* label;
};

// The columns a file's header gives each part of the spec.
struct ColumnMap {
  int label = -1;
  int split = -1;                  // the test split's column, or -1
  std::vector<int> feature_column;  // by spec feature; -1 for crosses
  size_t num_fields = 0;
};

// Turns records into examples. Immutable; safe to share between threads.
class Transformer {
 public:
  // `stats` must outlive the transformer and hold one FeatureStats per spec feature.
  Transformer(const Spec& spec, const Stats& stats, uint64_t seed);

  // The columns of a file with `header`. Errors: kInvalidArgument naming `file` and a column the
  // spec needs that the header lacks (listing the header's columns), or one it names twice.
  // Without `with_label` (serving) the label and split columns are not needed: the map's label
  // is -1 and Transform sets every label to 0.
  absl::StatusOr<ColumnMap> MapColumns(absl::Span<const std::string> header,
                                       const std::string& file, bool with_label = true) const;

  // The label of `fields`. Errors: kInvalidArgument naming the column and value (a value outside
  // the task's: not a number, not one of the classes or the positive/negative texts; a missing
  // label).
  absl::StatusOr<float> Label(absl::Span<const absl::string_view> fields,
                              const ColumnMap& columns) const;
  // Whether the record belongs to the test split by the spec's test column (false without one, or
  // when the record is too short to have it).
  bool IsTestByColumn(absl::Span<const absl::string_view> fields, const ColumnMap& columns) const;

  // Fills `out` (layout()'s sizes) from `fields`. `training`: the row trains (unknown_fraction
  // applies to it); `row_hash` a uniform 64-bit hash of the row. Errors: kInvalidArgument naming
  // the column and its value (a number that isn't one, a bad date), and Label's.
  absl::Status Transform(absl::Span<const absl::string_view> fields, const ColumnMap& columns,
                         bool training, uint64_t row_hash, ExampleRef out) const;

  const ExampleLayout& layout() const { return layout_; }
  const Spec& spec() const { return spec_; }
  bool IsMissing(absl::string_view field) const;

  // The raw value id of feature `f` (a single-valued embedded, non-cross feature) in `field`, as
  // the scan collects vocabularies. Errors: as Transform.
  absl::StatusOr<uint64_t> RawValue(int f, absl::string_view field) const;

 private:
  // A row's parsed dates by column, so that several datetime features of one column parse it once.
  struct DateCache {
    int column = -1;
    bool ok = false;
    CivilTime time;
  };
  absl::StatusOr<uint64_t> Value(int f, absl::string_view field, int column,
                                 DateCache* dates) const;

  // Per spec feature: its salt and, for unknown_fraction, a second salt for the row's draw.
  const Spec& spec_;
  const Stats& stats_;
  const uint64_t seed_;
  ExampleLayout layout_;
  std::vector<uint64_t> salts_;
  std::vector<std::vector<int>> cross_of_;  // crosses: their features' spec indices
  absl::flat_hash_set<std::string> missing_;
  // A cheap first test before the set: the longest missing token and the first bytes they use.
  size_t longest_missing_ = 0;
  std::array<bool, 256> missing_first_{};
};

// A uniform double in [0, 1) from a 64-bit hash.
inline double UnitOf(uint64_t hash) {
  return static_cast<double>(hash >> 11) * (1.0 / 9007199254740992.0);
}
// The hash of row (file index, line) under `seed` and `salt`.
uint64_t RowHash(uint64_t seed, uint64_t salt, int64_t file_index, int64_t line);

}  // namespace tabular
}  // namespace pstrain

#endif  // PSTRAIN_MODELS_TABULAR_TRANSFORMS_H_
