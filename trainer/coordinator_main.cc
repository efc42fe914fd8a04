// The coordinator binary ("chief"): `coordinator --cluster_spec=cluster.json` (or TF_CONFIG), or
// `coordinator --cluster_spec=in_process:workers=2,ps=2` (the default) to start an in-process
// cluster first. It checks every task's health, then runs a job:
//   --job=train (default)  trains --model (default movielens_mf) with checkpoints, resume,
//                          progress, TensorBoard scalars and a final JSON summary line
//   --job=sum              schedules --steps closures, each adding a range of integers into a ps
//                          variable, and checks the total
//   --job=health           stops after the health check
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/byte_size.h"
#include "common/logging.h"
#include "common/stop_signal.h"
#include "cluster/security_flags.h"
#include "cluster/spec_flag.h"
#include "absl/time/clock.h"
#include "coordinator/cluster_coordinator.h"
#include "ps/row_format.h"
#include "cluster/cluster_spec.h"
#include "worker/closure_registry.h"
#include "cluster/task_health.h"
#include "trainer/trainer.h"
#include "models/devices.h"
#include "models/registry.h"
#include "ps/staleness.h"
#include "coordinator/in_process_cluster.h"
#include "common/metrics.h"
#include "common/metrics_http.h"
#include "trainer/evaluator.h"
#include "trainer/mirrored_strategy.h"
#include "absl/synchronization/notification.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, cluster_spec, "in_process:workers=2,ps=2",
          "The cluster: TF_CONFIG-style JSON text, the path of a JSON file, or "
          "in_process:workers=N,ps=M to start the tasks inside this process. When empty, the "
          "TF_CONFIG environment variable is used.");
ABSL_FLAG(std::string, strategy, "parameter_server",
          "train: parameter_server (variables on the ps tasks, asynchronous workers); "
          "multi_worker_mirrored (a replica of every variable on every worker, gradients "
          "all-reduced every step, no ps tasks); or hybrid (dynamic tables on the ps tasks, "
          "updated asynchronously; every fixed variable replicated on the workers and "
          "all-reduced). With --cluster_spec=in_process:workers=N[,ps=M] the workers (and the "
          "hybrid's ps tasks) run in this process; with a cluster of processes, every worker "
          "runs this binary with its --task (or TF_CONFIG's), worker 0 the chief. A worker "
          "failure restarts every worker from the latest checkpoint.");
ABSL_FLAG(int, metrics_port, 0,
          "Serve Prometheus metrics at http://<host>:<port>/metrics (0: none): the coordinator's "
          "(steps, examples, loss, closures, failures, checkpoints) on this port, and with an "
          "in-process cluster each task's on the next ports (ps tasks, then workers; -1: picked "
          "ports, listed on stderr). The evaluator task serves its own.");
ABSL_FLAG(std::string, metrics_host, "localhost",
          "The host the --metrics_port endpoints listen on (0.0.0.0: every interface).");
ABSL_FLAG(std::string, evaluator, "",
          "train: sidecar runs an evaluator beside the job in this process: it evaluates each new "
          "checkpoint (the newest when it falls behind) and writes scalars under <logdir>/eval. "
          "An evaluator task of its own is TF_CONFIG's \"evaluator\" (or --task=evaluator:0).");
ABSL_FLAG(int, max_evaluations, 0,
          "The evaluator stops after this many evaluations (0: after the job's final checkpoint).");
ABSL_FLAG(std::string, task, "",
          "multi_worker_mirrored and hybrid with a cluster of processes: this process's task, "
          "e.g. worker:1 (default: TF_CONFIG's \"task\").");
ABSL_FLAG(std::string, bind_host, "0.0.0.0",
          "multi_worker_mirrored and hybrid with a cluster of processes: the chief serves the "
          "collective rendezvous on this host and its spec address's port.");
ABSL_FLAG(absl::Duration, rejoin_timeout, absl::Minutes(10),
          "multi_worker_mirrored and hybrid with a cluster of processes: how long the workers "
          "wait for every worker to (re)join the group, e.g. a killed one to be started again.");
ABSL_FLAG(absl::Duration, connect_timeout, absl::Seconds(10),
          "How long to wait for each task to answer before calling it unreachable.");
ABSL_FLAG(std::string, job, "train",
          "The job to run: train (--model), sum (a closure-throughput check), or health (only the "
          "health check).");
ABSL_FLAG(std::string, model, "movielens_mf",
          "train: the model (movielens_mf, flights_ctr, fashion_mnist_mlp, tabular).");
ABSL_FLAG(std::string, data, "", "train: the model's data file or directory (default: its files "
          "under data/, made by tools/fetch_data.sh).");
ABSL_FLAG(int, epochs, 0, "train: passes over the data (0: the model's default).");
ABSL_FLAG(int64_t, max_steps, 0, "train: stop after this many steps in all (0: no limit).");
ABSL_FLAG(int64_t, batch_size, 0, "train: examples per step (0: the model's default).");
ABSL_FLAG(double, learning_rate, 0, "train: the server-side optimizer's rate (0: the default).");
ABSL_FLAG(std::string, lr_schedule, "constant",
          "train: the learning rate as a function of the step, relative to each optimizer's rate: "
          "constant; exponential:decay_steps=N,decay_rate=R[,staircase]; "
          "piecewise:boundaries=B0+B1,scales=S0+S1+S2; "
          "cosine:decay_steps=N[,alpha=A][,warmup_steps=W[,warmup_from=F]] "
          "(see docs/training.md).");
