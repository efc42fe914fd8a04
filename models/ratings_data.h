// Ratings data for the matrix-factorization model: read from any CSV by column names (plain or gzip,
// quoted fields as R and spreadsheets write them), and split at random by rating with a fixed seed:
// 20% test, then 10% of the rest for validation (or the validation ratings of another file), the
// remainder trains. Each rating carries its user's and item's raw id as a
// 64-bit key (KeyOfString of the id's text: a dynamic table's key, the same in any file) and a
// dense index (ids numbered in order of appearance: a fixed table's row, and the host-side
// bookkeeping's). The same inputs give the same result in every process (the coordinator and each
// worker load it themselves).
#ifndef PSTRAIN_MODELS_RATINGS_DATA_H_
#define PSTRAIN_MODELS_RATINGS_DATA_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pstrain {

struct RatingsOptions {
  // The CSV file. Required.
  std::string path;
  // Column names. Defaults: MovieLens's "userId", "movieId", "rating".
  std::string user_col = "userId";
  std::string item_col = "movieId";
  std::string rating_col = "rating";
  // Fraction of ratings held out for testing, chosen by a hash of (seed, row). Default 0.2.
  double test_fraction = 0.2;
  // Fraction of the other ratings held out for validation, by another hash of (seed, row).
  // Default 0.1; 0: none. Ignored when validation_path is set: every rating of that file (with the
  // same columns) validates.
  double validation_fraction = 0.1;
  std::string validation_path;
  // Default 1.
  uint64_t seed = 1;
};

struct Ratings {
  std::vector<int32_t> user;  // dense index in [0, num_users)
  std::vector<int32_t> item;  // dense index in [0, num_items)
  std::vector<int64_t> user_key;  // KeyOfString(the user id's text)
  std::vector<int64_t> item_key;
  std::vector<float> rating;
  size_t size() const { return rating.size(); }
};

struct RatingsData {
  Ratings train;
  Ratings test;              // only rows whose user and item both appear in train
  Ratings validation;        // likewise
  int64_t num_users = 0;     // distinct users in the file(s)
  int64_t num_items = 0;
  int64_t test_excluded = 0; // held-out rows dropped: their user or item is not in train
  int64_t validation_excluded = 0;
  double train_mean = 0;     // mean training rating
  float min_rating = 0;      // the training ratings' range (predictions are clipped to it)
  float max_rating = 0;
};

// Errors: kNotFound (no file), kInvalidArgument (a missing column, a bad value, no rows, a
// test_fraction or validation_fraction outside [0, 1)), each naming the file.
absl::StatusOr<RatingsData> LoadRatings(const RatingsOptions& options);

// User and item biases fitted by alternating regularized least squares around the training mean
// (the classic "baseline predictor"): r ~ mean + b_user + b_item.
struct BiasBaseline {
  std::vector<double> user_bias, item_bias;
  double mean = 0;
  double Predict(int32_t user, int32_t item) const {
    return mean + user_bias[user] + item_bias[item];
  }
};
BiasBaseline FitBiasBaseline(const RatingsData& data, double user_reg = 15, double item_reg = 10,
                             int iterations = 10);

// Root mean squared error of `predict` over `ratings` (predictions clipped to [lo, hi]).
template <typename Predict>
double Rmse(const Ratings& ratings, Predict predict, double lo, double hi);

}  // namespace pstrain

#include <algorithm>
#include <cmath>

namespace pstrain {
template <typename Predict>
double Rmse(const Ratings& ratings, Predict predict, double lo, double hi) {
  double sse = 0;
  for (size_t i = 0; i < ratings.size(); ++i) {
    const double p = std::clamp<double>(predict(ratings.user[i], ratings.item[i]), lo, hi);
    sse += (p - ratings.rating[i]) * (p - ratings.rating[i]);
  }
  return ratings.size() == 0 ? 0 : std::sqrt(sse / static_cast<double>(ratings.size()));
}
}  // namespace pstrain

#endif  // PSTRAIN_MODELS_RATINGS_DATA_H_
