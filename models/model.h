// A training model, as the trainer (trainer/trainer.h) drives it. A model has two halves:
//
//   worker side   closures and datasets, registered into every worker's ClosureRegistry (see
//                 models/registry.h); a closure trains on one batch or evaluates one chunk
//   coordinator   Setup() creates the variables on the ps tasks and each worker's data resource;
//                 ScheduleStep() schedules one training step; Evaluate() the final metrics
//
// Where a model's pieces go (every example model follows this; a new one should too):
//
//   <model>_worker.h/.cc   the worker side: the dataset (the per-worker resource every closure
//                          of the model takes), the closures, and Register<Model>(registry,
//                          replica_groups). Its header names the closures and the dataset and lists
//                          their arguments and outputs: the contract the coordinator side calls.
//   <model>.h/.cc          the coordinator side: the options (ModelOptions and its extra options),
//                          the Model (variables, the per-worker dataset, steps, metrics) and
//                          Create<Model>(options). It schedules the worker side's closures by the
//                          names <model>_worker.h gives, so it depends on that header, never the
//                          other way round.
//   <model>_serving.h/.cc  the serving head (serving_head.h), for a model that can be served:
//                          Create<Model>ServingHead(serving_config). It owns its CPU replica group.
//   registry.cc            lists every model: its Register, Create and Create...ServingHead.
//
// Code that two of them share is a unit of its own that both depend on, one cc_library per
// .h/.cc pair: the network (dense_mlp, conv_net, ctr_net, tabular/tabular_net), the data
// (flights_data, ratings_data, data/), the ps variables' names and the pull of a batch's rows
// that the step, the evaluation and the serving head all make (flights_ctr_lookup,
// tabular/tabular_lookup). Two models that differ only in their network share the rest:
// fashion_mnist_mlp and fashion_mnist_cnn are each a network on fashion_mnist_worker (the
// dataset and the closures) and fashion_mnist (the options and the Model).
//
// A worker's devices: the dataset takes its replica group from the process's ReplicaGroups
// (devices.h), which Register<Model> receives and its dataset function keeps.
//
// Steps are deterministic: step s trains on a batch fixed by (seed, s) (epoch s / steps_per_epoch,
// a per-epoch shuffle), and every worker holds all the training data. So a step can run on any
// worker, a closure re-run after a worker failure trains on the same batch, and a job resumed
// from a checkpoint at step s continues with exactly the batches it would have seen.
#ifndef PSTRAIN_MODELS_MODEL_H_
#define PSTRAIN_MODELS_MODEL_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "coordinator/cluster_coordinator.h"
#include "models/devices.h"
#include "models/lr_schedule.h"

namespace pstrain {

// What a run asks of a model. Fields a model doesn't use are ignored; 0 / empty means "the model's
// default" (each model documents its defaults).
struct ModelOptions {
  // The data: a file or a directory, per model. Default: the model's file under data/.
  std::string data;
  // Passes over the training data. 0: the model's default.
  int epochs = 0;
  // Stop after this many steps in all (whatever the epochs say). 0: no limit.
  int64_t max_steps = 0;
  // Examples per step. 0: the model's default.
  int64_t batch_size = 0;
  // The server-side optimizer's learning rate. 0: the model's default.
  double learning_rate = 0;
  // The learning rate as a function of the step, relative to each of the model's optimizers' rates
  // (models/lr_schedule.h). Default: constant.
  RelativeSchedule lr_schedule;
  // Embedding width. 0: the model's default.
  int64_t embedding_dim = 0;
  // Validation data, held out from training: a seeded fraction of the training data (default 0.1;
  // 0: none), or, when validation_data is set, that file or directory (in the model's data format;
  // the fraction is then ignored). The trainer validates on it every epoch (trainer/trainer.h).
  double validation_fraction = 0.1;
  std::string validation_data;
  // Seeds the split, the shuffles and the initializers. Default 1.
  uint64_t seed = 1;
  // Where the workers compute (a GPU per replica, or the CPU) and how many replicas each runs.
  // Models whose step is too small for a GPU document that they run on the CPU.
  WorkerDevices devices;
  // How many of one worker's steps may be in the dense part of the model (its fixed variables:
  // read, compute, push) at once (worker/dense_turns.h). Default 1: a worker's steps take turns
  // there, so each dense gradient is computed on weights holding the worker's earlier steps'
  // updates; 0: no limit (every step in flight reads and pushes at will). Models without a dense
  // part ignore it.
  int dense_turns = 1;
  // A synchronous worker's part of the training data (set by trainer/mirrored_strategy.h): this
  // process is rank `data_shard` of `data_shards` and trains on its part of every step's batch.
  // Models that draw a step's batch by its number split it by the ClosureContext's replica
  // (models/batches.h, ReplicaShare) and ignore these; the tabular model, which streams its
  // files, reads part `data_shard` of them, batch_size / data_shards examples a step (TF's
  // per-replica batch). Default 0 of 1: all of it.
  int data_shard = 0;
  int data_shards = 1;
  // Model-specific settings by name (e.g. "user_col" for the ratings model); each model lists
  // those it reads and rejects unknown ones.
  std::map<std::string, std::string> extra;
};

// Metrics of a run: name -> value (e.g. "test_rmse", "baseline_test_rmse"), and notes (counts,
// data facts) for the summary.
struct ModelMetrics {
  std::map<std::string, double> values;
  std::map<std::string, std::string> notes;
};

class Model {
 public:
  virtual ~Model() = default;