ABSL_FLAG(std::string, staleness_scaling, "none",
          "train, parameter_server: how a dense gradient's staleness (gradients applied between "
          "its read and its own apply) scales its learning rate: none, inverse (rate / "
          "staleness), inverse_sqrt (docs/training.md).");
ABSL_FLAG(int, dense_turns, 1,
          "train, parameter_server: how many of one worker's steps may be in the model's dense "
          "part (read the dense weights, compute, push) at once. 1: a worker's steps take turns "
          "there, so a dense gradient is stale only by the other workers' updates; 0: no limit "
          "(every closure in flight reads and pushes at will: faster on some models, less "
          "accurate; docs/training.md).");
ABSL_FLAG(int64_t, embedding_dim, 0, "train: embedding width (0: the model's default).");
ABSL_FLAG(double, validation_fraction, 0.1,
          "train: the fraction of the training data held out for validation (seeded; 0: none).");
ABSL_FLAG(std::string, validation_data, "",
          "train: validate on this file or directory instead (the model's data format).");
ABSL_FLAG(int64_t, validate_every_steps, 0,
          "train: validate every N steps (0: every epoch); also at step 0 and at the end.");
ABSL_FLAG(std::string, early_stopping_metric, "",
          "train: the validation metric watched for early stopping and the best checkpoint "
          "(default: the model's, e.g. val_rmse, val_auc; auc and accuracy are maximized).");
ABSL_FLAG(int, early_stopping_patience, 0,
          "train: stop after N validations in a row without an improvement (0: never stop early).");
ABSL_FLAG(double, early_stopping_min_delta, 0,
          "train: an improvement must beat the best by more than this.");
ABSL_FLAG(bool, keep_best, true,
          "train: keep the best validation's checkpoint (marked BEST in --checkpoint_dir) and run "
          "the final test evaluation on it.");
ABSL_FLAG(int64_t, seed, 1, "train: seeds the split, the shuffles and the initializers.");
ABSL_FLAG(std::string, device, "auto",
          "train: where the workers compute: auto (a GPU per replica when the worker has GPUs and a "
          "CUDA build, else the CPU), cpu, cuda.");
ABSL_FLAG(int, replicas, 0,
          "train: replicas per worker, each on a slice of the batch, their gradients all-reduced "
          "(0: one per GPU, or one on the CPU).");
ABSL_FLAG(std::string, user_col, "", "movielens_mf: the user column (default userId).");
ABSL_FLAG(std::string, item_col, "", "movielens_mf: the item column (default movieId).");
ABSL_FLAG(std::string, rating_col, "", "movielens_mf: the rating column (default rating).");
ABSL_FLAG(std::string, feature_spec, "",
          "tabular: the JSON feature spec (label, features, split, model; "
          "see docs/feature-spec.md).");
ABSL_FLAG(std::string, bad_rows, "",
          "tabular: error (default: the first bad row stops the job, naming its file, line and "
          "column) or skip (such rows are skipped and counted in the summary).");
ABSL_FLAG(bool, follow, false,
          "tabular: follow --data (a directory) for new files, training each once as it arrives, "
          "until SIGINT/SIGTERM (online training, docs/online.md).");
ABSL_FLAG(std::vector<std::string>, model_opt, {},
          "train: more model options as key=value,key=value (each model lists its own).");
ABSL_FLAG(std::string, checkpoint_dir, "runs/{model}/checkpoints",
          "Checkpoints go here ({model} is replaced; empty: no checkpoints).");
ABSL_FLAG(std::string, restore, "latest",
          "latest: resume from the newest checkpoint in --checkpoint_dir if any; none: start "
          "fresh; or the path of one checkpoint.");
ABSL_FLAG(bool, restore_skip_missing, false,
          "Variables the restored checkpoint lacks keep their initial values (default: an error "
          "naming them).");
ABSL_FLAG(int64_t, checkpoint_every_steps, 0, "Save a checkpoint every N steps (0: not by steps).");
ABSL_FLAG(absl::Duration, checkpoint_every, absl::Seconds(30),
          "Save a checkpoint this often (0: not by time). A final one is always saved.");
ABSL_FLAG(int, keep_checkpoints, 3,
          "Checkpoints kept (with --checkpoint_incremental, whole chains: a checkpoint stays while "
          "it is one of the newest N or the base of one).");
ABSL_FLAG(bool, checkpoint_incremental, false,
          "Incremental checkpoints: after a full one, each save holds only the dynamic tables' keys "
          "changed or erased since the previous (fixed variables are saved whole every time).");
ABSL_FLAG(int, full_checkpoint_every, 10,
          "With --checkpoint_incremental: checkpoints per chain (a full one, then deltas).");
ABSL_FLAG(std::string, ps_memory_budget, "0",
          "In-process cluster: each ps task's memory budget (bytes, or with K, M, G, T; 0: none). "
          "With separate processes, give each ps_server --memory_budget.");
