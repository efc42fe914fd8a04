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
        if (args.size() > 2 && args[2].Is<int64_t>()) {
          absl::SleepFor(absl::Microseconds(args[2].scalar<int64_t>()));  // simulated compute
        }
        int64_t sum = 0;
        for (int64_t i = begin; i < end; ++i) sum += i;
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
        const int64_t n = args[0].scalar<int64_t>();
        std::vector<std::vector<Tensor>> elements;
        for (int64_t i = worker_index; i < n; i += num_workers) {
          elements.push_back({Tensor::Scalar<int64_t>(i)});
        }
        return std::unique_ptr<Dataset>(new VectorDataset(std::move(elements)));
      }));
  return absl::OkStatus();
}

}  // namespace pstrain
