#include "trainer/evaluator.h"

#include <filesystem>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "coordinator/checkpoint_files.h"
#include "coordinator/checkpoint_manager.h"
#include "coordinator/cluster_coordinator.h"
#include "coordinator/in_process_cluster.h"
#include "models/registry.h"
#include "models/serving_head.h"
#include "trainer/event_writer.h"
#include "trainer/trainer.h"

namespace pstrain {
namespace {

// The complete checkpoints of `dir` newer than `after`, oldest first (none if `dir` doesn't exist
// yet: the job hasn't saved).
absl::StatusOr<std::vector<CheckpointEntry>> NewCheckpoints(const std::string& dir, int64_t after) {
  absl::StatusOr<std::vector<CheckpointEntry>> all = ListCheckpointDirs(dir);
  if (all.status().code() == absl::StatusCode::kNotFound) return std::vector<CheckpointEntry>{};
  RETURN_IF_ERROR(all.status());
  std::vector<CheckpointEntry> out;
  for (CheckpointEntry& e : *all) {
    if (e.complete && e.step > after) out.push_back(std::move(e));
  }
  return out;
}

bool Stopped(const absl::Notification* stop) { return stop != nullptr && stop->HasBeenNotified(); }

}  // namespace

absl::StatusOr<std::vector<Evaluation>> RunEvaluator(const std::string& model_name,
                                                     const ModelOptions& model_options,
                                                     const EvaluatorOptions& options,
                                                     const absl::Notification* stop) {
  if (options.checkpoint_dir.empty()) {
    return absl::InvalidArgumentError("evaluator: no checkpoint directory to watch");
  }
  if (options.max_evaluations < 0) {
    return absl::InvalidArgumentError("evaluator: max_evaluations must be >= 0");
  }
  // A private cluster: the checkpoint is read into it, no task of the job is involved.
  ASSIGN_OR_RETURN(std::shared_ptr<const ClosureRegistry> registry,
                   TrainingRegistry(options.replica_groups != nullptr
                                        ? options.replica_groups
                                        : std::make_shared<ReplicaGroups>()));
  InProcessClusterOptions cluster_options;
  cluster_options.num_workers = 1;
  cluster_options.num_ps = 1;
  cluster_options.registry = registry;
  ASSIGN_OR_RETURN(std::unique_ptr<InProcessCluster> cluster,
                   InProcessCluster::Start(cluster_options));
  ASSIGN_OR_RETURN(std::unique_ptr<ClusterCoordinator> coordinator,
                   ClusterCoordinator::Create(cluster->spec()));
  ASSIGN_OR_RETURN(std::unique_ptr<Model> model, CreateModel(model_name, model_options));
  RETURN_IF_ERROR(model->Setup(coordinator.get()));
  CheckpointOptions c;
  c.dir = options.checkpoint_dir;
  ASSIGN_OR_RETURN(std::unique_ptr<CheckpointManager> checkpoints,
                   CheckpointManager::Create(c, coordinator->ps()->clients(),
                                             coordinator->variables()));
  std::unique_ptr<EventWriter> events;
  if (!options.logdir.empty()) {
    ASSIGN_OR_RETURN(events, EventWriter::Create(
                                 (std::filesystem::path(options.logdir) / "eval").string()));
  }

  std::vector<Evaluation> done;
  const absl::Notification never;
  int64_t last_step = -1;
  absl::Time last_new = absl::Now();
  while (!Stopped(stop)) {
    ASSIGN_OR_RETURN(std::vector<CheckpointEntry> fresh,
                     NewCheckpoints(options.checkpoint_dir, last_step));
    if (fresh.empty()) {
      if (options.job_done != nullptr && options.job_done->HasBeenNotified()) {
        // Whatever the job saved has been looked at (checked again after it ended).
        ASSIGN_OR_RETURN(fresh, NewCheckpoints(options.checkpoint_dir, last_step));
        if (fresh.empty()) break;
        continue;
      }
      if (absl::Now() - last_new > options.idle_timeout) {
        return absl::DeadlineExceededError(absl::StrCat(
            "evaluator: no new checkpoint in ", options.checkpoint_dir, " for ",
            absl::FormatDuration(options.idle_timeout), " (last evaluated step ", last_step, ")"));
      }
      // The directory is looked at every `poll`; a stop wakes the wait at once.
      (stop != nullptr ? stop : &never)->WaitForNotificationWithTimeout(options.poll);
      continue;
    }
    last_new = absl::Now();
    // Behind: evaluate the newest, say which were passed over.
    Evaluation e;
    e.checkpoint = fresh.back().path;
    e.step = fresh.back().step;
    for (size_t i = 0; i + 1 < fresh.size(); ++i) e.skipped.push_back(fresh[i].path);
    if (!e.skipped.empty()) {
      LOG(INFO) << "evaluator: behind the job, skipping " << absl::StrJoin(e.skipped, ", ");
    }
    absl::StatusOr<RestoredCheckpoint> restored = checkpoints->Restore(e.checkpoint);
    if (!restored.ok()) {
      std::error_code ec;
      if (!std::filesystem::exists(e.checkpoint, ec)) {
        // The job's garbage collection removed it meanwhile: look again.
        LOG(INFO) << "evaluator: " << e.checkpoint << " was deleted before it could be read";
        last_step = e.step;
        continue;
      }
      return restored.status();
    }
    auto model_state = restored->state.find(kCheckpointModelKey);
    if (model_state != restored->state.end() && model_state->second != model->name()) {
      return absl::InvalidArgumentError(absl::StrCat("evaluator: checkpoint ", e.checkpoint,
                                                     " is of model ", model_state->second,
                                                     ", not ", model->name()));
    }
    ASSIGN_OR_RETURN(e.metrics, model->Evaluate(coordinator.get()));
    if (options.validate && model->has_validation()) {
      ASSIGN_OR_RETURN(ModelMetrics val, model->Validate(coordinator.get()));
      for (const auto& [name, value] : val.values) e.metrics.values[name] = value;
    }
    e.final = restored->state.count(kFinalState) > 0 ||
              restored->state.count("trainer/stopped_early") > 0 ||
              e.step >= model->total_steps();
    if (events != nullptr) {
      for (const auto& [name, value] : e.metrics.values) {
        RETURN_IF_ERROR(events->WriteScalar(name, e.step, static_cast<float>(value)));
      }
      RETURN_IF_ERROR(events->Flush());
    }
    LOG(INFO) << "evaluator: step " << e.step << " (" << e.checkpoint << ")"
              << (e.final ? ", the job's final checkpoint" : "");
    last_step = e.step;
    if (MetricsRegistry* m = options.metrics; m != nullptr) {
      m->GetCounter("pstrain_evaluator_evaluations_total", "Checkpoints evaluated.")->Increment();
      m->GetCounter("pstrain_evaluator_skipped_total", "Checkpoints passed over when behind.")
          ->Increment(static_cast<int64_t>(e.skipped.size()));
      m->GetGauge("pstrain_evaluator_step", "The last evaluated checkpoint's step.")->Set(e.step);
      for (const auto& [name, value] : e.metrics.values) {
        m->GetGauge("pstrain_evaluator_metric", "The last evaluation's metrics, by name.",
                    {{"metric", name}})
            ->Set(value);
      }
    }
    if (options.on_evaluated) options.on_evaluated(e);
    done.push_back(std::move(e));
    if (done.back().final) break;
    if (options.max_evaluations > 0 && static_cast<int>(done.size()) >= options.max_evaluations) {
      break;
    }
  }
  if (events != nullptr) RETURN_IF_ERROR(events->Close());
  return done;
}

}  // namespace pstrain
