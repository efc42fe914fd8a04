// The training driver: runs a Model (models/model.h) on a cluster, asynchronously, with periodic
// checkpoints and automatic resume, ps recovery, a progress line, TensorBoard scalars, and a final
// evaluation.
//
//   setup (variables, per-worker data) -> restore (latest checkpoint, by default) ->
//   schedule steps [resumed step, total) with up to max_pending_steps outstanding, collecting
//   losses in order -> every N steps / T seconds: finish the scheduled steps, save ->
//   final save -> evaluate -> TrainResult
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
#include "coordinator/cluster_coordinator.h"
#include "cluster/cluster_spec.h"
#include "trainer/progress.h"
#include "models/model.h"

namespace pstrain {

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
  // The progress line (its total_steps and initial_* are filled in by the trainer).
  ProgressOptions progress;
  // Evaluate at the end. Default true.
  bool evaluate = true;
  // Tests only: called after each step is collected; an error stops training with that error.
  std::function<absl::Status(int64_t step)> after_step;
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
  ModelMetrics metrics;
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