  // "movielens_mf".
  virtual std::string name() const = 0;

  // Loads what the coordinator needs of the data, creates the variables on the ps tasks and the
  // per-worker data resources. Called once, before any restore. Errors: bad options or data
  // (kInvalidArgument, kNotFound naming the file), and the cluster's.
  virtual absl::Status Setup(ClusterCoordinator* coordinator) = 0;

  // Steps of the whole run, steps per pass over the training data, and examples per step (the last
  // batch of an epoch may be smaller).
  virtual int64_t total_steps() const = 0;
  virtual int64_t steps_per_epoch() const = 0;
  virtual int64_t examples_per_step() const = 0;

  // Schedules training step `step` in [0, total_steps()). The value's outputs are
  // {loss: float32 scalar, the batch's mean loss; examples: int64 scalar}.
  virtual absl::StatusOr<RemoteValue> ScheduleStep(ClusterCoordinator* coordinator,
                                                   int64_t step) = 0;

  // Evaluates the current variables on the test data (and the model's baseline).
  virtual absl::StatusOr<ModelMetrics> Evaluate(ClusterCoordinator* coordinator) = 0;

  // Validation: whether the model holds validation data (ModelOptions::validation_fraction or
  // validation_data); the current variables' metrics on it, each named "val_..." (a baseline's
  // too, "val_baseline_..."); and the metric the trainer watches by default for early stopping and
  // the best checkpoint ("val_rmse").
  virtual bool has_validation() const = 0;
  virtual absl::StatusOr<ModelMetrics> Validate(ClusterCoordinator* coordinator) = 0;
  virtual std::string validation_metric() const = 0;

  // What predicting outside the cluster needs to know of this model once Setup ran (models/
  // serving_head.h): JSON text, stored in every checkpoint and in an exported model. Errors:
  // kUnimplemented for a model that can't be served (the default).
  virtual absl::StatusOr<std::string> ServingConfig() const {
    return absl::UnimplementedError(absl::StrCat(name(), " can't be served outside the cluster"));
  }

  // Models whose data the coordinator deals (coordinator/split_ledger.h): once the trainer ran
  // total_steps(), how many more steps the data not yet trained needs (the epoch ends when its
  // last row is trained, not at a count of steps: batches can come short at the end); the trainer
  // runs them and asks again, until 0. Default 0.
  virtual int64_t PendingSteps() const { return 0; }
  // Models that follow their data (online training: more arrives while the job runs): whether this
  // one does (its total_steps() is then a bound it never reaches: it trains until stopped); and a
  // wait, before step `step` is scheduled, until there are rows for it, polling `stop` (false:
  // `stop` said to stop first). Errors: the data's (a file that arrived and can't be read). Default:
  // no, and true at once.
  virtual bool follows_data() const { return false; }
  virtual absl::StatusOr<bool> WaitForStep(int64_t step, const std::function<bool()>& stop) {
    return true;
  }
  // Each collected step's outputs (in step order), for a model that keeps figures of its own over
  // them; and those figures, by name (progressive validation's: progressive_auc, ...), which the
  // trainer writes to TensorBoard beside the loss and puts in the run's summary. Default: none.
  virtual void StepCollected(int64_t step, const std::vector<Tensor>& outputs) {}
  virtual std::map<std::string, double> StepFigures() const { return {}; }
  // A few words the progress line shows after its figures (e.g. the data dealt so far); empty:
  // none. Default: none.
  virtual std::string ProgressNote() const { return ""; }

  // What the model keeps of its own in a checkpoint (e.g. which data of the epoch was trained),
  // by key, and its restore (a run resumed at `step`, before its first step; `state` may lack the
  // model's keys: a checkpoint of another strategy or an older one). Errors (RestoreState):
  // kInvalidArgument for a state of other data. Default: nothing.
  virtual std::map<std::string, std::string> CheckpointState() const { return {}; }
  virtual absl::Status RestoreState(int64_t step, const std::map<std::string, std::string>& state) {
    return absl::OkStatus();
  }
};

}  // namespace pstrain

#endif  // PSTRAIN_MODELS_MODEL_H_
