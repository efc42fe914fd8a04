#include "models/ratings_data.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "partitioners/key_routing.h"
#include "models/data/csv_reader.h"

namespace pstrain {
namespace {

// A uniform double in [0, 1) from (seed, row): splitmix64.
double HashUnit(uint64_t seed, uint64_t row) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + row + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);
}

}  // namespace

absl::StatusOr<RatingsData> LoadRatings(const RatingsOptions& options) {
  if (!(options.test_fraction >= 0 && options.test_fraction < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("test_fraction ", options.test_fraction, " is outside [0, 1)"));
  }
  if (!(options.validation_fraction >= 0 && options.validation_fraction < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "validation_fraction ", options.validation_fraction, " is outside [0, 1)"));
  }
  std::vector<int32_t> users, items;
  std::vector<std::string> user_vocab, item_vocab;
  std::vector<float> ratings;
  ASSIGN_OR_RETURN(int64_t rows,
                   data::ReadCsv(options.path,
                                 {data::CsvColumn::Category(options.user_col, &users, &user_vocab),
                                  data::CsvColumn::Category(options.item_col, &items, &item_vocab),
                                  data::CsvColumn::Float(options.rating_col, &ratings)}));
  if (rows == 0) return absl::InvalidArgumentError(absl::StrCat(options.path, ": no ratings"));
  // Another file's ratings validate: read with the same vocabularies (its ids get the same
  // indices; ids only it has are numbered after the training file's).
  int64_t validation_rows = 0;
  if (!options.validation_path.empty()) {
    ASSIGN_OR_RETURN(
        validation_rows,
        data::ReadCsv(options.validation_path,
                      {data::CsvColumn::Category(options.user_col, &users, &user_vocab),
                       data::CsvColumn::Category(options.item_col, &items, &item_vocab),
                       data::CsvColumn::Float(options.rating_col, &ratings)}));
    if (validation_rows == 0) {
      return absl::InvalidArgumentError(absl::StrCat(options.validation_path, ": no ratings"));
    }
  }

  RatingsData out;
  out.num_users = static_cast<int64_t>(user_vocab.size());
  out.num_items = static_cast<int64_t>(item_vocab.size());
  std::vector<int64_t> user_key(user_vocab.size()), item_key(item_vocab.size());
  for (size_t i = 0; i < user_vocab.size(); ++i) user_key[i] = KeyOfString(user_vocab[i]);
  for (size_t i = 0; i < item_vocab.size(); ++i) item_key[i] = KeyOfString(item_vocab[i]);
  auto add = [&](Ratings* to, int64_t r) {
    to->user.push_back(users[r]);
    to->item.push_back(items[r]);
    to->user_key.push_back(user_key[users[r]]);
    to->item_key.push_back(item_key[items[r]]);
    to->rating.push_back(ratings[r]);
  };
  // 0: train, 1: test, 2: validation.
  std::vector<uint8_t> split(rows + validation_rows, 2);
  std::vector<bool> user_seen(out.num_users), item_seen(out.num_items);
  double sum = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (HashUnit(options.seed, static_cast<uint64_t>(r)) < options.test_fraction) {
      split[r] = 1;
    } else if (options.validation_path.empty() &&
               HashUnit(options.seed ^ 0x5EED0F7A11DA7E00ull, static_cast<uint64_t>(r)) <
                   options.validation_fraction) {
      split[r] = 2;
    } else {
      split[r] = 0;
    }
    if (split[r] != 0) continue;
    add(&out.train, r);
    user_seen[users[r]] = true;
    item_seen[items[r]] = true;
    sum += ratings[r];
  }
  if (out.train.size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(options.path, ": no training ratings"));
  }
  out.train_mean = sum / static_cast<double>(out.train.size());
  const auto [lo, hi] = std::minmax_element(out.train.rating.begin(), out.train.rating.end());
  out.min_rating = *lo;
  out.max_rating = *hi;
  for (int64_t r = 0; r < rows + validation_rows; ++r) {
    if (split[r] == 0) continue;
    const bool test = split[r] == 1;
    if (!user_seen[users[r]] || !item_seen[items[r]]) {
      ++(test ? out.test_excluded : out.validation_excluded);
      continue;
    }
    add(test ? &out.test : &out.validation, r);
  }
  return out;
}

BiasBaseline FitBiasBaseline(const RatingsData& data, double user_reg, double item_reg,
                             int iterations) {
  BiasBaseline b;
  b.mean = data.train_mean;
  b.user_bias.assign(data.num_users, 0);
  b.item_bias.assign(data.num_items, 0);
  std::vector<double> sum_u(data.num_users), sum_i(data.num_items);
  std::vector<int64_t> n_u(data.num_users), n_i(data.num_items);
  for (size_t k = 0; k < data.train.size(); ++k) {
    ++n_u[data.train.user[k]];
    ++n_i[data.train.item[k]];
  }
  const Ratings& t = data.train;
  for (int it = 0; it < iterations; ++it) {
    std::fill(sum_i.begin(), sum_i.end(), 0);
    for (size_t k = 0; k < t.size(); ++k) {
      sum_i[t.item[k]] += t.rating[k] - b.mean - b.user_bias[t.user[k]];
    }
    for (int64_t i = 0; i < data.num_items; ++i) b.item_bias[i] = sum_i[i] / (item_reg + n_i[i]);
    std::fill(sum_u.begin(), sum_u.end(), 0);
    for (size_t k = 0; k < t.size(); ++k) {
      sum_u[t.user[k]] += t.rating[k] - b.mean - b.item_bias[t.item[k]];
    }
    for (int64_t u = 0; u < data.num_users; ++u) b.user_bias[u] = sum_u[u] / (user_reg + n_u[u]);
  }
  return b;
}

}  // namespace pstrain
