// A Criteo-shaped synthetic click log whose every row's true click probability is known, so the
// best AUC any model can reach on its test file is known too (the AUC of the true probabilities).
//
// Columns, as Criteo's: `label`, `I1`..`I13` (counts: log-normal, some missing), `C1`..`C26`
// (ids: 8 hex digits, vocabularies from 3 to 1,000,000 values, drawn log-uniformly by rank, so
// a few values are common and most are rare; some missing). The true logit is a bias, a main
// effect per id (of a strength set per column; six columns are noise), effects of the counts (a
// few linear in log(1 + count), one bent), and pairwise effects a linear model on single features
// cannot learn: two crosses of small vocabularies, a rank-4 dot product of two id columns'
// latent vectors, and a product of two counts. Every number comes from the seed.
#ifndef PSTRAIN_BENCH_CLICK_LOG_H_
#define PSTRAIN_BENCH_CLICK_LOG_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace pstrain {

struct ClickLogOptions {
  int64_t train_rows = 1000000;  // rows of the training file
  int64_t test_rows = 200000;    // rows of the test file (same distribution)
  uint64_t seed = 1;             // the model of the world (effects) and the rows
};

struct ClickLog {
  std::string train_path, test_path;
  std::string spec_path;       // ClickLogSpec's text, written beside them
  int64_t train_rows = 0, test_rows = 0;
  double train_ctr = 0;        // positives / rows in the training file
  double best_test_auc = 0;    // the AUC of the true probabilities on the test file
  double best_test_logloss = 0;  // their log loss there
};

// Writes `dir`/click_train.csv, `dir`/click_test.csv and their feature spec `dir`/click_spec.json
// (ClickLogSpec; replacing them), making `dir` first if need be. Errors: kInternal naming a
// directory or file that can't be written.
absl::StatusOr<ClickLog> WriteClickLog(const std::string& dir, const ClickLogOptions& options);

// The feature spec (models/tabular) a user would write for it: the 13 counts bucketized by
// deciles, the 26 ids categorical, a wide & deep model; the test file as its test split.
std::string ClickLogSpec(const ClickLog& log);

}  // namespace pstrain

#endif  // PSTRAIN_BENCH_CLICK_LOG_H_
