// Flights data for the delay ("click-through") model: each flight's departure time, route and
// distance, with the label "arrived more than 15 minutes late", and the hashed categorical features
// the model looks up in one large embedding table.
//
// The CSV has the columns date (`YYYY-MM-DD HH:MM`, the actual departure), delay (arrival delay in
// minutes), distance (miles), origin and destination (airport codes); others are ignored. Flights
// of months before `test_from_month` train, the rest test (Jan-May / June for data/flights). The
// same file gives the same result in every process: the coordinator and each worker load it
// themselves.
//
// Features are hashed, not indexed: feature f of a flight with value v goes to table row
// Hash(f, v) mod hash_rows, where Hash depends only on (f, v) (airport codes are hashed from their
// text, not their order in the file), so any process, any file and any table size agree on it.
#ifndef PSTRAIN_MODELS_FLIGHTS_DATA_H_
#define PSTRAIN_MODELS_FLIGHTS_DATA_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace pstrain {

struct FlightsOptions {
  // The CSV file. Required.
  std::string path;
  // Flights departing in this month (1-12) or later test; earlier ones train. Default 6 (June).
  int test_from_month = 6;
  // The label is delay > delay_threshold. Default 15 minutes.
  int delay_threshold = 15;
  // Read at most this many records; -1 (the default) reads them all.
  int64_t max_rows = -1;
  // The fraction of training flights held out for validation, picked by a hash of their row.
  // Default 0.1; 0: none. Ignored when validation_path is set: every flight of that file (same
  // columns) validates.
  double validation_fraction = 0.1;
  std::string validation_path;
  // The fraction of training flights (picked by a hash of their row) whose day of year the
  // features treat as unknown, as they do for every test flight on a day no training flight has:
  // so the model learns what an unknown day means instead of meeting it first in the test.
  // Default 1/16.
  double unknown_day_fraction = 1.0 / 16;
};

// One flight, compact (the 3M-row file is ~60 MB of these).
struct Flight {
  uint32_t origin = 0;         // FNV-1a of the airport code's text
  uint32_t destination = 0;
  uint16_t minute_of_day = 0;  // departure, 0..1439
  uint16_t day_of_year = 0;    // 1..366
  uint16_t distance = 0;       // miles, clamped to 65535
  uint8_t weekday = 0;         // 0 = Monday .. 6 = Sunday
  uint8_t day_of_month = 0;    // 1..31
  uint8_t month = 0;           // 1..12
  uint8_t label = 0;           // 1: delayed more than the threshold
  uint8_t day_known = 1;       // 0: the day_of_year feature is "unknown" (see FlightsOptions)
};

struct FlightsData {
  std::vector<Flight> train;
  std::vector<Flight> test;
  std::vector<Flight> validation;
  int64_t airports = 0;              // distinct codes among origins and destinations
  double train_positive_rate = 0;
  double test_positive_rate = 0;
};

// Errors: kNotFound (no file), kInvalidArgument (a missing column, a bad value or date, no training
// or no test flights, test_from_month outside [2, 12], unknown_day_fraction outside [0, 1],
// validation_fraction outside [0, 1)), each naming the file.
absl::StatusOr<FlightsData> LoadFlights(const FlightsOptions& options);

// The features, in the order their rows are laid out per example.
enum FlightFeature : int {
  kOrigin = 0,
  kDestination,
  kRoute,             // origin x destination
  kHour,              // departure hour
  kQuarterHour,       // departure time in 15-minute slots (96)
  kWeekday,
  kDayOfYear,         // 0 when the day is unknown (see FlightsOptions::unknown_day_fraction)
  kDayOfMonth,
  kDistanceBucket,    // round(4 log2(1 + miles)): ~19% wide buckets
  kOriginHour,        // origin x hour
  kDestinationHour,   // destination x hour
  kWeekdayHour,       // weekday x hour
  kRouteHour,         // origin x destination x hour
  kOriginWeekday,     // origin x weekday
  kNumFlightFeatures,
};

// "origin", "origin_x_hour", ...
const char* FlightFeatureName(int feature);

// The value feature `feature` takes for `flight` (before hashing).
uint64_t FlightFeatureValue(const Flight& flight, int feature);

// The table row of (feature, value): a 64-bit mix of both, mapped onto [0, hash_rows).
// hash_rows >= 1.
int64_t HashFeature(int feature, uint64_t value, int64_t hash_rows);
// The feature value's 64-bit key (a dynamic table's key, no modulo): the hash HashFeature maps
// onto [0, hash_rows).
int64_t FeatureKey(int feature, uint64_t value);

// The features named in `names` ("origin,hour,route_x_hour" or "origin+hour+route_x_hour": the
// coordinator's --model_opt splits on commas), in that order; "all" means every feature in enum
// order. Errors: kInvalidArgument naming an unknown (listing the known ones) or
// repeated name, or an empty list.
absl::StatusOr<std::vector<int>> ParseFlightFeatures(absl::string_view names);
// The inverse: "origin,hour,route_x_hour".
std::string FlightFeatureNames(absl::Span<const int> features);

// The rows of `features` for each flight: out[i * features.size() + j] is feature features[j] of
// flights[rows[i]]. `out` must have room for rows.size() * features.size() ids.
void HashFlights(absl::Span<const Flight> flights, absl::Span<const int64_t> rows,
                 absl::Span<const int> features, int64_t hash_rows, int64_t* out);
// The same with 64-bit keys (FeatureKey) instead of hashed rows.
void KeyFlights(absl::Span<const Flight> flights, absl::Span<const int64_t> rows,
                absl::Span<const int> features, int64_t* out);

// One flight from its fields as the CSV has them (the label is not read: serving). Errors:
// kInvalidArgument naming the column and value (a date not "YYYY-MM-DD HH:MM", a distance that is
// not a whole number of miles >= 0, an empty airport code).
absl::StatusOr<Flight> ParseFlight(absl::string_view date, absl::string_view distance,
                                   absl::string_view origin, absl::string_view destination);

// FNV-1a (32-bit) of `text`: how airport codes become values.
uint32_t Fnv1a32(absl::string_view text);

}  // namespace pstrain

#endif  // PSTRAIN_MODELS_FLIGHTS_DATA_H_
