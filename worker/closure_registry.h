// Closures and dataset functions, registered by name in a registry object the worker server is
// built with. A model library contributes its own with one call, e.g. RegisterClosures(&registry).
// No global state: each server (and each test) has its own registry.
#ifndef PSTRAIN_WORKER_CLOSURE_REGISTRY_H_
#define PSTRAIN_WORKER_CLOSURE_REGISTRY_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/tensor.h"
#include "worker/ps_connection.h"

namespace pstrain {

// A per-worker dataset: each worker's instance yields its own shard of the data. Used by one
// closure at a time (the worker serializes calls on one resource), unless it is shared().
class Dataset {
 public:
  virtual ~Dataset() = default;
  // The next element into `element`; false at the end. Errors: the dataset's own.
  virtual absl::StatusOr<bool> Next(std::vector<Tensor>* element) = 0;
  // True for a thread-safe resource (e.g. read-only training data that closures index by step):
  // the worker then runs closures that use it concurrently instead of one at a time.
  virtual bool shared() const { return false; }
};

// What a closure sees of its worker.
struct ClosureContext {
  int worker_index = 0;
  int num_workers = 1;
  // Synchronous training (the multi-worker mirrored strategy, worker/mirrored_ps_client.h): this
  // worker is replica `replica_index` of `num_replicas`, and trains on its share of each batch
  // (models/batches.h, ReplicaShare). Default 0 of 1: the whole batch.
  int replica_index = 0;
  int num_replicas = 1;
  // Synchronous training: every worker runs every step, and a step's turn at the dense part
  // (where it all-reduces its gradients) goes in step order (worker/dense_turns.h). Default
  // false: first come, first served.
  bool steps_in_order = false;
  // The per-worker resources named in the call (its own worker's instances), in order.
  std::vector<Dataset*> datasets;
  // The ps tasks: variable handles by name, and the raw clients.
  PsConnection* ps = nullptr;
};

// Runs on the worker. Returns its outputs, or an error (which the coordinator reports as the
// closure's own error; use kInvalidArgument for bad arguments).
using ClosureFn = std::function<absl::StatusOr<std::vector<Tensor>>(
    ClosureContext& context, absl::Span<const Tensor> args)>;

// Creates one worker's dataset instance: its shard for (worker_index of num_workers).
using DatasetFn = std::function<absl::StatusOr<std::unique_ptr<Dataset>>(
    int worker_index, int num_workers, absl::Span<const Tensor> args)>;

// Filled in before the server starts, then read-only: reads are thread-safe, registration is not.
class ClosureRegistry {
 public:
  // Errors: kAlreadyExists if the name is taken, kInvalidArgument for an empty name.
  absl::Status RegisterClosure(const std::string& name, ClosureFn fn);
  absl::Status RegisterDataset(const std::string& name, DatasetFn fn);

  // nullptr if unknown.
  const ClosureFn* FindClosure(const std::string& name) const;
  const DatasetFn* FindDataset(const std::string& name) const;
  std::vector<std::string> closure_names() const;
  std::vector<std::string> dataset_names() const;

 private:
  std::map<std::string, ClosureFn> closures_;
  std::map<std::string, DatasetFn> datasets_;
};

// A dataset over elements held in memory (the tests' and small models' workhorse).
class VectorDataset : public Dataset {
 public:
  explicit VectorDataset(std::vector<std::vector<Tensor>> elements)
      : elements_(std::move(elements)) {}
  absl::StatusOr<bool> Next(std::vector<Tensor>* element) override;

 private:
  std::vector<std::vector<Tensor>> elements_;
  size_t next_ = 0;
};

// The int64 [1] variable the built-in "add_range" closure adds into.
inline constexpr char kSumJobVariable[] = "sum_job/total";

// Registers the closures every worker has: "noop" (returns nothing; the coordinator benchmark's
// empty closure), "echo" (returns its arguments), "add_range" (args: int64 begin, end [, work_us]:
// adds begin + ... + end-1 into the ps variable kSumJobVariable, after sleeping work_us to simulate
// compute; returns the sum), and the dataset "range" (arg: n: the integers [0, n) sharded over
// workers as TF's dataset.shard(num_workers, index) does: worker i gets i, i + W, i + 2W, ...).
absl::Status RegisterBuiltinClosures(ClosureRegistry* registry);

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_CLOSURE_REGISTRY_H_
