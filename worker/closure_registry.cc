#include "worker/closure_registry.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"

namespace pstrain {

absl::Status ClosureRegistry::RegisterClosure(const std::string& name, ClosureFn fn) {
  if (name.empty()) return absl::InvalidArgumentError("a closure needs a name");
  if (!closures_.emplace(name, std::move(fn)).second) {
    return absl::AlreadyExistsError(absl::StrCat("closure \"", name, "\" is already registered"));
  }
  return absl::OkStatus();
}

absl::Status ClosureRegistry::RegisterDataset(const std::string& name, DatasetFn fn) {
  if (name.empty()) return absl::InvalidArgumentError("a dataset function needs a name");
  if (!datasets_.emplace(name, std::move(fn)).second) {
    return absl::AlreadyExistsError(absl::StrCat("dataset \"", name, "\" is already registered"));
  }
  return absl::OkStatus();
}

const ClosureFn* ClosureRegistry::FindClosure(const std::string& name) const {
  auto it = closures_.find(name);
  return it == closures_.end() ? nullptr : &it->second;
}

const DatasetFn* ClosureRegistry::FindDataset(const std::string& name) const {
  auto it = datasets_.find(name);
  return it == datasets_.end() ? nullptr : &it->second;
}

std::vector<std::string> ClosureRegistry::dataset_names() const {
  std::vector<std::string> names;
  for (const auto& [name, fn] : datasets_) names.push_back(name);
  return names;
}

std::vector<std::string> ClosureRegistry::closure_names() const {
  std::vector<std::string> names;
  for (const auto& [name, fn] : closures_) names.push_back(name);
  return names;
}

absl::StatusOr<bool> VectorDataset::Next(std::vector<Tensor>* element) {
  if (next_ >= elements_.size()) return false;
  *element = elements_[next_++];
  return true;
}

namespace {

// The longest compute the "add_range" closure will simulate.
constexpr int64_t kMaxSimulatedWorkUs = 1'000'000;

// begin + ... + end-1, wrapping as int64 addition would (but without its undefined behaviour), in
// constant time whatever the range's length.
int64_t SumOfRange(int64_t begin, int64_t end) {
  if (begin >= end) return 0;
  using i128 = __int128;
  const i128 n = static_cast<i128>(end) - begin;         // in [1, 2^64)
  const i128 ends = static_cast<i128>(begin) + end - 1;  // first + last; even when n is odd
  const i128 sum = n % 2 == 0 ? (n / 2) * ends : n * (ends / 2);
  return static_cast<int64_t>(static_cast<uint64_t>(static_cast<unsigned __int128>(sum)));
}

// The integers [0, n) that worker `index` of `count` gets: index, index + count, ..., made one at a
// time (n comes from a request: nothing is held for it).
class RangeDataset : public Dataset {
 public:
  RangeDataset(int64_t n, int index, int count) : n_(n), next_(index), step_(count) {}
  absl::StatusOr<bool> Next(std::vector<Tensor>* element) override {
    if (next_ >= n_) return false;
    *element = {Tensor::Scalar<int64_t>(next_)};
    next_ = n_ - next_ <= step_ ? n_ : next_ + step_;
    return true;
  }

 private:
  const int64_t n_;
  int64_t next_;
  const int64_t step_;
};

}  // namespace

absl::Status RegisterBuiltinClosures(ClosureRegistry* registry) {
  RETURN_IF_ERROR(registry->RegisterClosure(
      "noop", [](ClosureContext&, absl::Span<const Tensor>) -> absl::StatusOr<std::vector<Tensor>> {
        return std::vector<Tensor>();
      }));
  RETURN_IF_ERROR(registry->RegisterClosure(
      "echo",
      [](ClosureContext&, absl::Span<const Tensor> args) -> absl::StatusOr<std::vector<Tensor>> {
        return std::vector<Tensor>(args.begin(), args.end());
      }));
  RETURN_IF_ERROR(registry->RegisterClosure(
      "add_range",
      [](ClosureContext& ctx, absl::Span<const Tensor> args) -> absl::StatusOr<std::vector<Tensor>> {
        if (args.size() < 2 || !args[0].Is<int64_t>() || !args[1].Is<int64_t>() ||
            args[0].num_elements() != 1 || args[1].num_elements() != 1) {
          return absl::InvalidArgumentError(
              "closure \"add_range\" takes int64 scalars begin, end [, work_us]");
        }
        const int64_t begin = args[0].scalar<int64_t>();
        const int64_t end = args[1].scalar<int64_t>();
        if (args.size() > 2 && args[2].Is<int64_t>() && args[2].num_elements() == 1) {
          const int64_t work_us = args[2].scalar<int64_t>();
          if (work_us > kMaxSimulatedWorkUs) {
            return absl::InvalidArgumentError(
                absl::StrCat("closure \"add_range\": work_us ", work_us, " is over the limit of ",
                             kMaxSimulatedWorkUs));
          }
          absl::SleepFor(absl::Microseconds(work_us));  // simulated compute
        }
        const int64_t sum = SumOfRange(begin, end);
        absl::StatusOr<ShardedVariable> total = ctx.ps->Variable(kSumJobVariable);
        if (!total.ok()) return total.status();
        const int64_t id = 0;
        UpdateBatch update;
        RETURN_IF_ERROR(update.AddSparse(*total, UpdateOp::ASSIGN_ADD, absl::MakeConstSpan(&id, 1),
                                         reinterpret_cast<const char*>(&sum)));
        RETURN_IF_ERROR(update.Run());
        return std::vector<Tensor>{Tensor::Scalar<int64_t>(sum)};
      }));
  RETURN_IF_ERROR(registry->RegisterDataset(
      "range",
      [](int worker_index, int num_workers,
         absl::Span<const Tensor> args) -> absl::StatusOr<std::unique_ptr<Dataset>> {
        if (args.empty() || !args[0].Is<int64_t>() || args[0].num_elements() != 1) {
          return absl::InvalidArgumentError("dataset \"range\" takes an int64 scalar n");
        }
        if (worker_index < 0 || num_workers <= 0 || worker_index >= num_workers) {
          return absl::InvalidArgumentError(absl::StrCat("dataset \"range\": worker ", worker_index,
                                                         " of ", num_workers));
        }
        return std::unique_ptr<Dataset>(
            new RangeDataset(args[0].scalar<int64_t>(), worker_index, num_workers));
      }));
  return absl::OkStatus();
}

}  // namespace pstrain
