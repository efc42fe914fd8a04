// The training driver: runs a Model (models/model.h) on a cluster, asynchronously, with periodic
// checkpoints and automatic resume, ps recovery, a progress line, TensorBoard scalars, and a final
// evaluation.
//
//   StartCluster -> SetUpModel (variables, per-worker data) -> Restore (the latest checkpoint, by
//   default) -> StartReporting -> [Validate at step 0] ->
//   TrainSteps: schedule steps [resumed step, total) with up to max_pending_steps outstanding,
//               collecting each in order (CollectFront);
//               every N steps / T seconds: finish the scheduled steps, Save;
//               every epoch (or N steps): finish them, Validate: a new best is saved and marked
//               (BEST), and patience running out stops training early ->
//   Finish (a last Validate, the final Save) -> SumTables -> EvaluateBest (restore the best
//   checkpoint) -> EvaluateTest -> TrainResult
//
// (Each name is a method of trainer.cc's TrainingLoop, in this order in Run().)
//
// Validation (when the model has validation data, ModelOptions::validation_fraction): the model's
// val_* metrics, written to TensorBoard as their own scalars; the watched one (the model's
// validation_metric(), or `monitor`) decides the best checkpoint and early stopping as Keras's
// ModelCheckpoint(save_best_only) and EarlyStopping(restore_best_weights) do (trainer/
// early_stopping.h). The final test evaluation runs on the best checkpoint and says which.
//
// A checkpoint at step s holds exactly steps [0, s): the trainer waits for every scheduled step
// before saving, and the saves run while no closure runs (ClusterCoordinator::RunExclusive). A
// ps task that restarts is re-created and reloaded from the latest checkpoint (losing the steps
// since), and training goes on.
#ifndef PSTRAIN_TRAINER_TRAINER_H_
#define PSTRAIN_TRAINER_TRAINER_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "coordinator/cluster_coordinator.h"
#include "cluster/cluster_spec.h"
#include "trainer/progress.h"
#include "models/model.h"

