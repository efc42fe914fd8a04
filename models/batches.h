// Deterministic batches for step-indexed training: step s is batch (s % steps_per_epoch) of epoch
// s / steps_per_epoch, and each epoch visits the examples in its own shuffled order, fixed by
// (seed, epoch). Any process computes the same batch for the same step.
#ifndef PSTRAIN_MODELS_BATCHES_H_
#define PSTRAIN_MODELS_BATCHES_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/tensor.h"
#include "coordinator/cluster_coordinator.h"

namespace pstrain {

// Thread-safe; keeps the orders of the last few epochs asked for.
class EpochBatches {
 public:
  // `num_examples` >= 1, `batch_size` >= 1.
  EpochBatches(int64_t num_examples, int64_t batch_size, uint64_t seed);

  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  int64_t batch_size() const { return batch_size_; }
  // The example indices of step `step` (>= 0); the last batch of an epoch may be short.
  std::vector<int64_t> Batch(int64_t step);

 private:
  std::shared_ptr<const std::vector<int64_t>> Order(int64_t epoch);

  const int64_t num_examples_;
  const int64_t batch_size_;
  const uint64_t seed_;
  const int64_t steps_per_epoch_;
  absl::Mutex mu_;
  // Below: guarded by mu_.
  std::map<int64_t, std::shared_ptr<const std::vector<int64_t>>> orders_ ABSL_GUARDED_BY(mu_);
};

// The steps of one epoch, handed out in order, each once: the cursor of a dataset whose Next()
// yields the first epoch's batches. Thread-safe.
class FirstEpochSteps {
 public:
  explicit FirstEpochSteps(int64_t steps) : steps_(steps) {}

  // The next step, or nullopt once all `steps` were handed out.
  std::optional<int64_t> Next();

 private:
  const int64_t steps_;
  absl::Mutex mu_;
  // Below: guarded by mu_.
  int64_t next_ ABSL_GUARDED_BY(mu_) = 0;
};

// Synchronous training (the multi-worker mirrored strategy): replica `index` of `count` trains on
// rows index, index + count, index + 2 count, ... of a step's batch, so the replicas' shares are
// disjoint, cover the batch, and differ in size by at most one. With count 1, the whole batch.
std::vector<int64_t> ReplicaShare(std::vector<int64_t> rows, int index, int count);

// Reads a model's extra options: each Get* removes the key it reads; Finish() fails naming any
// key left (an option this model doesn't know).
class ExtraOptions {
 public:
  ExtraOptions(std::string model, std::map<std::string, std::string> extra)
      : model_(std::move(model)), extra_(std::move(extra)) {}
  std::string GetString(const std::string& key, const std::string& fallback);
  absl::StatusOr<double> GetDouble(const std::string& key, double fallback);
  absl::StatusOr<int64_t> GetInt(const std::string& key, int64_t fallback);
  // Errors: kInvalidArgument naming the unknown keys.
  absl::Status Finish() const;

 private:
  std::string model_;
  std::map<std::string, std::string> extra_;
};

// Schedules `closure` once per chunk [begin, end) of [0, n) (chunks of `chunk` examples), with the
// arguments `args(begin, end)` and the per-worker `dataset`; returns the values in chunk order.
// All are scheduled before any is fetched, so every worker takes a share. Errors: Schedule's.
absl::StatusOr<std::vector<RemoteValue>> ScheduleChunks(
    ClusterCoordinator* coordinator, const std::string& closure, int64_t n, int64_t chunk,
    const std::function<std::vector<Tensor>(int64_t begin, int64_t end)>& args,
    PerWorkerDataset dataset);

// Closure-argument helpers: errors name the closure and the argument's position.
absl::StatusOr<int64_t> IntArg(absl::Span<const Tensor> args, size_t i, const char* closure);
absl::StatusOr<double> FloatArg(absl::Span<const Tensor> args, size_t i, const char* closure);
absl::StatusOr<std::string> StringArg(absl::Span<const Tensor> args, size_t i, const char* closure);

}  // namespace pstrain

#endif  // PSTRAIN_MODELS_BATCHES_H_
