#include "ps/staleness.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"

namespace pstrain {

double StalenessFactor(OptimizerDef::StalenessScaling scaling, int64_t staleness) {
  // Zhang et al. (IJCAI 2016): rate / staleness, with staleness 0 and 1 both at the full rate.
  if (staleness <= 1) return 1.0;
  switch (scaling) {
    case OptimizerDef::STALENESS_INVERSE:
      return 1.0 / static_cast<double>(staleness);
    case OptimizerDef::STALENESS_INVERSE_SQRT:
      return 1.0 / std::sqrt(static_cast<double>(staleness));
    default:
      return 1.0;
  }
}

absl::StatusOr<OptimizerDef::StalenessScaling> ParseStalenessScaling(absl::string_view text) {
  for (OptimizerDef::StalenessScaling s :
       {OptimizerDef::STALENESS_NONE, OptimizerDef::STALENESS_INVERSE,
        OptimizerDef::STALENESS_INVERSE_SQRT}) {
    if (text == StalenessScalingName(s)) return s;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "staleness scaling '", text, "' is not one of none, inverse, inverse_sqrt"));
}

const char* StalenessScalingName(OptimizerDef::StalenessScaling scaling) {
  switch (scaling) {
    case OptimizerDef::STALENESS_INVERSE: return "inverse";
    case OptimizerDef::STALENESS_INVERSE_SQRT: return "inverse_sqrt";
    default: return "none";
  }
}

void StalenessTracker::NoteRead(int64_t step, int64_t version) {
  if (step <= 0) return;
  absl::MutexLock lock(&mu_);
  open_reads_[step] = version;
  if (open_reads_.size() > kMaxOpenReads) open_reads_.erase(open_reads_.begin());
}

void StalenessTracker::Forget(int64_t step) {
  if (step <= 0) return;
  absl::MutexLock lock(&mu_);
  open_reads_.erase(step);
}

int64_t StalenessTracker::OnApply(int64_t step, int64_t version, int64_t read_version) {
  absl::MutexLock lock(&mu_);
  std::optional<int64_t> read;
  if (step > 0) {
    auto it = open_reads_.find(step);
    if (it != open_reads_.end()) {
      read = it->second;
      open_reads_.erase(it);
    }
  }
  // The client's word, when it has one: the version its rows came back at from an earlier push.
  if (read_version > 0) read = read_version;
  if (!read.has_value()) {
    if (step > 0) ++unknown_;
    return -1;
  }
  const int64_t staleness = std::max<int64_t>(0, version - *read);
  ++counts_[std::min(staleness, kMaxCounted)];
  ++count_;
  sum_ += static_cast<double>(staleness);
  max_ = std::max(max_, staleness);
  return staleness;
}

StalenessTracker::Summary StalenessTracker::summary() const {
  absl::MutexLock lock(&mu_);
  Summary s;
  s.count = count_;
  s.unknown = unknown_;
  s.max = max_;
  if (count_ == 0) return s;
  s.mean = sum_ / static_cast<double>(count_);
  s.p50 = QuantileLocked(0.5);
  s.p90 = QuantileLocked(0.9);
  s.p99 = QuantileLocked(0.99);
  return s;
}

int64_t StalenessTracker::QuantileLocked(double q) const {
  const double need = q * static_cast<double>(count_);
  int64_t seen = 0;
  for (int64_t v = 0; v <= kMaxCounted; ++v) {
    seen += counts_[v];
    if (static_cast<double>(seen) >= need) return v;
  }
  return kMaxCounted;
}

}  // namespace pstrain
