// The evaluator: TF_CONFIG's "evaluator" task (TensorFlow's train_and_evaluate EvalSpec, Keras's
// SidecarEvaluator). Beside a training job, it watches the job's checkpoint directory and
// evaluates each new complete checkpoint on the model's evaluation data, reading the checkpoint
// itself into a private in-process ps and worker (no task of the training cluster is needed, and
// it may run on any machine that sees the checkpoint directory):
//
//   wait for a complete checkpoint newer than the last evaluated --(several new ones: the newest;
//   the others are logged as skipped)--> restore it -> the model's test (and validation)
//   metrics -> scalars under <logdir>/eval at the checkpoint's step -> stop after the job's final
//   checkpoint, or after max_evaluations
//
// A checkpoint's metrics are the model's Evaluate() on it: what the trainer's own evaluation of
// that checkpoint reports.
#ifndef PSTRAIN_TRAINER_EVALUATOR_H_
#define PSTRAIN_TRAINER_EVALUATOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "models/devices.h"
#include "models/model.h"

namespace pstrain {

struct EvaluatorOptions {
  // The training job's checkpoint directory. Required.
  std::string checkpoint_dir;
  // Scalars go into an event file under <logdir>/eval. Default "": none.
  std::string logdir;
  // Stop after this many evaluations. Default 0: after the job's final checkpoint.
  int max_evaluations = 0;
  // How often the directory is looked at. Default 1 s.
  absl::Duration poll = absl::Seconds(1);
  // Give up when no new checkpoint came for this long. Default: never.
  absl::Duration idle_timeout = absl::InfiniteDuration();
  // Also run the model's validation (val_* metrics) on each checkpoint. Default true.
  bool validate = true;
  // Set once the job ended (the sidecar): the checkpoints there are evaluated (the newest), then
  // the evaluator stops instead of waiting for more. Default: none.
  const absl::Notification* job_done = nullptr;
  // Where the evaluator counts its evaluations and publishes the last one's metrics as gauges
  // (pstrain_evaluator_*; not owned). Default null: none.
  MetricsRegistry* metrics = nullptr;
  // Called after each evaluation (tests, the sidecar's log line).
  std::function<void(const struct Evaluation&)> on_evaluated;
  // The process's replica groups (models/devices.h), which the evaluator's private worker takes
  // its devices from: the sidecar shares the job's. Default null: the evaluator makes its own.
  std::shared_ptr<ReplicaGroups> replica_groups;
};

// One checkpoint evaluated.
struct Evaluation {
  std::string checkpoint;
  int64_t step = 0;
  ModelMetrics metrics;
  // Complete checkpoints newer than the previous evaluation that were passed over for this newer
  // one (the evaluator fell behind).
  std::vector<std::string> skipped;
  bool final = false;  // the job's final checkpoint
};

// Runs the evaluator until the final checkpoint was evaluated, max_evaluations, the idle timeout,
// or `stop` (may be null) is notified. Returns every evaluation made. Errors: kInvalidArgument
// (no checkpoint_dir, bad model options), the model's set-up errors (its data), kDataLoss for a
// corrupt checkpoint (naming it), kDeadlineExceeded for the idle timeout, and a checkpoint of
// another model (kInvalidArgument naming both).
absl::StatusOr<std::vector<Evaluation>> RunEvaluator(const std::string& model_name,
                                                     const ModelOptions& model_options,
                                                     const EvaluatorOptions& options,
                                                     const absl::Notification* stop = nullptr);

}  // namespace pstrain

#endif  // PSTRAIN_TRAINER_EVALUATOR_H_
