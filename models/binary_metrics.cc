#include "models/binary_metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

namespace pstrain {

double BinaryAuc(absl::Span<const float> scores, absl::Span<const float> labels) {
  const size_t n = std::min(scores.size(), labels.size());
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return scores[a] < scores[b]; });
  // Sum of the positives' ranks (1-based), ties given their group's mean rank.
  double positive_rank_sum = 0;
  int64_t positives = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    int64_t group_positives = 0;
    while (j < n && scores[order[j]] == scores[order[i]]) {
      group_positives += labels[order[j++]] > 0.5f;
    }
    const double mean_rank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2;
    positive_rank_sum += mean_rank * static_cast<double>(group_positives);
    positives += group_positives;
    i = j;
  }
  const int64_t negatives = static_cast<int64_t>(n) - positives;
  if (positives == 0 || negatives == 0) return 0.5;
  const double p = static_cast<double>(positives);
  return (positive_rank_sum - p * (p + 1) / 2) / (p * static_cast<double>(negatives));
}

double BinaryLogLoss(absl::Span<const float> logits, absl::Span<const float> labels) {
  const size_t n = std::min(logits.size(), labels.size());
  if (n == 0) return 0;
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    const double x = logits[i], y = labels[i];
    sum += std::max(x, 0.0) - x * y + std::log1p(std::exp(-std::abs(x)));
  }
  return sum / static_cast<double>(n);
}

}  // namespace pstrain
