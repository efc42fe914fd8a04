#include "trainer/early_stopping.h"

#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pstrain {
namespace {

constexpr char kMonitorState[] = "trainer/monitor";
constexpr char kBestValueState[] = "trainer/best_value";
constexpr char kBestStepState[] = "trainer/best_step";
constexpr char kWaitState[] = "trainer/validations_since_best";

}  // namespace

bool HigherIsBetter(const std::string& metric) {
  return absl::EndsWith(metric, "auc") || absl::EndsWith(metric, "acc") ||
         absl::EndsWith(metric, "accuracy");
}

EarlyStopping::EarlyStopping(const EarlyStoppingOptions& options)
    : options_(options), higher_(HigherIsBetter(options.monitor)) {}

absl::StatusOr<EarlyStopping> EarlyStopping::Create(const EarlyStoppingOptions& options) {
  if (options.monitor.empty()) {
    return absl::InvalidArgumentError("early stopping: no metric to monitor");
  }
  if (!(options.min_delta >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("early stopping: min_delta ", options.min_delta, " must be >= 0"));
  }
  if (options.patience < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("early stopping: patience ", options.patience, " must be >= 0"));
  }
  return EarlyStopping(options);
}

EarlyStopping::Verdict EarlyStopping::Observe(int64_t step, double value) {
  Verdict v;
  const bool better =
      !std::isnan(value) &&
      (best_step_ < 0 || (higher_ ? value > best_ + options_.min_delta
                                  : value < best_ - options_.min_delta));
  if (better) {
    best_ = value;
    best_step_ = step;
    wait_ = 0;
    v.improved = true;
    return v;
  }
  ++wait_;
  v.stop = options_.patience > 0 && wait_ >= options_.patience;
  return v;
}

std::map<std::string, std::string> EarlyStopping::State() const {
  std::map<std::string, std::string> s;
  if (best_step_ < 0) return s;
  s[kMonitorState] = options_.monitor;
  s[kBestValueState] = absl::StrFormat("%.17g", best_);
  s[kBestStepState] = absl::StrCat(best_step_);
  s[kWaitState] = absl::StrCat(wait_);
  return s;
}

void EarlyStopping::Restore(const std::map<std::string, std::string>& state) {
  auto get = [&](const char* key) -> const std::string* {
    auto it = state.find(key);
    return it == state.end() ? nullptr : &it->second;
  };
  const std::string* monitor = get(kMonitorState);
  const std::string* value = get(kBestValueState);
  const std::string* step = get(kBestStepState);
  const std::string* wait = get(kWaitState);
  if (monitor == nullptr || *monitor != options_.monitor || value == nullptr || step == nullptr ||
      wait == nullptr) {
    return;
  }
  double b = 0;
  int64_t s = 0;
  int w = 0;
  if (!absl::SimpleAtod(*value, &b) || !absl::SimpleAtoi(*step, &s) ||
      !absl::SimpleAtoi(*wait, &w)) {
    return;
  }
  best_ = b;
  best_step_ = s;
  wait_ = w;
}

}  // namespace pstrain