ABSL_FLAG(bool, disk_tier, false,
          "Every dynamic table gets a disk tier: the rows past a ps's memory budget move to its "
          "local disk (RocksDB) and come back when used, instead of the job failing at the "
          "budget. With an in-process cluster, --ps_disk_dir says where; separate ps_server "
          "processes take --disk_dir.");
ABSL_FLAG(std::string, table_format, "",
          "Every dynamic table stores its rows as float32, float16, bfloat16 or int8 (with each "
          "row's range); lookups and the optimizer still compute in float32, updates are rounded "
          "stochastically. Empty: each table's own (a spec's model.row_format; float32).");
ABSL_FLAG(std::string, table_slot_format, "",
          "Every dynamic table stores its optimizer slots as float32, float16 or bfloat16. Empty: "
          "each table's own (a spec's model.slot_format; float32).");
ABSL_FLAG(std::string, ps_disk_dir, "",
          "In-process cluster: where each ps task's disk tiers go (empty: a temporary directory).");
ABSL_FLAG(std::string, logdir, "runs/{model}",
          "TensorBoard event files go here ({model} is replaced; empty: none).");
ABSL_FLAG(absl::Duration, progress_interval, absl::Seconds(5),
          "train: the least time between two progress lines when stderr is not a terminal (a "
          "terminal's one line is redrawn up to 10 times a second).");
ABSL_FLAG(int64_t, steps, 2000, "sum job: closures to schedule.");
ABSL_FLAG(int64_t, rows_per_step, 1000, "sum job: integers each closure adds.");
ABSL_FLAG(int64_t, work_us, 0,
          "sum job: simulated compute per closure, in microseconds (at most 1 s).");

