// Test helper: a small tabular model (models/tabular) trained on a fresh in-process cluster and
// exported (serving/export.h), as a model directory for the prediction server. Test-only.
//
//   auto trained = TrainSmallTabular(dir);                 // dir/train.csv, dir/test.csv, dir/ckpt
//   ExportSmallTabular(*trained, base + "/1");             // a version directory
//   trained->test                                          // the test rows, as requests carry them
#ifndef PSTRAIN_TESTS_PREDICTION_TABULAR_EXPORT_H_
#define PSTRAIN_TESTS_PREDICTION_TABULAR_EXPORT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "models/serving_head.h"

namespace pstrain {

struct SmallTabularOptions {
  // Rows of the training and test files. Defaults 1000 and 64.
  int train_rows = 1000;
  int test_rows = 64;
  // Training epochs (batch 64, one worker, one ps). Default 1.
  int epochs = 1;
};

struct TrainedTabular {
  std::string checkpoint_dir;
  // The test file's header (city, tag, income, when, label) and rows.
  RawExamples test;
};

// Writes a noisy table under `dir` (buyers in Oslo and Rome 80%, elsewhere 20%; income helps a
// little; columns city, tag (categorical), income (numeric), when (a date: its month), label) and
// its feature spec, and trains the tabular model on it with checkpoints in dir/ckpt.
// Errors: the cluster's and the trainer's.
absl::StatusOr<TrainedTabular> TrainSmallTabular(const std::string& dir,
                                                 const SmallTabularOptions& options = {});

// Exports the trained model's last checkpoint into `out` (e.g. <base>/<version>), keeping only
// each table's `top_k` most frequent keys when top_k > 0 (a model that predicts differently).
// Errors: ExportModel's.
absl::Status ExportSmallTabular(const TrainedTabular& trained, const std::string& out,
                                int64_t top_k = 0);

}  // namespace pstrain

#endif  // PSTRAIN_TESTS_PREDICTION_TABULAR_EXPORT_H_
