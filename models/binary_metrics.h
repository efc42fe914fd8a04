// Metrics of a binary classifier over a whole evaluation set: the exact area under the ROC curve
// and the mean log loss, from logits (scores before the sigmoid) and 0/1 labels.
#ifndef PSTRAIN_MODELS_BINARY_METRICS_H_
#define PSTRAIN_MODELS_BINARY_METRICS_H_

#include "absl/types/span.h"

namespace pstrain {

// The probability that a random positive scores above a random negative (ties count one half):
// the Mann-Whitney statistic, computed exactly by sorting the scores (O(n log n)). Any monotone
// score works (logits or probabilities). 0.5 when either class is absent. Labels: > 0.5 positive.
// `scores` and `labels` must have the same size.
double BinaryAuc(absl::Span<const float> scores, absl::Span<const float> labels);

// Mean binary cross-entropy of sigmoid(logits) against `labels` (in [0, 1]), computed stably as
// max(x, 0) - x y + log1p(exp(-|x|)), summed in double. 0 for no examples.
double BinaryLogLoss(absl::Span<const float> logits, absl::Span<const float> labels);

}  // namespace pstrain

#endif  // PSTRAIN_MODELS_BINARY_METRICS_H_
