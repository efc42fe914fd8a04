#include "models/tabular/progressive_window.h"

#include <algorithm>
#include <cmath>

#include "models/binary_metrics.h"

namespace pstrain {
namespace tabular {

void ProgressiveWindow::Add(absl::Span<const float> predictions, absl::Span<const float> labels) {
  if (predictions.size() != labels.size() || predictions.empty()) return;
  absl::MutexLock lock(&mu_);
  parts_.push_back({std::vector<float>(predictions.begin(), predictions.end()),
                    std::vector<float>(labels.begin(), labels.end())});
  examples_ += static_cast<int64_t>(predictions.size());
  // Whole batches leave the window's far end while the rest still make up the window.
  while (!parts_.empty() &&
         examples_ - static_cast<int64_t>(parts_.front().labels.size()) >= window_) {
    examples_ -= static_cast<int64_t>(parts_.front().labels.size());
    parts_.pop_front();
  }
}

std::map<std::string, double> ProgressiveWindow::Metrics() const {
  std::vector<float> p, y;
  {
    absl::MutexLock lock(&mu_);
    p.reserve(static_cast<size_t>(examples_));
    y.reserve(static_cast<size_t>(examples_));
    for (const Part& part : parts_) {
      p.insert(p.end(), part.predictions.begin(), part.predictions.end());
      y.insert(y.end(), part.labels.begin(), part.labels.end());
    }
  }
  if (p.empty()) return {};
  const double n = static_cast<double>(p.size());
  std::map<std::string, double> m;
  m["progressive_examples"] = n;
  switch (task_) {
    case Task::kBinary: {
      m["progressive_auc"] = BinaryAuc(p, y);
      double loss = 0;
      for (size_t i = 0; i < p.size(); ++i) {
        const double q = std::clamp(static_cast<double>(p[i]), 1e-7, 1 - 1e-7);
        loss -= y[i] > 0.5f ? std::log(q) : std::log(1 - q);
      }
      m["progressive_logloss"] = loss / n;
      break;
    }
    case Task::kRegression: {
      double se = 0;
      for (size_t i = 0; i < p.size(); ++i) se += (p[i] - y[i]) * static_cast<double>(p[i] - y[i]);
      m["progressive_rmse"] = std::sqrt(se / n);
      break;
    }
    case Task::kMulticlass: {
      double correct = 0;
      for (size_t i = 0; i < p.size(); ++i) correct += p[i] == y[i] ? 1 : 0;
      m["progressive_accuracy"] = correct / n;
      break;
    }
  }
  return m;
}

}  // namespace tabular
}  // namespace pstrain
