#include "trainer/trainer.h"

#include <deque>
#include <memory>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "absl/strings/str_format.h"
#include "coordinator/checkpoint_manager.h"
#include "trainer/early_stopping.h"
#include "models/serving_head.h"
#include "trainer/event_writer.h"
#include "nlohmann/json.hpp"

namespace pstrain {
namespace {

constexpr char kExamplesState[] = "trainer/examples";
constexpr const char* kModelState = kCheckpointModelKey;
// Set in the checkpoint of a run that stopped early: a rerun resumes there and trains no further.
constexpr char kStoppedEarlyState[] = "trainer/stopped_early";
// The model's serving config (Model::ServingConfig), for export and serving (serving/).
constexpr const char* kServingState = kCheckpointServingKey;

// A model's validation or evaluation ends CANCELLED when one of its closures was cancelled because
// the job failed elsewhere (a worker can't set up its dataset, say): that first error is what the
// user needs, not the cancellation.
template <typename T>
absl::StatusOr<T> PreferJobError(absl::StatusOr<T> result, ClusterCoordinator* coordinator) {
  if (result.status().code() == absl::StatusCode::kCancelled) {
    RETURN_IF_ERROR(coordinator->Join());
  }
  return result;
}

}  // namespace

std::string TrainResult::ToJson() const {
  nlohmann::json j;
  j["model"] = model;
  j["workers"] = num_workers;
  j["ps"] = num_ps;
  j["start_step"] = start_step;
  j["end_step"] = end_step;
  if (!restored_from.empty()) j["restored_from"] = restored_from;
  if (!last_checkpoint.empty()) j["checkpoint"] = last_checkpoint;
  j["examples"] = examples;
  j["train_seconds"] = train_seconds;
  j["examples_per_sec"] = examples_per_sec;
  j["final_loss"] = final_loss;
  for (const auto& [k, v] : metrics.values) j[k] = v;
  if (!monitor.empty()) {
    j["validations"] = validations;
    j["monitor"] = monitor;
    if (best_step >= 0) {
      j["best_step"] = best_step;
      j["best_" + monitor] = best_value;
    }
    j["stopped_early"] = stopped_early;
  }
  if (!evaluated.empty()) j["evaluated"] = evaluated;
  for (const auto& [k, v] : metrics.notes) j[k] = v;
  for (const auto& [name, t] : tables) {
    j["dynamic_tables"][name] = {{"keys", t.keys()},
                         {"bytes", t.bytes()},
                         {"admitted", t.admitted()},
                         {"rejected", t.rejected()},
                         {"evicted_ttl", t.evicted_ttl()},
                         {"evicted_capacity", t.evicted_capacity()},
                         {"erased", t.erased()}};
  }
  return j.dump();
}

absl::StatusOr<TrainResult> Train(const ClusterSpec& spec, Model* model,
                                  const TrainerOptions& options,
                                  CoordinatorOptions coordinator_options) {
  if (options.checkpoint_every_steps < 0 || options.max_pending_steps < 1 ||
      options.summary_every_steps < 1 || options.keep_checkpoints < 1 ||
      options.validate_every_steps < 0 || options.early_stopping_patience < 0 ||
      !(options.early_stopping_min_delta >= 0)) {
    return absl::InvalidArgumentError(
        "trainer: checkpoint_every_steps, validate_every_steps, early_stopping_patience and "
        "early_stopping_min_delta must be >= 0, and max_pending_steps, summary_every_steps and "
        "keep_checkpoints >= 1");
  }
  if (options.restore.empty()) {
    return absl::InvalidArgumentError("trainer: restore must be latest, none or a checkpoint path");
  }
  // The checkpoint manager exists only once the coordinator does; the recovery hook reads it then.
  std::unique_ptr<CheckpointManager> checkpoints;
  coordinator_options.placement = options.placement;
  coordinator_options.metrics = options.metrics;
  coordinator_options.on_ps_restarted = [&checkpoints, &options](int ps) -> absl::Status {
    if (options.ps_restart_ends_run) {
      return absl::UnavailableError(absl::StrCat(
          "ps:", ps, " restarted without its shards; this run ends (the job resumes every worker "
          "from the latest checkpoint)"));
    }
    if (checkpoints == nullptr) {
      LOG(WARNING) << "ps:" << ps << " restarted and there are no checkpoints: its shards start "
                   << "again from their initial values";
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(std::optional<RestoredCheckpoint> r, checkpoints->RestorePs(ps));
    if (r.has_value()) {
      LOG(WARNING) << "ps:" << ps << " restarted: its shards were reloaded from the checkpoint at "
                   << "step " << r->step << "; the updates they got since then are lost";
    } else {
      LOG(WARNING) << "ps:" << ps << " restarted before the first checkpoint: its shards start "
                   << "again from their initial values";
    }
    return absl::OkStatus();
  };
  ASSIGN_OR_RETURN(std::unique_ptr<ClusterCoordinator> coordinator,
                   ClusterCoordinator::Create(spec, coordinator_options));

  TrainResult result;
  result.model = model->name();
  result.num_workers = coordinator->num_workers();
  result.num_ps = coordinator->ps()->num_ps();
  RETURN_IF_ERROR(model->Setup(coordinator.get()));
  const int64_t total = model->total_steps();
  const bool validating = model->has_validation() && options.validate;
  if (!validating && options.early_stopping_patience > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "early stopping needs validation data, and ", model->name(),
        " has none (validation_fraction is 0 and no validation_data was given)"));
  }
  EarlyStoppingOptions watch;
  watch.monitor = options.monitor.empty() ? model->validation_metric() : options.monitor;
  watch.patience = options.early_stopping_patience;
  watch.min_delta = options.early_stopping_min_delta;
  ASSIGN_OR_RETURN(EarlyStopping watcher, EarlyStopping::Create(watch));
  if (validating) result.monitor = watch.monitor;