namespace pstrain {
namespace {

// This process's metrics (--metrics_port): the chief's, or the evaluator's. Null without.
MetricsRegistry* process_metrics = nullptr;

int Fail(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return 2;
}

// Schedules --steps closures, each adding [begin, end) into an int64 ps variable, then checks the
// total against n(n-1)/2. Closures run at least once: a worker that dies after adding but before
// answering makes its closure run again, so under failures the total can exceed the expected one.
int RunSumJob(const ClusterSpec& spec) {
  const int64_t steps = absl::GetFlag(FLAGS_steps);
  const int64_t rows = absl::GetFlag(FLAGS_rows_per_step);
  if (steps < 1 || rows < 1) return Fail("--steps and --rows_per_step must be at least 1");
  CoordinatorOptions coordinator_options;
  coordinator_options.metrics = process_metrics;
  absl::StatusOr<std::unique_ptr<ClusterCoordinator>> coordinator =
      ClusterCoordinator::Create(spec, coordinator_options);
  if (!coordinator.ok()) return Fail(std::string(coordinator.status().message()));
  VariableSpec total_spec;
  total_spec.name = kSumJobVariable;
  total_spec.shape = {1};
  total_spec.dtype = DType::kInt64;
  absl::StatusOr<ShardedVariable> total = (*coordinator)->variables()->Create(total_spec);
  if (!total.ok()) return Fail(std::string(total.status().message()));
  // Start from zero even if the ps tasks kept the variable from an earlier run.
  if (absl::Status s = total->AssignAll(std::string(8, '\0')); !s.ok()) {
    return Fail(std::string(s.message()));
  }
  const absl::Time start = absl::Now();
  for (int64_t step = 0; step < steps; ++step) {
    std::vector<Tensor> args = {Tensor::Scalar<int64_t>(step * rows),
                                Tensor::Scalar<int64_t>((step + 1) * rows),
                                Tensor::Scalar<int64_t>(absl::GetFlag(FLAGS_work_us))};
    absl::StatusOr<RemoteValue> value = (*coordinator)->Schedule("add_range", std::move(args));
    if (!value.ok()) return Fail(std::string(value.status().message()));
    if ((step + 1) % std::max<int64_t>(1, steps / 10) == 0) {
      std::printf("scheduled %lld/%lld closures, %d/%d workers healthy\n",
                  static_cast<long long>(step + 1), static_cast<long long>(steps),
                  (*coordinator)->num_healthy_workers(), (*coordinator)->num_workers());
      std::fflush(stdout);
    }
  }
  if (absl::Status s = (*coordinator)->Join(); !s.ok()) return Fail(std::string(s.message()));
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  absl::StatusOr<std::string> bytes = total->ReadAll();
  if (!bytes.ok()) return Fail(std::string(bytes.status().message()));
  int64_t got = 0;
  std::memcpy(&got, bytes->data(), 8);
  const int64_t n = steps * rows;
  const int64_t exact = (n % 2 == 0) ? (n / 2) * (n - 1) : n * ((n - 1) / 2);  // 0 + ... + n-1
  std::printf("{\"job\": \"sum\", \"closures\": %lld, \"total\": %lld, \"expected\": %lld, "
              "\"closures_per_s\": %.0f, \"wall_s\": %.3f}\n",
              static_cast<long long>(steps), static_cast<long long>(got),
              static_cast<long long>(exact), steps / seconds, seconds);
  std::fflush(stdout);
  if (got < exact) return Fail("the total is short: a closure was lost");
  return 0;
}

std::string WithModel(std::string text, const std::string& model) {
  const size_t at = text.find("{model}");
  if (at != std::string::npos) text.replace(at, 7, model);
  return text;
}

// How a training job runs: on a parameter-server cluster (`spec`), or synchronously.
struct JobPlan {
  const ClusterSpec* spec = nullptr;  // parameter server
  // Synchronous: in this process (`in_process_workers` > 0, with `in_process_ps` shared ps tasks
  // for hybrid), or this process's worker of a cluster (`task`).
  int in_process_workers = 0;
  int in_process_ps = 0;
  std::optional<MirroredTask> task;
  // This process's replica groups, which every worker it runs takes its devices from (the
  // in-process cluster's, the sidecar evaluator's, the synchronous strategies').
  std::shared_ptr<ReplicaGroups> replica_groups;
};

// The model's options from the flags. Errors: kInvalidArgument naming the bad flag.
absl::StatusOr<ModelOptions> ModelOptionsFromFlags() {
  auto bad = [](const std::string& m) { return absl::InvalidArgumentError(m); };
  ModelOptions options;
  options.data = absl::GetFlag(FLAGS_data);
  options.epochs = absl::GetFlag(FLAGS_epochs);
  options.max_steps = absl::GetFlag(FLAGS_max_steps);
  options.batch_size = absl::GetFlag(FLAGS_batch_size);
  options.learning_rate = absl::GetFlag(FLAGS_learning_rate);
  options.embedding_dim = absl::GetFlag(FLAGS_embedding_dim);
  absl::StatusOr<RelativeSchedule> schedule = ParseLrSchedule(absl::GetFlag(FLAGS_lr_schedule));
  if (!schedule.ok()) return schedule.status();
  options.lr_schedule = *std::move(schedule);
  if (options.epochs < 0 || options.max_steps < 0 || options.batch_size < 0 ||
      options.learning_rate < 0 || options.embedding_dim < 0 || absl::GetFlag(FLAGS_seed) < 0) {
    return bad("--epochs, --max_steps, --batch_size, --learning_rate, --embedding_dim and --seed "
               "must not be negative");
  }
  options.seed = static_cast<uint64_t>(absl::GetFlag(FLAGS_seed));
  options.validation_fraction = absl::GetFlag(FLAGS_validation_fraction);
  options.validation_data = absl::GetFlag(FLAGS_validation_data);
  if (!(options.validation_fraction >= 0 && options.validation_fraction < 1)) {
    return bad(absl::StrCat("--validation_fraction=", options.validation_fraction,
                            " must be in [0, 1)"));
  }
  absl::StatusOr<DeviceOptions::Kind> device = ParseDeviceKind(absl::GetFlag(FLAGS_device));
  if (!device.ok()) return bad(absl::StrCat("--device: ", device.status().message()));
  options.devices.kind = *device;
  options.devices.replicas = absl::GetFlag(FLAGS_replicas);
  if (options.devices.replicas < 0) {
    return bad(absl::StrCat("--replicas=", options.devices.replicas, " must not be negative"));
  }
  options.dense_turns = absl::GetFlag(FLAGS_dense_turns);
  if (options.dense_turns < 0) {
    return bad(absl::StrCat("--dense_turns=", options.dense_turns, " must not be negative"));
  }
  for (const char* col : {"user_col", "item_col", "rating_col"}) {
    const std::string value = col == std::string("user_col")   ? absl::GetFlag(FLAGS_user_col)
                              : col == std::string("item_col") ? absl::GetFlag(FLAGS_item_col)
                                                               : absl::GetFlag(FLAGS_rating_col);
    if (!value.empty()) options.extra[col] = value;
  }
  if (!absl::GetFlag(FLAGS_feature_spec).empty()) {
    options.extra["feature_spec"] = absl::GetFlag(FLAGS_feature_spec);
  }
  if (!absl::GetFlag(FLAGS_bad_rows).empty()) options.extra["bad_rows"] = absl::GetFlag(FLAGS_bad_rows);
  if (absl::GetFlag(FLAGS_follow)) options.extra["follow"] = "true";
  for (const std::string& kv : absl::GetFlag(FLAGS_model_opt)) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return bad(absl::StrCat("--model_opt: \"", kv, "\" is not key=value"));
    }
    options.extra[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return options;
}

// The evaluator's options from the flags (the job's checkpoint and log directories).
EvaluatorOptions EvaluatorOptionsFromFlags(const std::string& model) {
  EvaluatorOptions e;
  e.metrics = process_metrics;
  e.checkpoint_dir = WithModel(absl::GetFlag(FLAGS_checkpoint_dir), model);
  e.logdir = WithModel(absl::GetFlag(FLAGS_logdir), model);
  e.max_evaluations = absl::GetFlag(FLAGS_max_evaluations);
  e.on_evaluated = [](const Evaluation& ev) {
    std::string metrics;
    for (const auto& [name, value] : ev.metrics.values) {
      if (absl::StartsWith(name, "test_") || absl::StartsWith(name, "val_")) {
        absl::StrAppendFormat(&metrics, " %s=%.6g", name, value);
      }
    }
    std::fprintf(stderr, "evaluator: step %lld%s%s%s\n", static_cast<long long>(ev.step),
                 metrics.c_str(),
                 ev.skipped.empty() ? "" : absl::StrCat(" (skipped ", ev.skipped.size(),
                                                        " older checkpoint(s))").c_str(),
                 ev.final ? " (final)" : "");
  };
  return e;
}

// The evaluator task (TF_CONFIG "evaluator"): evaluates the job's checkpoints as they come, until
// its final one; prints one JSON line per evaluation.
int RunEvaluatorJob(std::shared_ptr<ReplicaGroups> replica_groups) {
  const std::string name = absl::GetFlag(FLAGS_model);
  absl::StatusOr<ModelOptions> options = ModelOptionsFromFlags();
  if (!options.ok()) return Fail(std::string(options.status().message()));
  EvaluatorOptions e = EvaluatorOptionsFromFlags(name);
  if (e.checkpoint_dir.empty()) return Fail("the evaluator needs the job's --checkpoint_dir");
  e.replica_groups = std::move(replica_groups);
  auto log = e.on_evaluated;
  e.on_evaluated = [log](const Evaluation& ev) {
    log(ev);
    nlohmann::json j;
    j["step"] = ev.step;
    j["checkpoint"] = ev.checkpoint;
    j["final"] = ev.final;
    j["skipped"] = ev.skipped.size();
    for (const auto& [k, v] : ev.metrics.values) j[k] = v;
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
  };
  std::fprintf(stderr, "evaluator: watching %s for %s checkpoints\n", e.checkpoint_dir.c_str(),
               name.c_str());
  absl::StatusOr<std::vector<Evaluation>> done = RunEvaluator(name, *options, e);
  if (!done.ok()) return Fail(std::string(done.status().message()));
  return 0;
}

// Trains --model as `plan` says and prints the run's summary as one JSON line. With
// --evaluator=sidecar an evaluator runs beside it in this process.
int RunTrainJob(const JobPlan& plan) {
  const std::string name = absl::GetFlag(FLAGS_model);
  absl::StatusOr<ModelOptions> model_options = ModelOptionsFromFlags();
  if (!model_options.ok()) return Fail(std::string(model_options.status().message()));
  const ModelOptions& options = *model_options;
  TrainerOptions trainer;
  trainer.metrics = process_metrics;
  trainer.checkpoint_dir = WithModel(absl::GetFlag(FLAGS_checkpoint_dir), name);
  trainer.restore = absl::GetFlag(FLAGS_restore);
  trainer.restore_skip_missing = absl::GetFlag(FLAGS_restore_skip_missing);
  trainer.checkpoint_every_steps = absl::GetFlag(FLAGS_checkpoint_every_steps);
  trainer.checkpoint_every = absl::GetFlag(FLAGS_checkpoint_every);
  trainer.placement.tables_disk_tier = absl::GetFlag(FLAGS_disk_tier);
  if (const std::string rows = absl::GetFlag(FLAGS_table_format); !rows.empty()) {
    RowFormat format;
    if (!ParseRowFormat(rows, &format).ok()) {
      return Fail(absl::StrCat("--table_format=", rows,
                               " must be float32, float16, bfloat16 or int8"));
    }
    trainer.placement.tables_row_format = format;
  }
  if (const std::string slots = absl::GetFlag(FLAGS_table_slot_format); !slots.empty()) {
    RowFormat format;
    if (!ParseSlotFormat(slots, &format).ok()) {
      return Fail(absl::StrCat("--table_slot_format=", slots,
                               " must be float32, float16 or bfloat16"));
    }
    trainer.placement.tables_slot_format = format;
  }
  trainer.keep_checkpoints = absl::GetFlag(FLAGS_keep_checkpoints);
  trainer.checkpoint_incremental = absl::GetFlag(FLAGS_checkpoint_incremental);
  trainer.full_checkpoint_every = absl::GetFlag(FLAGS_full_checkpoint_every);
  if (trainer.full_checkpoint_every < 1) {
    return Fail(absl::StrCat("--full_checkpoint_every=", trainer.full_checkpoint_every,
                             " must be at least 1"));
  }
  trainer.logdir = WithModel(absl::GetFlag(FLAGS_logdir), name);
  trainer.progress.line_interval = absl::GetFlag(FLAGS_progress_interval);
  if (trainer.progress.line_interval < absl::ZeroDuration()) {
    return Fail("--progress_interval must not be negative");
  }
  trainer.validate_every_steps = absl::GetFlag(FLAGS_validate_every_steps);
  trainer.monitor = absl::GetFlag(FLAGS_early_stopping_metric);
  trainer.early_stopping_patience = absl::GetFlag(FLAGS_early_stopping_patience);
  trainer.early_stopping_min_delta = absl::GetFlag(FLAGS_early_stopping_min_delta);
  trainer.keep_best = absl::GetFlag(FLAGS_keep_best);
  absl::StatusOr<OptimizerDef::StalenessScaling> scaling =
      ParseStalenessScaling(absl::GetFlag(FLAGS_staleness_scaling));
  if (!scaling.ok()) return Fail(absl::StrCat("--staleness_scaling: ", scaling.status().message()));
  trainer.staleness_scaling = *scaling;
  // The sidecar evaluator: beside the job, until the job's final checkpoint (or the job fails).
  const std::string sidecar = absl::GetFlag(FLAGS_evaluator);
  if (!sidecar.empty() && sidecar != "sidecar") {
    return Fail(absl::StrCat("--evaluator=", sidecar, " is not sidecar (or empty: none)"));
  }
  absl::Notification stop_evaluator, job_done;
  absl::StatusOr<std::vector<Evaluation>> evaluations;
  std::thread evaluator_thread;
  if (!sidecar.empty()) {
    if (trainer.checkpoint_dir.empty()) return Fail("--evaluator=sidecar needs --checkpoint_dir");
    evaluator_thread = std::thread([&] {
      EvaluatorOptions e = EvaluatorOptionsFromFlags(name);
      e.job_done = &job_done;
      e.replica_groups = plan.replica_groups;
      evaluations = RunEvaluator(name, options, e, &stop_evaluator);
    });
  }
  struct JoinEvaluator {
    std::thread* t;
    absl::Notification* stop;
    bool failed = true;
    ~JoinEvaluator() {
      if (!t->joinable()) return;
      if (failed) stop->Notify();  // the job failed: no final checkpoint will come
      t->join();
    }
  } join_evaluator{&evaluator_thread, &stop_evaluator};

  absl::StatusOr<TrainResult> result;
  if (plan.spec == nullptr) {
    MirroredOptions mirrored;
    mirrored.replica_groups = plan.replica_groups;
    absl::StatusOr<MirroredResult> job = absl::InternalError("unset");
    if (plan.task.has_value()) {
      mirrored.join_timeout = absl::GetFlag(FLAGS_rejoin_timeout);
      job = TrainMirroredTask(name, options, trainer, mirrored, *plan.task);
    } else {
      mirrored.num_workers = plan.in_process_workers;
      absl::StatusOr<int64_t> budget = ParseByteSize(absl::GetFlag(FLAGS_ps_memory_budget));
      if (!budget.ok()) return Fail(absl::StrCat("--ps_memory_budget: ", budget.status().message()));
      mirrored.shared_ps_memory_budget_bytes = *budget;
      mirrored.shared_ps_disk_dir = absl::GetFlag(FLAGS_ps_disk_dir);
      job = plan.in_process_ps > 0
                ? TrainHybridInProcess(name, options, trainer, mirrored, plan.in_process_ps)
                : TrainMultiWorkerMirrored(name, options, trainer, mirrored);
    }
    if (!job.ok()) return Fail(std::string(job.status().message()));
    if (job->attempts > 1) {
      std::fprintf(stderr, "note: %d attempt(s) failed and the job resumed from a checkpoint: %s\n",
                   job->attempts - 1, absl::StrJoin(job->failures, "; ").c_str());
    }
    result = std::move(job->chief);
  } else {
    absl::StatusOr<std::unique_ptr<Model>> model = CreateModel(name, options);
    if (!model.ok()) return Fail(std::string(model.status().message()));
    // SIGINT / SIGTERM stop the job between steps, with a final checkpoint (the synchronous
    // strategies' ranks step together, so there a signal ends the job as it always did).
    InstallStopSignals();
    trainer.stop_requested = [] { return StopSignalled(); };
    result = Train(*plan.spec, model->get(), trainer);
  }
  if (!result.ok()) return Fail(std::string(result.status().message()));
  if (evaluator_thread.joinable()) {
    join_evaluator.failed = false;
    job_done.Notify();
    evaluator_thread.join();
    if (!evaluations.ok()) {
      std::fprintf(stderr, "warning: the sidecar evaluator failed: %s\n",
                   std::string(evaluations.status().message()).c_str());
    } else if (!evaluations->empty()) {
      for (const auto& [k, v] : evaluations->back().metrics.values) {
        result->metrics.values["eval_" + k] = v;
      }
      result->metrics.notes["evaluator"] =
          absl::StrCat(evaluations->size(), " checkpoint(s) evaluated, the last at step ",
                       evaluations->back().step);
    }
  }
  if (result->start_step == result->end_step && !result->restored_from.empty()) {
    std::fprintf(stderr,
                 "note: the checkpoint %s already covers all %lld steps, so this run only "
                 "evaluated; pass --restore=none to train again\n",
                 result->restored_from.c_str(), static_cast<long long>(result->end_step));
  }
  std::printf("%s\n", result->ToJson().c_str());
  std::fflush(stdout);
  // Stopped by a signal: the status a shell expects of it (130 for SIGINT, 143 for SIGTERM), its
  // final checkpoint and summary written.
  if (result->interrupted && StopSignalled()) return 128 + StopSignalNumber();
  return 0;
}

int Run() {
  // This process's own metrics endpoint.
  const int metrics_port = absl::GetFlag(FLAGS_metrics_port);
  std::unique_ptr<MetricsRegistry> registry;
  std::unique_ptr<MetricsHttpServer> metrics_server;
  if (metrics_port != 0) {
    if (metrics_port < -1 || metrics_port > 65535) {
      return Fail(absl::StrCat("--metrics_port=", metrics_port, " is not -1, 0 or a port"));
    }
    const std::string task = absl::GetFlag(FLAGS_task).empty() ? "chief" : absl::GetFlag(FLAGS_task);
    registry = std::make_unique<MetricsRegistry>(Labels{{"task", task}});
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> served = MetricsHttpServer::Start(
        absl::GetFlag(FLAGS_metrics_host), std::max(metrics_port, 0), registry.get());
    if (!served.ok()) return Fail(absl::StrCat("--metrics_port: ", served.status().message()));
    metrics_server = *std::move(served);
    process_metrics = registry.get();
    std::fprintf(stderr, "metrics: %s at http://%s/metrics\n", task.c_str(),
                 metrics_server->address().c_str());
  }
  // The process's replica groups: one for every worker this process runs.
  auto replica_groups = std::make_shared<ReplicaGroups>();
  std::string source;
  absl::StatusOr<std::string> spec_flag = ClusterSpecText(absl::GetFlag(FLAGS_cluster_spec), &source);
  if (!spec_flag.ok()) return Fail(std::string(spec_flag.status().message()));
  const std::string& spec_text = *spec_flag;

  // An evaluator task (TF_CONFIG's "task": {"type": "evaluator"}, or --task=evaluator:N): it only
  // watches the job's checkpoints.
  if (!absl::StartsWith(spec_text, "in_process")) {
    absl::StatusOr<ClusterSpec> any = ClusterSpec::FromFlagValue(spec_text, SpecUse::kSynchronous);
    std::optional<TaskRef> task;
    if (any.ok()) task = any->task();
    if (!absl::GetFlag(FLAGS_task).empty()) {
      absl::StatusOr<TaskRef> flag = ParseTaskRef(absl::GetFlag(FLAGS_task));
      if (!flag.ok()) return Fail(absl::StrCat("--task: ", flag.status().message()));
      task = *flag;
    }
    if (task.has_value() && task->type == kEvaluator) return RunEvaluatorJob(replica_groups);
  }

  const std::string strategy = absl::GetFlag(FLAGS_strategy);
  if (strategy == "multi_worker_mirrored" || strategy == "hybrid") {
    const bool hybrid = strategy == "hybrid";
    if (absl::GetFlag(FLAGS_job) != "train") {
      return Fail(absl::StrCat("--strategy=", strategy, " is for --job=train"));
    }
    JobPlan plan;
    plan.replica_groups = replica_groups;
    if (absl::StartsWith(spec_text, "in_process")) {
      const bool names_ps = absl::StrContains(spec_text, "ps=");
      absl::StatusOr<InProcessClusterOptions> options = ParseInProcessSpec(spec_text);
      if (!options.ok()) return Fail(absl::StrCat(source, ": ", options.status().message()));
      if (!hybrid && names_ps) {
        std::fprintf(stderr, "note: multi_worker_mirrored has no ps tasks; the spec's ps=%d is "
                             "not used\n", options->num_ps);
      }
      plan.in_process_workers = options->num_workers;
      plan.in_process_ps = hybrid ? options->num_ps : 0;
      if (hybrid) {
        std::fprintf(stderr, "strategy: hybrid, %d synchronous worker(s), %d shared ps for the "
                             "dynamic tables\n", plan.in_process_workers, plan.in_process_ps);
      } else {
        std::fprintf(stderr, "strategy: multi_worker_mirrored, %d synchronous worker(s), no ps\n",
                     plan.in_process_workers);
      }
      return RunTrainJob(plan);
    }
    absl::StatusOr<ClusterSpec> spec = ClusterSpec::FromFlagValue(spec_text, SpecUse::kSynchronous);
    if (!spec.ok()) return Fail(absl::StrCat(source, ": ", spec.status().message()));
    if (!absl::GetFlag(FLAGS_task).empty()) {
      absl::StatusOr<TaskRef> task = ParseTaskRef(absl::GetFlag(FLAGS_task));
      if (!task.ok()) return Fail(absl::StrCat("--task: ", task.status().message()));
      spec = spec->WithTask(*task);
      if (!spec.ok()) return Fail(absl::StrCat("--task: ", spec.status().message()));
    }
    MirroredTask task{*spec};
    task.hybrid = hybrid;
    // Rank 0 (the chief, else worker 0) serves the rendezvous on --bind_host and its port.
    const TaskRef rank0 = spec->num_tasks(kChief) > 0 ? TaskRef{kChief, 0} : TaskRef{kWorker, 0};
    if (spec->task() == rank0) {
      const std::string address = *spec->address(rank0);
      task.rendezvous_listen =
          absl::StrCat(absl::GetFlag(FLAGS_bind_host), address.substr(address.rfind(':')));
    }
    std::fprintf(stderr, "strategy: %s, %s of %d worker(s)%s\n", strategy.c_str(),
                 spec->task().has_value() ? spec->task()->ToString().c_str() : "(no task)",
                 spec->num_workers() + spec->num_tasks(kChief),
                 hybrid ? absl::StrCat(", ", spec->num_ps(), " shared ps").c_str() : "");
    plan.task = std::move(task);
    return RunTrainJob(plan);
  }
  if (strategy != "parameter_server") {
    return Fail(absl::StrCat("--strategy=", strategy,
                             " is not a strategy (parameter_server, multi_worker_mirrored, "
                             "hybrid)"));
  }
  std::unique_ptr<InProcessCluster> in_process;
  absl::StatusOr<ClusterSpec> spec = absl::InvalidArgumentError("unset");
  if (absl::StartsWith(spec_text, "in_process")) {
    absl::StatusOr<InProcessClusterOptions> options = ParseInProcessSpec(spec_text);
    if (!options.ok()) return Fail(absl::StrCat(source, ": ", options.status().message()));
    absl::StatusOr<std::shared_ptr<const ClosureRegistry>> registry =
        TrainingRegistry(replica_groups);
    if (!registry.ok()) return Fail(std::string(registry.status().message()));
    options->registry = *registry;
    absl::StatusOr<int64_t> budget = ParseByteSize(absl::GetFlag(FLAGS_ps_memory_budget));
    if (!budget.ok()) return Fail(absl::StrCat("--ps_memory_budget: ", budget.status().message()));
    options->ps_memory_budget_bytes = *budget;
    options->ps_disk_dir = absl::GetFlag(FLAGS_ps_disk_dir);
    if (metrics_port != 0) {
      options->metrics_port = metrics_port > 0 ? metrics_port + 1 : 0;
      options->host = absl::GetFlag(FLAGS_metrics_host) == "0.0.0.0" ? "localhost"
                                                                      : absl::GetFlag(FLAGS_metrics_host);
    }
    absl::StatusOr<std::unique_ptr<InProcessCluster>> cluster = InProcessCluster::Start(*options);
    if (!cluster.ok()) return Fail(absl::StrCat("in-process cluster: ", cluster.status().message()));
    in_process = std::move(*cluster);
    spec = in_process->spec();
    for (const auto& [task, address] : in_process->metrics_addresses()) {
      std::fprintf(stderr, "metrics: %s at http://%s/metrics\n", task.c_str(), address.c_str());
    }
  } else {
    spec = ClusterSpec::FromFlagValue(spec_text);
    if (!spec.ok()) return Fail(absl::StrCat(source, ": ", spec.status().message()));
  }

  // The health table: the health and sum jobs' output; a training job keeps stdout for its one
  // JSON summary line and writes the table to stderr.
  FILE* table = absl::GetFlag(FLAGS_job) == "train" ? stderr : stdout;
  std::fprintf(table, "cluster: %d worker(s), %d ps\n", spec->num_workers(), spec->num_ps());
  int unreachable = 0;
  std::string first_error;
  for (const TaskRef& task : spec->AllTasks()) {
    if (task.type != kPs && task.type != kWorker) continue;  // chief (us), evaluator: no server
    const std::string address = *spec->address(task);
    absl::StatusOr<HealthResponse> health =
        CheckTaskHealth(task, address, absl::GetFlag(FLAGS_connect_timeout));
    if (!health.ok()) {
      ++unreachable;
      if (first_error.empty()) first_error = std::string(health.status().message());
      std::fprintf(table, "  %-10s %-22s DOWN  %s\n", task.ToString().c_str(), address.c_str(),
                   std::string(health.status().message()).c_str());
      continue;
    }
    std::fprintf(table, "  %-10s %-22s OK    incarnation=%016llx pid=%d\n",
                 task.ToString().c_str(), address.c_str(),
                 static_cast<unsigned long long>(health->incarnation()), health->pid());
  }
  std::fflush(table);
  if (unreachable > 0) {
    return Fail(absl::StrCat(unreachable, " task(s) not healthy; first: ", first_error));
  }
  std::fprintf(table, "all tasks healthy\n");
  std::fflush(table);
  if (absl::GetFlag(FLAGS_job) == "health") return 0;
  if (absl::GetFlag(FLAGS_job) == "sum") return RunSumJob(*spec);
  if (absl::GetFlag(FLAGS_job) == "train") {
    JobPlan plan;
    plan.spec = &*spec;
    plan.replica_groups = replica_groups;
    return RunTrainJob(plan);
  }
  return Fail(
      absl::StrCat("--job=", absl::GetFlag(FLAGS_job), " is not a job (train, sum, health)"));
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  pstrain::InstallFailureSignalHandler(argv[0]);
  absl::SetProgramUsageMessage(
      "Drives a training job on a cluster.\n"
      "Usage: coordinator [--model=movielens_mf] [--cluster_spec=cluster.json | "
      "--cluster_spec=in_process:workers=2,ps=2]");
  absl::ParseCommandLine(argc, argv);
  pstrain::SetMinLogLevelFromEnv();
  // Under `bazel run`, relative paths (data/, runs/) mean the user's directory, not the runfiles.
  if (const char* dir = std::getenv("BUILD_WORKING_DIRECTORY"); dir != nullptr && *dir != '\0') {
    if (::chdir(dir) != 0) std::fprintf(stderr, "warning: can't chdir to %s\n", dir);
  }
  if (absl::Status security = pstrain::ApplySecurityFlags(); !security.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(security.message()).c_str());
    return 2;
  }
  return pstrain::Run();
}
