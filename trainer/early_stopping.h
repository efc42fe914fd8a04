// Watching a validation metric, as Keras's EarlyStopping and ModelCheckpoint(save_best_only) do:
// each validation either improves on the best so far (by more than min_delta) or counts towards
// `patience`; after `patience` validations in a row without an improvement, training stops.
// Whether higher is better is inferred from the metric's name as Keras's mode="auto" does: names
// ending in "auc", "acc" or "accuracy" are maximized, every other metric (losses, RMSE) minimized.
//
// The watcher's state (best value and step, validations since) goes into each checkpoint, so a
// resumed job keeps counting where it was.
#ifndef PSTRAIN_TRAINER_EARLY_STOPPING_H_
#define PSTRAIN_TRAINER_EARLY_STOPPING_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace pstrain {

struct EarlyStoppingOptions {
  // The metric watched ("val_rmse"). Required.
  std::string monitor;
  // An improvement must beat the best by more than this (>= 0). Default 0.
  double min_delta = 0;
  // Stop after this many validations in a row without an improvement. Default 0: never stop (the
  // best is still tracked).
  int patience = 0;
};

// True for metrics where higher is better (Keras's mode="auto").
bool HigherIsBetter(const std::string& metric);

class EarlyStopping {
 public:
  // Errors: kInvalidArgument for an empty monitor, a negative min_delta or patience.
  static absl::StatusOr<EarlyStopping> Create(const EarlyStoppingOptions& options);

  struct Verdict {
    bool improved = false;  // the new best
    bool stop = false;      // patience ran out
  };
  // A validation at `step` gave `value` (a NaN never improves).
  Verdict Observe(int64_t step, double value);

  bool has_best() const { return best_step_ >= 0; }
  double best() const { return best_; }
  int64_t best_step() const { return best_step_; }
  int wait() const { return wait_; }
  const EarlyStoppingOptions& options() const { return options_; }
  bool higher_is_better() const { return higher_; }

  // The state as checkpoint entries ("trainer/best_value", ...), and back. Restore ignores a state
  // saved for another monitor (the best of another metric means nothing here).
  std::map<std::string, std::string> State() const;
  void Restore(const std::map<std::string, std::string>& state);

 private:
  explicit EarlyStopping(const EarlyStoppingOptions& options);

  EarlyStoppingOptions options_;
  bool higher_ = false;
  double best_ = 0;
  int64_t best_step_ = -1;
  int wait_ = 0;
};

}  // namespace pstrain

#endif  // PSTRAIN_TRAINER_EARLY_STOPPING_H_
