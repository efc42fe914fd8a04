#include "models/tabular/transforms.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "absl/container/inlined_vector.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "partitioners/key_routing.h"

namespace pstrain {
namespace tabular {
namespace {

constexpr uint64_t kUnknownSalt = 0x5eedf00dcafe0001ull;

bool Digits(absl::string_view s, size_t at, size_t n, int* out) {
  if (at + n > s.size()) return false;
  int v = 0;
  for (size_t i = at; i < at + n; ++i) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(s[i]))) return false;
    v = v * 10 + (s[i] - '0');
  }
  *out = v;
  return true;
}

bool LeapYear(int y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

int DaysInMonth(int y, int m) {
  static const int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return m == 2 && LeapYear(y) ? 29 : kDays[m - 1];
}

// Days since 1970-01-01 of a civil date (Howard Hinnant's days_from_civil).
int64_t DaysFromCivil(int y, int m, int d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

absl::Status BadValue(const std::string& column, absl::string_view value, absl::string_view what) {
  std::string shown(value.substr(0, 40));
  if (value.size() > 40) shown += "...";
  return absl::InvalidArgumentError(
      absl::StrCat("column '", column, "': '", shown, "' ", what));
}

}  // namespace

uint64_t TextValue(absl::string_view text) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a 64
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

uint64_t FeatureSalt(absl::string_view name) {
  return MixKey(static_cast<int64_t>(TextValue(name) ^ 0x7461627566656174ull));
}

int64_t FeatureKey(uint64_t salt, uint64_t value) {
  int64_t k = static_cast<int64_t>(MixKey(static_cast<int64_t>(salt ^ MixKey(
                                              static_cast<int64_t>(value)))));
  return k == kNoKey ? k + 1 : k;
}

uint64_t RowHash(uint64_t seed, uint64_t salt, int64_t file_index, int64_t line) {
  const uint64_t a = MixKey(static_cast<int64_t>(seed ^ salt));
  // Wrapping arithmetic, done unsigned (signed overflow is undefined).
  const uint64_t b = MixKey(static_cast<int64_t>(static_cast<uint64_t>(file_index) *
                                                     0x9E3779B97F4A7C15ull +
                                                 static_cast<uint64_t>(line)));
  return MixKey(static_cast<int64_t>(a ^ b));
}

bool ParseCivilTime(absl::string_view s, CivilTime* out) {
  CivilTime t;
  if (!Digits(s, 0, 4, &t.year) || s.size() < 10 || (s[4] != '-' && s[4] != '/') ||
      s[7] != s[4] || !Digits(s, 5, 2, &t.month) || !Digits(s, 8, 2, &t.day)) {
    return false;
  }
  if (t.month < 1 || t.month > 12 || t.day < 1 || t.day > DaysInMonth(t.year, t.month)) {
    return false;
  }
  size_t at = 10;
  if (at < s.size()) {
    if (s[at] != ' ' && s[at] != 'T') return false;
    ++at;
    if (!Digits(s, at, 2, &t.hour) || at + 2 >= s.size() || s[at + 2] != ':' ||
        !Digits(s, at + 3, 2, &t.minute) || t.hour > 23 || t.minute > 59) {
      return false;
    }
    at += 5;
    int seconds = 0;
    if (at < s.size() && s[at] == ':') {
      if (!Digits(s, at + 1, 2, &seconds) || seconds > 60) return false;
      at += 3;
      if (at < s.size() && s[at] == '.') {
        ++at;
        const size_t start = at;
        while (at < s.size() && absl::ascii_isdigit(static_cast<unsigned char>(s[at]))) ++at;
        if (at == start) return false;
      }
    }
    if (at < s.size()) {
      if (s[at] == 'Z' && at + 1 == s.size()) {
        at = s.size();
      } else if ((s[at] == '+' || s[at] == '-') && at + 6 == s.size() && s[at + 3] == ':') {
        int hh = 0, mm = 0;
        if (!Digits(s, at + 1, 2, &hh) || !Digits(s, at + 4, 2, &mm)) return false;
        at = s.size();
      } else {
        return false;
      }
    }
  }
  *out = t;
  return true;
}

int Weekday(int year, int month, int day) {
  // 1970-01-01 was a Thursday (3 with Monday = 0).
  const int64_t days = DaysFromCivil(year, month, day);
  return static_cast<int>(((days % 7) + 7 + 3) % 7);
}

int DayOfYear(int year, int month, int day) {
  return static_cast<int>(DaysFromCivil(year, month, day) - DaysFromCivil(year, 1, 1)) + 1;
}

int64_t DatePartValue(const CivilTime& t, DatePart part, int slot_minutes) {
  switch (part) {
    case DatePart::kYear: return t.year;
    case DatePart::kMonth: return t.month;
    case DatePart::kDay: return t.day;
    case DatePart::kWeekday: return Weekday(t.year, t.month, t.day);
    case DatePart::kDayOfYear: return DayOfYear(t.year, t.month, t.day);
    case DatePart::kHour: return t.hour;
    case DatePart::kMinuteOfDay: return t.hour * 60 + t.minute;
    case DatePart::kTimeSlot: return (t.hour * 60 + t.minute) / slot_minutes;
  }
  return 0;
}

bool ParseNumber(absl::string_view text, double* out) {
  text = absl::StripAsciiWhitespace(text);
  if (!text.empty() && text[0] == '+') text.remove_prefix(1);
  if (text.empty()) return false;
  double v = 0;
  const std::from_chars_result r = std::from_chars(text.data(), text.data() + text.size(), v);
  if (r.ec != std::errc() || r.ptr != text.data() + text.size() || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

int64_t Bucketize(double x, absl::Span<const double> boundaries) {
  return std::upper_bound(boundaries.begin(), boundaries.end(), x) - boundaries.begin();
}

nlohmann::json Stats::ToJson() const {
  nlohmann::json j;
  j["features"] = nlohmann::json::array();
  for (const FeatureStats& f : features) {
    nlohmann::json fj = {{"mean", f.mean}, {"stddev", f.stddev}, {"boundaries", f.boundaries}};
    std::vector<uint64_t> vocab(f.vocabulary.begin(), f.vocabulary.end());
    std::sort(vocab.begin(), vocab.end());
    fj["vocabulary"] = vocab;
    j["features"].push_back(fj);
  }
  j["classes"] = classes;
  j["class_rates"] = class_rates;
  j["label_mean"] = label_mean;
  j["label_stddev"] = label_stddev;
  return j;
}

absl::StatusOr<Stats> Stats::FromJson(const nlohmann::json& j, size_t num_features) {
  auto bad = [](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("tabular stats: ", what));
  };
  if (!j.is_object() || !j.contains("features") || !j["features"].is_array() ||
      j["features"].size() != num_features) {
    return bad(absl::StrCat("expected ", num_features, " features"));
  }
  Stats s;
  for (const nlohmann::json& fj : j["features"]) {
    FeatureStats f;
    if (!fj.is_object() || !fj.value("mean", nlohmann::json()).is_number() ||
        !fj.value("stddev", nlohmann::json()).is_number() ||
        !fj.value("boundaries", nlohmann::json()).is_array() ||
        !fj.value("vocabulary", nlohmann::json()).is_array()) {
      return bad("a feature's entry is malformed");
    }
    f.mean = fj["mean"].get<double>();
    f.stddev = fj["stddev"].get<double>();
    for (const nlohmann::json& b : fj["boundaries"]) {
      if (!b.is_number()) return bad("a boundary is not a number");
      f.boundaries.push_back(b.get<double>());
    }
    for (const nlohmann::json& v : fj["vocabulary"]) {
      if (!v.is_number_unsigned()) return bad("a vocabulary value is not a 64-bit id");
      f.vocabulary.insert(v.get<uint64_t>());
    }
    s.features.push_back(std::move(f));
  }
  if (!j.value("classes", nlohmann::json()).is_array() ||
      !j.value("class_rates", nlohmann::json()).is_array() ||
      !j.value("label_mean", nlohmann::json()).is_number() ||
      !j.value("label_stddev", nlohmann::json()).is_number()) {
    return bad("the label's entries are malformed");
  }
  for (const nlohmann::json& c : j["classes"]) {
    if (!c.is_string()) return bad("a class is not a string");
    s.classes.push_back(c.get<std::string>());
  }
  for (const nlohmann::json& r : j["class_rates"]) {
    if (!r.is_number()) return bad("a class rate is not a number");
    s.class_rates.push_back(r.get<double>());
  }
  s.label_mean = j["label_mean"].get<double>();
  s.label_stddev = j["label_stddev"].get<double>();
  return s;
}

ExampleLayout::ExampleLayout(const Spec& spec) {
  const size_t n = spec.features.size();
  first_slot.assign(n, -1);
  slots.assign(n, 0);
  dense_index.assign(n, -1);
  for (size_t f = 0; f < n; ++f) {
    const FeatureSpec& fs = spec.features[f];
    if (fs.embedded()) {
      first_slot[f] = num_slots;
      slots[f] = fs.separator.empty() ? 1 : fs.max_values;
      num_slots += slots[f];
      embedded.push_back(static_cast<int>(f));
    } else {
      dense_index[f] = num_dense++;
      dense.push_back(static_cast<int>(f));
    }
  }
}

Transformer::Transformer(const Spec& spec, const Stats& stats, uint64_t seed)
    : spec_(spec), stats_(stats), seed_(seed), layout_(spec) {
  for (const FeatureSpec& f : spec.features) {
    salts_.push_back(FeatureSalt(f.name));
    std::vector<int> of;
    for (const std::string& name : f.of) of.push_back(spec.FeatureIndex(name));
    cross_of_.push_back(std::move(of));
  }
  for (const std::string& m : spec.missing_values) {
    if (m.empty()) continue;
    missing_.insert(m);
    longest_missing_ = std::max(longest_missing_, m.size());
    missing_first_[static_cast<uint8_t>(m[0])] = true;
  }
}

bool Transformer::IsMissing(absl::string_view field) const {
  if (field.empty()) return true;
  if (field.size() > longest_missing_ || !missing_first_[static_cast<uint8_t>(field[0])]) {
    return false;
  }
  return missing_.contains(field);
}

absl::StatusOr<ColumnMap> Transformer::MapColumns(absl::Span<const std::string> header,
                                                  const std::string& file,
                                                  bool with_label) const {
  ColumnMap m;
  m.num_fields = header.size();
  auto find = [&](const std::string& column) -> absl::StatusOr<int> {
    int at = -1;
    for (size_t i = 0; i < header.size(); ++i) {
      if (header[i] != column) continue;
      if (at >= 0) {
        return absl::InvalidArgumentError(absl::StrCat(file, ": the header names column '",
                                                       column, "' twice"));
      }
      at = static_cast<int>(i);
    }
    if (at < 0) {
      std::string names = absl::StrJoin(header.begin(), header.begin() + std::min<size_t>(
                                                                              header.size(), 40),
                                        ", ");
      if (header.size() > 40) absl::StrAppend(&names, ", ... (", header.size(), " in all)");
      return absl::InvalidArgumentError(absl::StrCat(file, ": no column '", column, "' (the spec ",
                                                     spec_.path, " needs it; columns: ", names,
                                                     ")"));
    }
    return at;
  };
  if (with_label) {
    ASSIGN_OR_RETURN(m.label, find(spec_.label.column));
  }
  if (with_label && !spec_.split.test_column.empty()) {
    ASSIGN_OR_RETURN(m.split, find(spec_.split.test_column));
  }
  for (const FeatureSpec& f : spec_.features) {
    int c = -1;
    if (f.type != FeatureType::kCross) {
      ASSIGN_OR_RETURN(c, find(f.column));
    }
    m.feature_column.push_back(c);
  }
  return m;
}

absl::StatusOr<float> Transformer::Label(absl::Span<const absl::string_view> fields,
                                         const ColumnMap& columns) const {
  const absl::string_view text = fields[columns.label];
  const LabelSpec& l = spec_.label;
  if (IsMissing(text)) return BadValue(l.column, text, "is a missing label");
  switch (l.task) {
    case Task::kRegression: {
      double v = 0;
      if (!ParseNumber(text, &v)) return BadValue(l.column, text, "is not a number");
      return static_cast<float>(v);
    }
    case Task::kMulticlass: {
      const std::vector<std::string>& classes = l.classes.empty() ? stats_.classes : l.classes;
      for (size_t c = 0; c < classes.size(); ++c) {
        if (classes[c] == text) return static_cast<float>(c);
      }
      return BadValue(l.column, text,
                      absl::StrCat("is not one of the ", classes.size(), " classes",
                                   l.classes.empty() ? " the training split has" : ""));
    }
    case Task::kBinary:
      break;
  }
  if (l.threshold.has_value()) {
    double v = 0;
    if (!ParseNumber(text, &v)) return BadValue(l.column, text, "is not a number");
    return v > *l.threshold ? 1.0f : 0.0f;
  }
  if (!l.positive.empty()) {
    for (const std::string& p : l.positive) {
      if (text == p) return 1.0f;
    }
    for (const std::string& n : l.negative) {
      if (text == n) return 0.0f;
    }
    return BadValue(l.column, text,
                    absl::StrCat("is neither positive (", absl::StrJoin(l.positive, ", "),
                                 ") nor negative (", absl::StrJoin(l.negative, ", "), ")"));
  }
  const std::string lower = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  if (lower == "1" || lower == "true" || lower == "yes" || lower == "t" || lower == "y") return 1.0f;
  if (lower == "0" || lower == "false" || lower == "no" || lower == "f" || lower == "n") return 0.0f;
  double v = 0;
  if (ParseNumber(text, &v) && (v == 0 || v == 1)) return static_cast<float>(v);
  return BadValue(l.column, text,
                  "is not a binary label (0/1, true/false, yes/no; or give the spec's "
                  "label.positive and label.negative, or a threshold)");
}

bool Transformer::IsTestByColumn(absl::Span<const absl::string_view> fields,
                                 const ColumnMap& columns) const {
  return columns.split >= 0 && static_cast<size_t>(columns.split) < fields.size() &&
         fields[columns.split] >= spec_.split.test_at_least;
}

absl::StatusOr<uint64_t> Transformer::RawValue(int f, absl::string_view field) const {
  return Value(f, field, -1, nullptr);
}

absl::StatusOr<uint64_t> Transformer::Value(int f, absl::string_view field, int column,
                                            DateCache* dates) const {
  const FeatureSpec& fs = spec_.features[f];
  if (IsMissing(field)) return kMissingValue;
  switch (fs.type) {
    case FeatureType::kCategorical:
      return TextValue(field);
    case FeatureType::kDatetime: {
      CivilTime parsed;
      const CivilTime* t = &parsed;
      bool ok;
      if (dates != nullptr && dates->column == column) {
        ok = dates->ok;
        t = &dates->time;
      } else {
        ok = ParseCivilTime(field, &parsed);
        if (dates != nullptr) *dates = DateCache{column, ok, parsed};
      }
      if (!ok) return BadValue(fs.column, field, "is not a date (YYYY-MM-DD[ HH:MM[:SS]])");
      return IntValue(DatePartValue(*t, fs.part, fs.slot_minutes));
    }
    case FeatureType::kNumeric: {
      double x = 0;
      if (!ParseNumber(field, &x)) return BadValue(fs.column, field, "is not a number");
      return IntValue(Bucketize(x, stats_.features[f].boundaries));
    }
    case FeatureType::kCross:
      break;
  }
  return absl::InternalError("RawValue of a cross");
}

absl::Status Transformer::Transform(absl::Span<const absl::string_view> fields,
                                    const ColumnMap& columns, bool training, uint64_t row_hash,
                                    ExampleRef out) const {
  if (columns.label >= 0) {
    ASSIGN_OR_RETURN(*out.label, Label(fields, columns));
  } else {
    *out.label = 0;  // serving: no label
  }
  const size_t n = spec_.features.size();
  absl::InlinedVector<uint64_t, 32> value(n, 0);
  DateCache dates;
  for (size_t f = 0; f < n; ++f) {
    const FeatureSpec& fs = spec_.features[f];
    if (fs.type == FeatureType::kCross) continue;
    const absl::string_view field = fields[columns.feature_column[f]];
    if (!fs.embedded()) {
      float x = 0;
      if (!IsMissing(field)) {
        double v = 0;
        if (!ParseNumber(field, &v)) return BadValue(fs.column, field, "is not a number");
        if (fs.transform == NumericTransform::kStandardize) {
          const FeatureStats& st = stats_.features[f];
          v = (v - st.mean) / st.stddev;
        }
        x = static_cast<float>(v);
      }
      out.dense[layout_.dense_index[f]] = x;
      continue;
    }
    int64_t* keys = out.keys + layout_.first_slot[f];
    if (!fs.separator.empty()) {
      int k = 0;
      if (IsMissing(field)) {
        keys[k++] = FeatureKey(salts_[f], kMissingValue);
      } else {
        size_t start = 0;
        while (start <= field.size() && k < fs.max_values) {
          size_t end = field.find(fs.separator, start);
          if (end == absl::string_view::npos) end = field.size();
          const absl::string_view piece = field.substr(start, end - start);
          if (!piece.empty()) keys[k++] = FeatureKey(salts_[f], TextValue(piece));
          start = end + fs.separator.size();
        }
      }
      for (; k < fs.max_values; ++k) keys[k] = kNoKey;
      continue;
    }
    ASSIGN_OR_RETURN(uint64_t v,
                     Value(static_cast<int>(f), field, columns.feature_column[f], &dates));
    if (fs.unknown_fraction > 0) {
      if (training) {
        if (UnitOf(MixKey(static_cast<int64_t>(row_hash ^ salts_[f] ^ kUnknownSalt))) <
            fs.unknown_fraction) {
          v = kUnknownValue;
        }
      } else if (!stats_.features[f].vocabulary.contains(v)) {
        v = kUnknownValue;
      }
    }
    value[f] = v;
    keys[0] = FeatureKey(salts_[f], v);
  }
  for (size_t f = 0; f < n; ++f) {
    const FeatureSpec& fs = spec_.features[f];
    if (fs.type != FeatureType::kCross) continue;
    uint64_t h = salts_[f];
    for (int c : cross_of_[f]) h = MixKey(static_cast<int64_t>(h ^ value[c]));
    out.keys[layout_.first_slot[f]] = FeatureKey(salts_[f], h);
  }
  return absl::OkStatus();
}

}  // namespace tabular
}  // namespace pstrain
