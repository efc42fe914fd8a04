#include "models/batches.h"

#include <algorithm>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace pstrain {

EpochBatches::EpochBatches(int64_t num_examples, int64_t batch_size, uint64_t seed)
    : num_examples_(std::max<int64_t>(1, num_examples)),
      batch_size_(std::max<int64_t>(1, batch_size)),
      seed_(seed),
      steps_per_epoch_((num_examples_ + batch_size_ - 1) / batch_size_) {}

std::shared_ptr<const std::vector<int64_t>> EpochBatches::Order(int64_t epoch) {
  {
    absl::MutexLock lock(&mu_);
    auto it = orders_.find(epoch);
    if (it != orders_.end()) return it->second;
  }
  auto order = std::make_shared<std::vector<int64_t>>(num_examples_);
  for (int64_t i = 0; i < num_examples_; ++i) (*order)[i] = i;
  std::mt19937_64 rng(seed_ * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(epoch));
  // Fisher-Yates with our own index draw, so the order is the same with every standard library.
  for (int64_t i = num_examples_ - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(rng() % static_cast<uint64_t>(i + 1));
    std::swap((*order)[i], (*order)[j]);
  }
  absl::MutexLock lock(&mu_);
  // Another closure may have made it meanwhile: use theirs. Taken before trimming, which may drop
  // this very epoch (a straggler of an old epoch, older than the epochs kept).
  std::shared_ptr<const std::vector<int64_t>> result = orders_.emplace(epoch, std::move(order)).first->second;
  // Keep a few recent epochs (closures of neighbouring epochs overlap under async training).
  while (orders_.size() > 3) orders_.erase(orders_.begin());
  return result;
}

std::optional<int64_t> FirstEpochSteps::Next() {
  absl::MutexLock lock(&mu_);
  if (next_ >= steps_) return std::nullopt;
  return next_++;
}

std::vector<int64_t> ReplicaShare(std::vector<int64_t> rows, int index, int count) {
  if (count <= 1) return rows;
  std::vector<int64_t> share;
  share.reserve(rows.size() / count + 1);
  for (size_t i = static_cast<size_t>(index); i < rows.size(); i += count) share.push_back(rows[i]);
  return share;
}

std::vector<int64_t> EpochBatches::Batch(int64_t step) {
  const int64_t epoch = step / steps_per_epoch_;
  const int64_t begin = (step % steps_per_epoch_) * batch_size_;
  const int64_t end = std::min(num_examples_, begin + batch_size_);
  std::shared_ptr<const std::vector<int64_t>> order = Order(epoch);
  return std::vector<int64_t>(order->begin() + begin, order->begin() + end);
}

std::string ExtraOptions::GetString(const std::string& key, const std::string& fallback) {
  auto it = extra_.find(key);
  if (it == extra_.end()) return fallback;
  std::string v = it->second;
  extra_.erase(it);
  return v;
}

absl::StatusOr<double> ExtraOptions::GetDouble(const std::string& key, double fallback) {
  const std::string text = GetString(key, "");
  if (text.empty()) return fallback;
  double v;
  if (!absl::SimpleAtod(text, &v)) {
    return absl::InvalidArgumentError(
        absl::StrCat(model_, ": option ", key, "=", text, " is not a number"));
  }
  return v;
}

absl::StatusOr<int64_t> ExtraOptions::GetInt(const std::string& key, int64_t fallback) {
  const std::string text = GetString(key, "");
  if (text.empty()) return fallback;
  int64_t v;
  if (!absl::SimpleAtoi(text, &v)) {
    return absl::InvalidArgumentError(
        absl::StrCat(model_, ": option ", key, "=", text, " is not an integer"));
  }
  return v;
}

absl::Status ExtraOptions::Finish() const {
  if (extra_.empty()) return absl::OkStatus();
  std::vector<std::string> keys;
  for (const auto& [k, v] : extra_) keys.push_back(k);
  return absl::InvalidArgumentError(
      absl::StrCat(model_, " has no option ", absl::StrJoin(keys, ", ")));
}

absl::StatusOr<std::vector<RemoteValue>> ScheduleChunks(
    ClusterCoordinator* coordinator, const std::string& closure, int64_t n, int64_t chunk,
    const std::function<std::vector<Tensor>(int64_t begin, int64_t end)>& args,
    PerWorkerDataset dataset) {
  std::vector<RemoteValue> values;
  for (int64_t begin = 0; begin < n; begin += chunk) {
    absl::StatusOr<RemoteValue> v =
        coordinator->Schedule(closure, args(begin, std::min(n, begin + chunk)), {dataset});
    if (!v.ok()) return v.status();
    values.push_back(*std::move(v));
  }
  return values;
}

absl::StatusOr<int64_t> IntArg(absl::Span<const Tensor> args, size_t i, const char* closure) {
  if (i >= args.size() || !args[i].Is<int64_t>() || args[i].num_elements() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("closure \"", closure, "\": argument ", i, " must be an int64 scalar"));
  }
  return args[i].scalar<int64_t>();
}

absl::StatusOr<double> FloatArg(absl::Span<const Tensor> args, size_t i, const char* closure) {
  if (i >= args.size() || !args[i].Is<float>() || args[i].num_elements() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("closure \"", closure, "\": argument ", i, " must be a float32 scalar"));
  }
  return args[i].scalar<float>();
}

absl::StatusOr<std::string> StringArg(absl::Span<const Tensor> args, size_t i,
                                      const char* closure) {
  if (i >= args.size() || !args[i].IsString()) {
    return absl::InvalidArgumentError(
        absl::StrCat("closure \"", closure, "\": argument ", i, " must be a string"));
  }
  return args[i].data;
}

}  // namespace pstrain