  int64_t start = 0;
  int64_t examples_before = 0;
  if (!options.checkpoint_dir.empty()) {
    CheckpointOptions c;
    c.dir = options.checkpoint_dir;
    c.keep = options.keep_checkpoints;
    c.incremental = options.checkpoint_incremental;
    c.full_every = options.full_checkpoint_every;
    ASSIGN_OR_RETURN(checkpoints, CheckpointManager::Create(c, coordinator->ps()->clients(),
                                                            coordinator->variables()));
  }
  std::optional<RestoredCheckpoint> restored;
  RestoreOptions restore_options;
  restore_options.skip_missing = options.restore_skip_missing;
  restore_options.only_ps = options.restore_only_ps;
  if (options.restore != "none" && options.restore != "latest") {
    if (checkpoints == nullptr) {
      // A checkpoint path without a checkpoint_dir: restore from it, save nowhere.
      CheckpointOptions c;
      c.dir = options.restore + "/..";
      ASSIGN_OR_RETURN(checkpoints, CheckpointManager::Create(c, coordinator->ps()->clients(),
                                                              coordinator->variables()));
    }
    ASSIGN_OR_RETURN(restored, checkpoints->Restore(options.restore, restore_options));
  } else if (options.restore == "latest" && checkpoints != nullptr) {
    ASSIGN_OR_RETURN(restored, checkpoints->RestoreLatest(restore_options));
  }
  if (restored.has_value()) {
    auto it = restored->state.find(kModelState);
    if (it != restored->state.end() && it->second != model->name()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint ", restored->path, " is of model ", it->second, ", not ", model->name()));
    }
    start = std::min(restored->step, total);
    it = restored->state.find(kExamplesState);
    if (it != restored->state.end()) (void)absl::SimpleAtoi(it->second, &examples_before);
    result.restored_from = restored->path;
    watcher.Restore(restored->state);
    result.stopped_early = restored->state.count(kStoppedEarlyState) > 0;
    LOG(INFO) << "resuming " << model->name() << " at step " << start << " of " << total
              << " from " << restored->path
              << (result.stopped_early ? " (that run stopped early: no more training)" : "");
  }
  result.start_step = start;
  // The end: the model's, or where a resumed run had stopped early.
  int64_t end = result.stopped_early ? start : total;
  if (checkpoints != nullptr && options.save_checkpoints) {
    // A best mark from another run (or another point of this one's past) means nothing now.
    ASSIGN_OR_RETURN(std::optional<BestMarker> mark, checkpoints->Best());
    if (mark.has_value() && (!watcher.has_best() || mark->step != watcher.best_step())) {
      RETURN_IF_ERROR(checkpoints->ClearBest());
    }
  }

  std::unique_ptr<EventWriter> events;
  if (!options.logdir.empty()) {
    ASSIGN_OR_RETURN(events, EventWriter::Create(options.logdir));
  }
  ProgressOptions progress_options = options.progress;
  progress_options.total_steps = end;
  progress_options.initial_step = start;
  progress_options.initial_examples = examples_before;
  ASSIGN_OR_RETURN(std::unique_ptr<ProgressReporter> progress,
                   ProgressReporter::Create(progress_options));

