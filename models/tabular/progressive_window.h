// Progressive validation, as online learners report it: every example is scored by the model as it
// is before that example is trained on, so the stream itself is the held-out data (McMahan et al.,
// "Ad Click Prediction: a View from the Trenches"). The window holds the predictions and labels of
// the last `window` examples trained (a job that follows its data: data_follower.h) and gives
// their metrics. Thread-safe.
#ifndef PSTRAIN_MODELS_TABULAR_PROGRESSIVE_WINDOW_H_
#define PSTRAIN_MODELS_TABULAR_PROGRESSIVE_WINDOW_H_

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "models/tabular/feature_spec.h"

namespace pstrain {
namespace tabular {

class ProgressiveWindow {
 public:
  ProgressiveWindow(Task task, int64_t window) : task_(task), window_(window) {}

  // A trained batch's predictions, made before it was trained on (binary: the positive class's
  // probability; regression: the value; multiclass: the class), and its labels (as many; a batch
  // of other sizes is ignored).
  void Add(absl::Span<const float> predictions, absl::Span<const float> labels);

  // Over the window: progressive_auc and progressive_logloss (binary), progressive_rmse
  // (regression), progressive_accuracy (multiclass), and progressive_examples. Empty before any.
  std::map<std::string, double> Metrics() const;

 private:
  struct Part {
    std::vector<float> predictions, labels;
  };
  const Task task_;
  const int64_t window_;
  mutable absl::Mutex mu_;
  std::deque<Part> parts_ ABSL_GUARDED_BY(mu_);
  int64_t examples_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tabular
}  // namespace pstrain

#endif  // PSTRAIN_MODELS_TABULAR_PROGRESSIVE_WINDOW_H_
