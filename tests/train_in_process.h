// Test helper: one training run of a model on a fresh in-process cluster, as the models' tests do
// it (no checkpoints, no restore, the progress line discarded). Test-only.
#ifndef PSTRAIN_TESTS_TRAIN_IN_PROCESS_H_
#define PSTRAIN_TESTS_TRAIN_IN_PROCESS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "trainer/trainer.h"
#include "models/model.h"
#include "worker/closure_registry.h"

namespace pstrain {

// Starts a cluster of `workers` workers (running `registry`'s closures) and `ps` ps tasks, trains
// `model` on it, and stops it. Errors: the cluster's start-up errors, and Train's.
absl::StatusOr<TrainResult> TrainInProcess(std::shared_ptr<const ClosureRegistry> registry,
                                           int workers, int ps, Model* model);
// The same with the trainer's options given.
absl::StatusOr<TrainResult> TrainInProcess(std::shared_ptr<const ClosureRegistry> registry,
                                           int workers, int ps, Model* model,
                                           const TrainerOptions& trainer);

}  // namespace pstrain

#endif  // PSTRAIN_TESTS_TRAIN_IN_PROCESS_H_