  int64_t examples = examples_before;
  // Metrics (TrainerOptions::metrics).
  struct {
    Counter* steps = nullptr;
    Counter* examples = nullptr;
    Gauge* step = nullptr;
    Gauge* loss = nullptr;
    Gauge* examples_per_sec = nullptr;
    Counter* checkpoints = nullptr;
    Histogram* checkpoint_seconds = nullptr;
    Counter* validations = nullptr;
  } metric;
  if (MetricsRegistry* m = options.metrics; m != nullptr) {
    const Labels model_label{{"model", model->name()}};
    metric.steps = m->GetCounter("pstrain_trainer_steps_total", "Training steps done.", model_label);
    metric.examples = m->GetCounter("pstrain_trainer_examples_total", "Examples trained on.",
                                    model_label);
    metric.step = m->GetGauge("pstrain_trainer_step", "The last step done.", model_label);
    metric.loss = m->GetGauge("pstrain_trainer_loss", "The last step's mean loss.", model_label);
    metric.examples_per_sec = m->GetGauge("pstrain_trainer_examples_per_second",
                                          "Examples per second over the last summary interval.",
                                          model_label);
    metric.checkpoints = m->GetCounter("pstrain_trainer_checkpoints_total", "Checkpoints saved.",
                                       model_label);
    metric.checkpoint_seconds =
        m->GetHistogram("pstrain_trainer_checkpoint_seconds",
                        "Time to save a checkpoint (training paused).", LatencyBuckets(),
                        model_label);
    metric.validations = m->GetCounter("pstrain_trainer_validations_total", "Validations run.",
                                       model_label);
  }
  // Models that can be served describe themselves in every checkpoint.
  absl::StatusOr<std::string> serving = model->ServingConfig();
  auto save = [&](int64_t step, bool final_save = false) -> absl::Status {
    if (checkpoints == nullptr || !options.save_checkpoints) return absl::OkStatus();
    RETURN_IF_ERROR(coordinator->Join());
    std::map<std::string, std::string> state = watcher.State();
    state[kExamplesState] = absl::StrCat(examples);
    state[kModelState] = model->name();
    if (serving.ok()) state[kServingState] = *serving;
    if (final_save) state[kFinalState] = "1";
    if (result.stopped_early) state[kStoppedEarlyState] = "1";
    const absl::Time save_start = absl::Now();
    // A ps that fails during the save (or restarted just before) fails that save: the ps tasks
    // are checked and recovered (a restarted one reloaded from the latest checkpoint, as between
    // steps), then the save runs again.
    for (int attempt = 0;; ++attempt) {
      absl::Status saved = coordinator->RunExclusive([&]() -> absl::Status {
        ASSIGN_OR_RETURN(result.last_checkpoint, checkpoints->Save(step, state));
        return absl::OkStatus();
      });
      if (saved.ok()) break;
      const absl::StatusCode code = saved.code();
      const bool ps_failure = code == absl::StatusCode::kUnavailable ||
                              code == absl::StatusCode::kDeadlineExceeded ||
                              code == absl::StatusCode::kAborted ||
                              code == absl::StatusCode::kFailedPrecondition;
      if (!ps_failure || attempt >= 3 || options.ps_restart_ends_run) return saved;
      LOG(WARNING) << "checkpoint at step " << step << " failed (" << saved
                   << "); checking the ps tasks, then saving again";
      RETURN_IF_ERROR(coordinator->RecoverPs());
    }
    if (metric.checkpoints != nullptr) {
      metric.checkpoints->Increment();
      metric.checkpoint_seconds->ObserveDuration(absl::Now() - save_start);
    }
    return absl::OkStatus();
  };

