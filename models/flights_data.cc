#include "models/flights_data.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "models/data/csv_reader.h"

namespace pstrain {
namespace {

// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil).
int64_t DaysFromCivil(int64_t y, int64_t m, int64_t d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

bool IsLeap(int64_t y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

// Parses `digits` decimal digits at text[at...]; false if any is not a digit.
bool Digits(absl::string_view text, size_t at, int digits, int* out) {
  int v = 0;
  for (int i = 0; i < digits; ++i) {
    const char c = text[at + i];
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *out = v;
  return true;
}

// Fills the time fields of `f` from "YYYY-MM-DD HH:MM"; false if the text is not such a date.
bool ParseDate(absl::string_view text, Flight* f) {
  int y, m, d, hh, mm;
  if (text.size() != 16 || text[4] != '-' || text[7] != '-' || text[10] != ' ' || text[13] != ':' ||
      !Digits(text, 0, 4, &y) || !Digits(text, 5, 2, &m) || !Digits(text, 8, 2, &d) ||
      !Digits(text, 11, 2, &hh) || !Digits(text, 14, 2, &mm)) {
    return false;
  }
  static constexpr int kDaysIn[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (m < 1 || m > 12 || d < 1 || d > kDaysIn[m - 1] + (m == 2 && IsLeap(y)) || hh > 23 ||
      mm > 59) {
    return false;
  }
  const int64_t days = DaysFromCivil(y, m, d);
  f->month = static_cast<uint8_t>(m);
  f->day_of_month = static_cast<uint8_t>(d);
  f->day_of_year = static_cast<uint16_t>(days - DaysFromCivil(y, 1, 1) + 1);
  f->weekday = static_cast<uint8_t>(((days + 3) % 7 + 7) % 7);  // 1970-01-01 was a Thursday (3)
  f->minute_of_day = static_cast<uint16_t>(hh * 60 + mm);
  return true;
}

// SplitMix64's finalizer: a bijective 64-bit mix.
inline uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A uniform double in [0, 1) fixed by `row`.
double RowUnit(uint64_t row) {
  return static_cast<double>(Mix(row + 0x2545F4914F6CDD1Dull) >> 11) * (1.0 / 9007199254740992.0);
}

// Indexed by FlightFeature.
constexpr const char* kFeatureNames[kNumFlightFeatures] = {
    "origin",          "destination",    "route",          "hour",
    "quarter_hour",    "weekday",        "day_of_year",    "day_of_month",
    "distance_bucket", "origin_x_hour",  "destination_x_hour",
    "weekday_x_hour",  "route_x_hour",   "origin_x_weekday",
};

}  // namespace

absl::StatusOr<Flight> ParseFlight(absl::string_view date, absl::string_view distance,
                                   absl::string_view origin, absl::string_view destination) {
  Flight f;
  if (!ParseDate(date, &f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("column date: \"", date, "\" is not YYYY-MM-DD HH:MM"));
  }
  int64_t miles = 0;
  if (!absl::SimpleAtoi(distance, &miles) || miles < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("column distance: \"", distance, "\" is not a whole number of miles >= 0"));
  }
  if (origin.empty() || destination.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("column ", origin.empty() ? "origin" : "destination", ": empty airport code"));
  }
  f.distance = static_cast<uint16_t>(std::min<int64_t>(miles, 65535));
  f.origin = Fnv1a32(origin);
  f.destination = Fnv1a32(destination);
  return f;
}

uint32_t Fnv1a32(absl::string_view text) {
  uint32_t h = 2166136261u;
  for (char c : text) {
    h ^= static_cast<uint8_t>(c);
    h *= 16777619u;
  }
  return h;
}

const char* FlightFeatureName(int feature) {
  return feature >= 0 && feature < kNumFlightFeatures ? kFeatureNames[feature] : "unknown";
}

uint64_t FlightFeatureValue(const Flight& f, int feature) {
  const uint64_t hour = f.minute_of_day / 60;
  const uint64_t route = (uint64_t{f.origin} << 32) | f.destination;
  switch (feature) {
    case kOrigin:
      return f.origin;
    case kDestination:
      return f.destination;
    case kRoute:
      return route;
    case kHour:
      return hour;
    case kQuarterHour:
      return f.minute_of_day / 15;
    case kWeekday:
      return f.weekday;
    case kDayOfYear:
      return f.day_known ? f.day_of_year : 0;
    case kDayOfMonth:
      return f.day_of_month;
    case kDistanceBucket:
      return static_cast<uint64_t>(std::lround(4 * std::log2(1.0 + f.distance)));
    case kOriginHour:
      return (uint64_t{f.origin} << 8) | hour;
    case kDestinationHour:
      return (uint64_t{f.destination} << 8) | hour;
    case kWeekdayHour:
      return (uint64_t{f.weekday} << 8) | hour;
    case kRouteHour:
      return Mix(route) ^ hour;
    case kOriginWeekday:
      return (uint64_t{f.origin} << 8) | f.weekday;
    default:
      return 0;
  }
}

int64_t FeatureKey(int feature, uint64_t value) {
  return static_cast<int64_t>(Mix(Mix(static_cast<uint64_t>(feature) + 0x9E3779B97F4A7C15ull) ^ value));
}

int64_t HashFeature(int feature, uint64_t value, int64_t hash_rows) {
  const uint64_t h = static_cast<uint64_t>(FeatureKey(feature, value));
  // Lemire's multiply-shift: maps h onto [0, hash_rows) without a division.
  return static_cast<int64_t>(
      (static_cast<unsigned __int128>(h) * static_cast<uint64_t>(hash_rows)) >> 64);
}

absl::StatusOr<std::vector<int>> ParseFlightFeatures(absl::string_view names) {
  std::vector<int> out;
  if (names == "all") {
    for (int k = 0; k < kNumFlightFeatures; ++k) out.push_back(k);
    return out;
  }
  for (absl::string_view name : absl::StrSplit(names, absl::ByAnyChar(",+"))) {
    int k = 0;
    while (k < kNumFlightFeatures && name != kFeatureNames[k]) ++k;
    if (k == kNumFlightFeatures) {
      std::vector<int> all(kNumFlightFeatures);
      for (int j = 0; j < kNumFlightFeatures; ++j) all[j] = j;
      return absl::InvalidArgumentError(absl::StrCat("flights: no feature \"", name,
                                                     "\" (features: ", FlightFeatureNames(all),
                                                     ")"));
    }
    if (std::find(out.begin(), out.end(), k) != out.end()) {
      return absl::InvalidArgumentError(absl::StrCat("flights: feature ", name, " named twice"));
    }
    out.push_back(k);
  }
  return out;
}

std::string FlightFeatureNames(absl::Span<const int> features) {
  std::vector<std::string> names;
  for (int k : features) names.push_back(FlightFeatureName(k));
  return absl::StrJoin(names, ",");
}

void HashFlights(absl::Span<const Flight> flights, absl::Span<const int64_t> rows,
                 absl::Span<const int> features, int64_t hash_rows, int64_t* out) {
  const size_t nf = features.size();
  for (size_t i = 0; i < rows.size(); ++i) {
    const Flight& f = flights[rows[i]];
    int64_t* o = out + i * nf;
    for (size_t j = 0; j < nf; ++j) {
      o[j] = HashFeature(features[j], FlightFeatureValue(f, features[j]), hash_rows);
    }
  }
}

void KeyFlights(absl::Span<const Flight> flights, absl::Span<const int64_t> rows,
                absl::Span<const int> features, int64_t* out) {
  const size_t nf = features.size();
  for (size_t i = 0; i < rows.size(); ++i) {
    const Flight& f = flights[rows[i]];
    int64_t* o = out + i * nf;
    for (size_t j = 0; j < nf; ++j) o[j] = FeatureKey(features[j], FlightFeatureValue(f, features[j]));
  }
}

namespace {

// Every flight of `path` (labelled, day known), in file order.
absl::StatusOr<std::vector<Flight>> ReadFlights(const std::string& path,
                                                const FlightsOptions& options,
                                                int64_t* airports) {
  std::vector<int32_t> dates, origins, destinations, delays, distances;
  std::vector<std::string> date_vocab, airport_vocab;
  data::CsvOptions csv;
  csv.max_rows = options.max_rows;
  ASSIGN_OR_RETURN(
      const int64_t rows,
      data::ReadCsv(path,
                    {data::CsvColumn::Category("date", &dates, &date_vocab),
                     data::CsvColumn::Int32("delay", &delays),
                     data::CsvColumn::Int32("distance", &distances),
                     data::CsvColumn::Category("origin", &origins, &airport_vocab),
                     data::CsvColumn::Category("destination", &destinations, &airport_vocab)},
                    csv));
  // Each distinct date-time is parsed once (the 3M flights have ~200K of them).
  std::vector<Flight> times(date_vocab.size());
  for (size_t i = 0; i < date_vocab.size(); ++i) {
    if (!ParseDate(date_vocab[i], &times[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": date \"", date_vocab[i], "\" is not YYYY-MM-DD HH:MM"));
    }
  }
  std::vector<uint32_t> airport_hash(airport_vocab.size());
  for (size_t i = 0; i < airport_vocab.size(); ++i) airport_hash[i] = Fnv1a32(airport_vocab[i]);
  if (airports != nullptr) *airports = static_cast<int64_t>(airport_vocab.size());
  std::vector<Flight> out;
  out.reserve(rows);
  for (int64_t r = 0; r < rows; ++r) {
    if (distances[r] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": line ", r + 2, ": negative distance ", distances[r]));
    }
    Flight f = times[dates[r]];
    f.origin = airport_hash[origins[r]];
    f.destination = airport_hash[destinations[r]];
    f.distance = static_cast<uint16_t>(std::min(distances[r], 65535));
    f.label = delays[r] > options.delay_threshold ? 1 : 0;
    out.push_back(f);
  }
  return out;
}

// A second uniform hash of the row, independent of RowUnit's: the validation split.
double ValidationUnit(uint64_t row) { return RowUnit(row ^ 0x7A11DA7E5EED0F00ull); }

}  // namespace

absl::StatusOr<FlightsData> LoadFlights(const FlightsOptions& options) {
  if (!(options.unknown_day_fraction >= 0 && options.unknown_day_fraction <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "flights: unknown_day_fraction ", options.unknown_day_fraction, " is outside [0, 1]"));
  }
  if (options.test_from_month < 2 || options.test_from_month > 12) {
    return absl::InvalidArgumentError(absl::StrCat(
        "flights: test_from_month ", options.test_from_month, " is outside [2, 12]"));
  }
  if (!(options.validation_fraction >= 0 && options.validation_fraction < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "flights: validation_fraction ", options.validation_fraction, " is outside [0, 1)"));
  }
  FlightsData out;
  ASSIGN_OR_RETURN(std::vector<Flight> flights, ReadFlights(options.path, options, &out.airports));
  const bool split_validation = options.validation_path.empty();
  int64_t train_pos = 0, test_pos = 0;
  for (size_t r = 0; r < flights.size(); ++r) {
    Flight f = flights[r];
    if (f.month >= options.test_from_month) {
      out.test.push_back(f);
      test_pos += f.label;
    } else if (split_validation && ValidationUnit(r) < options.validation_fraction) {
      out.validation.push_back(f);
    } else {
      f.day_known = RowUnit(static_cast<uint64_t>(r)) >= options.unknown_day_fraction;
      out.train.push_back(f);
      train_pos += f.label;
    }
  }
  if (out.train.empty() || out.test.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(options.path, ": ", out.train.size(), " training and ", out.test.size(),
                     " test flights (test from month ", options.test_from_month,
                     "); both must be non-empty"));
  }
  if (!split_validation) {
    ASSIGN_OR_RETURN(out.validation, ReadFlights(options.validation_path, options, nullptr));
    if (out.validation.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(options.validation_path, ": no validation flights"));
    }
  }
  // Days no training flight has are unknown to the model (see unknown_day_fraction).
  std::vector<bool> train_days(367);
  for (const Flight& f : out.train) train_days[f.day_of_year] = true;
  for (Flight& f : out.test) f.day_known = train_days[f.day_of_year];
  for (Flight& f : out.validation) f.day_known = train_days[f.day_of_year];
  out.train_positive_rate = static_cast<double>(train_pos) / static_cast<double>(out.train.size());
  out.test_positive_rate = static_cast<double>(test_pos) / static_cast<double>(out.test.size());
  return out;
}

}  // namespace pstrain
