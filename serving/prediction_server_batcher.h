// The prediction server's batching (serving/prediction_server.h): requests that arrive together
// are merged into one Predict call of the model, and each gets its own rows back.
//
//   PredictionBatcher batcher(options, [&] { return versions->Current(); });
//   absl::StatusOr<BatchedPrediction> got = batcher.Predict(examples);  // blocks for its batch
//
// A batch opens when a request arrives at an idle predict thread and closes when it holds
// max_batch_examples examples or max_batch_wait has passed since its first request arrived,
// whichever comes first; the thread then runs it while the next batch gathers (each of `threads`
// threads runs one batch at a time). A request never waits on a batch longer than max_batch_wait
// plus the batches before it.
//
// Merging: each request's rows are put in the model's column order (columns it doesn't read are
// dropped; a short row's missing fields stay empty, as the model reads them), so requests with
// their columns in any order merge. A request that lacks a column the model needs, or names one
// twice, is predicted alone, so the model's own error names it; so is every request of a batch
// whose merged call fails (a bad value in one request fails only that request, with the row
// numbers of that request). A batch of one request runs on that request's rows as given.
#ifndef PSTRAIN_SERVING_PREDICTION_SERVER_BATCHER_H_
#define PSTRAIN_SERVING_PREDICTION_SERVER_BATCHER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "models/serving_head.h"

namespace pstrain {

// One loaded version of a model, as the batcher sees it. Thread-safe: Predict may run on many
// threads at once.
class ServableModel {
 public:
  virtual ~ServableModel() = default;
  virtual int64_t version() const = 0;
  // The columns an example needs, and the outputs per example (Predictor's).
  virtual const std::vector<std::string>& columns() const = 0;
  virtual const std::vector<std::string>& outputs() const = 0;
  // outputs().size() floats per row of `examples` into `out`. Errors: as Predictor::Predict.
  virtual absl::Status Predict(const RawExamples& examples, std::vector<float>* out) const = 0;
};

// Where batches get their model: the version new batches go to (never null). Called once per
// batch; the batch keeps the version alive until it has run.
using ModelSource = std::function<std::shared_ptr<const ServableModel>()>;

struct PredictionBatcherOptions {
  // A batch closes once it holds this many examples; a request with more runs as a batch of its
  // own. At least 1. Default 256.
  int max_batch_examples = 256;
  // How long a batch waits for more requests after its first one arrived. Zero: a batch takes
  // only the requests already queued. Default 2 ms.
  absl::Duration max_batch_wait = absl::Milliseconds(2);
  // Threads running batches (each one at a time). At least 1. Default 2.
  int threads = 2;
};

// What one request gets back.
struct BatchedPrediction {
  std::shared_ptr<const ServableModel> model;  // the version that predicted it
  std::vector<float> predictions;              // model->outputs().size() per example
  int batch_requests = 0;  // requests in the model call this one ran in (1: alone)
};

// Counters since the batcher started.
struct BatchStats {
  int64_t requests = 0;  // requests answered (OK or not)
  int64_t examples = 0;  // their examples
  int64_t batches = 0;   // model calls made for batches of one or more requests
  int64_t merged_batches = 0;        // batches of two or more requests
  int64_t largest_batch_requests = 0;
  int64_t largest_batch_examples = 0;
  int64_t alone = 0;  // requests predicted alone after their batch could not take them (missing
                      // columns, or a merged call that failed)
};

// Thread-safe. The destructor answers every queued request, then joins the threads.
class PredictionBatcher {
 public:
  PredictionBatcher(const PredictionBatcherOptions& options, ModelSource source);
  ~PredictionBatcher();
  PredictionBatcher(const PredictionBatcher&) = delete;
  PredictionBatcher& operator=(const PredictionBatcher&) = delete;

  // Predicts `examples` in a batch with other requests; blocks until it has run. `examples` must
  // stay unchanged until then. Errors: the model's (kInvalidArgument naming a missing column or a
  // row's bad value, numbered within this request; kDataLoss from its store); kInternal if the
  // model answers the wrong number of floats; kUnavailable once the batcher is being destroyed.
  absl::StatusOr<BatchedPrediction> Predict(const RawExamples& examples);

  BatchStats stats() const;

 private:
  struct Pending;
  void Loop();
  void Run(std::vector<Pending*> batch);
  bool CanCollectLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool BatchFullLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const PredictionBatcherOptions options_;
  const ModelSource source_;
  std::vector<std::thread> threads_;
  mutable absl::Mutex mu_;
  // Below: guarded by mu_.
  std::deque<Pending*> queue_ ABSL_GUARDED_BY(mu_);
  int64_t queued_examples_ ABSL_GUARDED_BY(mu_) = 0;
  bool collecting_ ABSL_GUARDED_BY(mu_) = false;  // a thread is gathering the next batch
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  BatchStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVING_PREDICTION_SERVER_BATCHER_H_