  const absl::Time train_start = absl::Now();
  absl::Time last_save = train_start;
  absl::Time last_summary = train_start;
  int64_t examples_at_summary = examples;
  std::deque<std::pair<int64_t, RemoteValue>> pending;
  double loss_sum = 0;
  int64_t loss_count = 0;
  auto collect_front = [&]() -> absl::Status {
    auto [step, value] = std::move(pending.front());
    pending.pop_front();
    absl::StatusOr<std::vector<Tensor>> fetched = value.Fetch();
    if (!fetched.ok()) {
      // Cancelled because the job failed elsewhere: report that first error, not the cancellation.
      if (fetched.status().code() == absl::StatusCode::kCancelled) {
        RETURN_IF_ERROR(coordinator->Join());
      }
      return fetched.status();
    }
    std::vector<Tensor> out = *std::move(fetched);
    if (out.size() < 2 || !out[0].Is<float>() || !out[1].Is<int64_t>()) {
      return absl::InternalError(absl::StrCat("model ", model->name(), ": step ", step,
                                              " did not return {loss, examples}"));
    }
    const double loss = out[0].scalar<float>();
    examples += out[1].scalar<int64_t>();
    if (metric.steps != nullptr) {
      metric.steps->Increment();
      metric.examples->Increment(out[1].scalar<int64_t>());
      metric.step->Set(static_cast<double>(step + 1));
      metric.loss->Set(loss);
    }
    loss_sum += loss;
    ++loss_count;
    progress->Update(step + 1, examples, loss);
    if (events != nullptr && ((step + 1) % options.summary_every_steps == 0 || step + 1 == total)) {
      const absl::Time now = absl::Now();
      RETURN_IF_ERROR(events->WriteScalar("loss", step + 1, static_cast<float>(loss_sum / loss_count)));
      const double seconds = absl::ToDoubleSeconds(now - last_summary);
      if (seconds > 0 && metric.examples_per_sec != nullptr) {
        metric.examples_per_sec->Set((examples - examples_at_summary) / seconds);
      }
      if (seconds > 0) {
        RETURN_IF_ERROR(events->WriteScalar(
            "examples_per_sec", step + 1,
            static_cast<float>((examples - examples_at_summary) / seconds)));
      }
      last_summary = now;
      examples_at_summary = examples;
    }
    result.final_loss = loss;
    if (loss_count >= 50) {  // the summary's "recent loss": a mean over the last steps
      result.final_loss = loss_sum / loss_count;
      loss_sum = 0;
      loss_count = 0;
    }
    if (options.after_step) RETURN_IF_ERROR(options.after_step(step));
    return absl::OkStatus();
  };
  auto collect_all = [&]() -> absl::Status {
    while (!pending.empty()) RETURN_IF_ERROR(collect_front());
    return absl::OkStatus();
  };

  // Validation at `step` (every scheduled step finished first): scalars, the watcher's verdict, a
  // new best saved and marked; *stop when patience ran out.
  const int64_t validate_every =
      options.validate_every_steps > 0 ? options.validate_every_steps
                                       : std::max<int64_t>(1, model->steps_per_epoch());
  int64_t last_validated = -1;
  ModelMetrics best_metrics;  // the best validation's, if it ran in this run
  auto validate = [&](int64_t step, bool* stop) -> absl::Status {
    RETURN_IF_ERROR(collect_all());
    RETURN_IF_ERROR(coordinator->Join());
    ASSIGN_OR_RETURN(ModelMetrics m,
                     PreferJobError(model->Validate(coordinator.get()), coordinator.get()));
    ++result.validations;
    if (metric.validations != nullptr) metric.validations->Increment();
    last_validated = step;
    auto it = m.values.find(watch.monitor);
    if (it == m.values.end()) {
      std::string names;
      for (const auto& [name, value] : m.values) absl::StrAppend(&names, names.empty() ? "" : ", ", name);
      return absl::InvalidArgumentError(absl::StrCat("the validation metric '", watch.monitor,
                                                     "' is not one of ", model->name(), "'s (",
                                                     names, ")"));
    }
    const double value = it->second;
    if (events != nullptr) {
      for (const auto& [name, v] : m.values) {
        RETURN_IF_ERROR(events->WriteScalar(name, step, static_cast<float>(v)));
      }
    }
    const EarlyStopping::Verdict verdict = watcher.Observe(step, value);
    *stop = verdict.stop;
    if (verdict.stop) result.stopped_early = true;
    progress->Message(absl::StrFormat(
        "validation at step %d: %s %.6g%s", step, watch.monitor, value,
        verdict.improved ? " (best)"
                         : absl::StrFormat(" (best %.6g at step %d%s)", watcher.best(),
                                           watcher.best_step(),
                                           verdict.stop ? "; stopping early" : "")));
    if (!verdict.improved) return absl::OkStatus();
    best_metrics = std::move(m);
    if (checkpoints == nullptr || !options.keep_best) return absl::OkStatus();
    RETURN_IF_ERROR(save(step));
    return checkpoints->MarkBest(result.last_checkpoint,
                                 absl::StrFormat("%s=%.17g at step %d", watch.monitor, value, step));
  };