namespace pstrain {

// Set in the state of the checkpoint a run saves as it ends (the evaluator stops after it).
inline constexpr char kFinalState[] = "trainer/final";

struct TrainerOptions {
  // Where checkpoints go. Default "": no checkpoints (and no resume, no ps recovery from them).
  std::string checkpoint_dir;
  // "latest" (default): resume from the newest checkpoint in checkpoint_dir if there is one;
  // "none": start fresh (existing checkpoints are kept until newer ones replace them); or the
  // path of one checkpoint to start from.
  std::string restore = "latest";
  // Variables the restored checkpoint lacks keep their initial values instead of failing the
  // restore. Default false.
  bool restore_skip_missing = false;
  // Save every this many steps (default 0: not by steps) and/or this often (default 0: not by
  // time). With a checkpoint_dir and neither set, only the final checkpoint is saved.
  int64_t checkpoint_every_steps = 0;
  absl::Duration checkpoint_every = absl::ZeroDuration();
  // Write checkpoints (and the BEST mark) into checkpoint_dir. Default true; false: only restore
  // from it (the replicas other than the chief's in synchronous training).
  bool save_checkpoints = true;
  // Checkpoints kept. Default 3.
  int keep_checkpoints = 3;
  // Incremental checkpoints (dynamic tables' changes only, a full one every
  // full_checkpoint_every; see CheckpointOptions). Default false.
  bool checkpoint_incremental = false;
  int full_checkpoint_every = 10;
  // TensorBoard event files go here. Default "": none.
  std::string logdir;
  // Scalars (loss, examples/s) are written every this many steps. Default 20.
  int64_t summary_every_steps = 20;
  // Steps scheduled but not yet collected, at most. Default 64.
  int64_t max_pending_steps = 64;
  // The run's first step runs alone: the next is scheduled once it is collected. The synchronous
  // strategies set it: their workers' turns at the dense part go in step order from the first
  // step that asks (worker/dense_turns.h). Default false.
  bool first_step_alone = false;
  // The progress line (its total_steps and initial_* are filled in by the trainer).
  ProgressOptions progress;
  // Evaluate at the end. Default true.
  bool evaluate = true;
  // Validate every this many steps. Default 0: every epoch (Model::steps_per_epoch()). Also at the
  // end, and, with validate_at_start (default true), at step 0 of a fresh run: the initial model
  // is then a candidate for the best too (a model whose training only hurts keeps its start).
  int64_t validate_every_steps = 0;
  bool validate_at_start = true;
  // Validate at all (when the model has validation data). Default true; the synchronous
  // strategy's replicas other than the chief's don't.
  bool validate = true;
  // The validation metric watched. Default "": the model's validation_metric().
  std::string monitor;
  // Stop after this many validations in a row without an improvement of more than min_delta.
  // Default 0: never stop early.
  int early_stopping_patience = 0;
  double early_stopping_min_delta = 0;
  // Save each new best validation's checkpoint, mark it (<checkpoint_dir>/BEST, kept whatever
  // keep_checkpoints says), and evaluate the test data on it at the end. Default true; without a
  // checkpoint_dir the final weights are evaluated (and the summary says so).
  bool keep_best = true;
  // Polled before each step is scheduled: true stops training there. The steps in flight are
  // collected, the final checkpoint is saved at the step reached (a later run resumes from it),
  // the test evaluation runs and TrainResult::interrupted says so. The coordinator binary asks
  // whether SIGINT or SIGTERM arrived (common/stop_signal.h). Default null: never.
  std::function<bool()> stop_requested;
  // Tests only: called after each step is collected; an error stops training with that error.
  std::function<absl::Status(int64_t step)> after_step;
  // Called once the variables are set up (and restored), before the first step; an error stops
  // the run. The synchronous strategy broadcasts the chief's variables here.
  std::function<absl::Status(ClusterCoordinator* coordinator)> before_steps;
  // Which ps tasks take fixed variables and which dynamic tables (the hybrid strategy: fixed ones
  // on the worker's replica, tables on the shared ps tasks). Default: all take both.
  PlacementOptions placement;
  // Asynchronous training: how a dense gradient's staleness scales its learning rate, for every
  // fixed variable whose optimizer doesn't say (ps/staleness.h, docs/training.md).
  OptimizerDef::StalenessScaling staleness_scaling = OptimizerDef::STALENESS_NONE;
  // Restores (of the latest checkpoint, or `restore`'s) fill only the shards on these ps tasks.
  // Default (empty): all. The hybrid strategy's workers other than the chief restore only their
  // replica; the chief restores the shared ps tasks.
  std::vector<int> restore_only_ps;
  // Where the run counts its steps, examples, loss and checkpoints (and the coordinator its
  // closures and failures); not owned. Default null: none.
  MetricsRegistry* metrics = nullptr;
  // A ps task that restarted ends the run with kUnavailable, instead of being reloaded from the
  // latest checkpoint while training goes on. Default false; the hybrid strategy sets it (its
  // workers then restart together from the latest checkpoint).
  bool ps_restart_ends_run = false;
};

struct TrainResult {
  std::string model;
  int num_workers = 0;
  int num_ps = 0;
  int64_t start_step = 0;       // where this run began (> 0 when resumed)
  int64_t end_step = 0;         // total steps reached
  std::string restored_from;    // the checkpoint resumed from, if any
  std::string last_checkpoint;  // the last checkpoint saved, if any
  int64_t examples = 0;         // examples trained in this run
  double train_seconds = 0;
  double examples_per_sec = 0;
  double final_loss = 0;        // mean loss of the last collected steps
  ModelMetrics metrics;         // the test evaluation's, and the best validation's val_* metrics
  // Validation: how many ran in this run, the metric watched, the best (its step and value; -1 if
  // none), whether training stopped early (at end_step), and what the test evaluation ran on:
  // "best checkpoint <path> (step N)" or "final weights (step N)".
  int validations = 0;
  std::string monitor;
  int64_t best_step = -1;
  double best_value = 0;
  bool stopped_early = false;
  // Stopped at end_step because TrainerOptions::stop_requested said so.
  bool interrupted = false;
  std::string evaluated;
  // Each dynamic table's counters at the end, summed over its shards (keys, admitted, rejected,
  // evicted by TTL and by capacity, erased, bytes).
  std::map<std::string, DynamicShardStats> tables;

  // One line of JSON: the run's summary.
  std::string ToJson() const;
};

// Runs `model` on the cluster `spec`. `coordinator_options.on_ps_restarted` is set by the trainer.
// Errors: the model's, the cluster's, a closure's own error, and checkpoint errors (a restore that
// fails stops the run before training: nothing is trained over a half-restored state).
absl::StatusOr<TrainResult> Train(const ClusterSpec& spec, Model* model,
                                  const TrainerOptions& options,
                                  CoordinatorOptions coordinator_options = {});

}  // namespace pstrain

#endif  // PSTRAIN_TRAINER_TRAINER_H_