  if (options.before_steps) RETURN_IF_ERROR(options.before_steps(coordinator.get()));
  bool stop = false;
  if (validating && options.validate_at_start && start == 0 && !restored.has_value()) {
    RETURN_IF_ERROR(validate(0, &stop));
  }
  for (int64_t step = start; step < end && !stop; ++step) {
    // At most max_pending_steps in flight: with 1, a step starts only after the previous one
    // finished (synchronous training relies on it).
    while (static_cast<int64_t>(pending.size()) >= options.max_pending_steps) {
      RETURN_IF_ERROR(collect_front());
    }
    ASSIGN_OR_RETURN(RemoteValue value, model->ScheduleStep(coordinator.get(), step));
    pending.emplace_back(step, std::move(value));
    while (!pending.empty() && pending.front().second.IsReady()) {
      RETURN_IF_ERROR(collect_front());
    }
    const int64_t done = step + 1;
    if (validating && done < end && done % validate_every == 0) {
      RETURN_IF_ERROR(validate(done, &stop));
      if (stop) end = done;
    }
    const bool by_steps =
        options.checkpoint_every_steps > 0 && done % options.checkpoint_every_steps == 0;
    const bool by_time = options.checkpoint_every > absl::ZeroDuration() &&
                         absl::Now() - last_save >= options.checkpoint_every;
    if (checkpoints != nullptr && done < end && (by_steps || by_time)) {
      RETURN_IF_ERROR(collect_all());
      RETURN_IF_ERROR(save(done));
      last_save = absl::Now();
    }
  }
  RETURN_IF_ERROR(collect_all());
  RETURN_IF_ERROR(coordinator->Join());
  const bool trained = start < end;
  if (validating && trained && last_validated != end) {
    bool ignored = false;  // the run ends here anyway
    RETURN_IF_ERROR(validate(end, &ignored));
  }
  result.train_seconds = absl::ToDoubleSeconds(absl::Now() - train_start);
  if (loss_count > 0) result.final_loss = loss_sum / loss_count;
  progress->Finish();
  result.end_step = end;
  result.examples = examples - examples_before;
  result.examples_per_sec =
      result.train_seconds > 0 ? result.examples / result.train_seconds : 0;
  if (trained || !restored.has_value()) RETURN_IF_ERROR(save(end, /*final_save=*/true));

  for (const auto& [name, table] : coordinator->variables()->tables()) {
    ASSIGN_OR_RETURN(std::vector<DynamicShardStats> shards, table.Stats());
    DynamicShardStats& sum = result.tables[name];
    for (const DynamicShardStats& s : shards) {
      sum.set_keys(sum.keys() + s.keys());
      sum.set_bytes(sum.bytes() + s.bytes());
      sum.set_admitted(sum.admitted() + s.admitted());
      sum.set_rejected(sum.rejected() + s.rejected());
      sum.set_evicted_ttl(sum.evicted_ttl() + s.evicted_ttl());
      sum.set_evicted_capacity(sum.evicted_capacity() + s.evicted_capacity());
      sum.set_erased(sum.erased() + s.erased());
      sum.set_dropped_gradients(sum.dropped_gradients() + s.dropped_gradients());
    }
  }
  // The test evaluation runs on the best validation's checkpoint, where one was kept.
  result.evaluated = absl::StrCat("final weights (step ", end, ")");
  if (validating && watcher.has_best()) {
    result.best_step = watcher.best_step();
    result.best_value = watcher.best();
    if (watcher.best_step() == end) {
      result.evaluated = absl::StrCat("final weights (step ", end, "), the best validation's");
    } else if (checkpoints == nullptr || !options.keep_best) {
      result.evaluated =
          absl::StrCat("final weights (step ", end, "); the best validation was at step ",
                       watcher.best_step(), ", not kept (",
                       checkpoints == nullptr ? "no checkpoint_dir" : "keep_best is off", ")");
    } else {
      ASSIGN_OR_RETURN(std::optional<BestMarker> mark, checkpoints->Best());
      if (!mark.has_value() || mark->step != watcher.best_step()) {
        return absl::DataLossError(absl::StrCat(
            "the best validation's checkpoint (step ", watcher.best_step(), ") is not marked in ",
            options.checkpoint_dir, "/", kBestFileName));
      }
      ASSIGN_OR_RETURN(RestoredCheckpoint best, checkpoints->Restore(mark->path));
      result.evaluated = absl::StrCat("best checkpoint ", best.path, " (step ", best.step, ")");
    }
    for (const auto& [name, value] : best_metrics.values) result.metrics.values[name] = value;
  }
  if (options.evaluate) {
    ASSIGN_OR_RETURN(ModelMetrics test,
                     PreferJobError(model->Evaluate(coordinator.get()), coordinator.get()));
    for (auto& [name, value] : test.values) result.metrics.values[name] = value;
    for (auto& [name, note] : test.notes) result.metrics.notes[name] = note;
    if (events != nullptr) {
      for (const auto& [name, value] : test.values) {
        RETURN_IF_ERROR(events->WriteScalar(name, end, static_cast<float>(value)));
      }
    }
  }
  if (events != nullptr) RETURN_IF_ERROR(events->Flush());
  return result;
}

}  // namespace pstrain
