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
#include "ps/row_format.h"
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
  if (interrupted) j["interrupted"] = true;
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
    if (t.row_format() != ROW_FLOAT32 || t.slot_format() != ROW_FLOAT32) {
      // Stored in fewer bits (bytes: as stored).
      j["dynamic_tables"][name]["row_format"] = RowFormatName(t.row_format());
      j["dynamic_tables"][name]["slot_format"] = RowFormatName(t.slot_format());
    }
    if (t.disk_tier()) {
      // Keys in each tier, and the moves between them (bytes: RAM's; disk_bytes: the records on
      // disk).
      nlohmann::json& j_table = j["dynamic_tables"][name];
      j_table["ram_keys"] = t.ram_keys();
      j_table["disk_keys"] = t.disk_keys();
      j_table["disk_bytes"] = t.disk_bytes();
      j_table["keys_read_from_disk"] = t.disk_hits();
      j_table["moved_to_disk"] = t.moved_to_disk();
      j_table["moved_to_ram"] = t.moved_to_ram();
    }
  }
  return j.dump();
}

namespace {

// The metrics a run counts (TrainerOptions::metrics); all null without a registry.
struct TrainerMetrics {
  Counter* steps = nullptr;
  Counter* examples = nullptr;
  Gauge* step = nullptr;
  Gauge* loss = nullptr;
  Gauge* examples_per_sec = nullptr;
  Counter* checkpoints = nullptr;
  Histogram* checkpoint_seconds = nullptr;
  Counter* validations = nullptr;

  TrainerMetrics(MetricsRegistry* m, const std::string& model) {
    if (m == nullptr) return;
    const Labels model_label{{"model", model}};
    steps = m->GetCounter("pstrain_trainer_steps_total", "Training steps done.", model_label);
    examples = m->GetCounter("pstrain_trainer_examples_total", "Examples trained on.", model_label);
    step = m->GetGauge("pstrain_trainer_step", "The last step done.", model_label);
    loss = m->GetGauge("pstrain_trainer_loss", "The last step's mean loss.", model_label);
    examples_per_sec = m->GetGauge("pstrain_trainer_examples_per_second",
                                   "Examples per second over the last summary interval.",
                                   model_label);
    checkpoints =
        m->GetCounter("pstrain_trainer_checkpoints_total", "Checkpoints saved.", model_label);
    checkpoint_seconds = m->GetHistogram("pstrain_trainer_checkpoint_seconds",
                                         "Time to save a checkpoint (training paused).",
                                         LatencyBuckets(), model_label);
    validations =
        m->GetCounter("pstrain_trainer_validations_total", "Validations run.", model_label);
  }
};

// One run of Train(): the flow drawn in trainer.h, a method per step of it.
//
//   Run: StartCluster -> SetUpModel -> Restore -> StartReporting -> [Validate(0)] -> TrainSteps
//        -> Finish (last validation, final Save) -> SumTables -> EvaluateBest -> EvaluateTest
//
// TrainSteps schedules the steps and collects them in order (CollectFront); between steps it
// validates (Validate: a new best is saved and marked) and saves (Save) when due.
class TrainingLoop {
 public:
  TrainingLoop(Model* model, const TrainerOptions& options) : model_(model), options_(options) {}

  absl::StatusOr<TrainResult> Run(const ClusterSpec& spec, CoordinatorOptions coordinator_options) {
    RETURN_IF_ERROR(StartCluster(spec, std::move(coordinator_options)));
    RETURN_IF_ERROR(SetUpModel());
    RETURN_IF_ERROR(Restore());
    RETURN_IF_ERROR(StartReporting());
    if (options_.before_steps) RETURN_IF_ERROR(options_.before_steps(coordinator_.get()));
    bool stop = false;
    if (validating_ && options_.validate_at_start && start_ == 0 && !restored_.has_value()) {
      RETURN_IF_ERROR(Validate(0, &stop));
    }
    RETURN_IF_ERROR(TrainSteps(stop));
    RETURN_IF_ERROR(Finish());
    RETURN_IF_ERROR(SumTables());
    RETURN_IF_ERROR(EvaluateBest());
    RETURN_IF_ERROR(EvaluateTest());
    for (const auto& [name, value] : model_->StepFigures()) result_.metrics.values[name] = value;
    return std::move(result_);
  }

 private:
  // The coordinator, with the trainer's hook for a ps that restarted: reloaded from the latest
  // checkpoint (or the run ends, with ps_restart_ends_run).
  absl::Status StartCluster(const ClusterSpec& spec, CoordinatorOptions coordinator_options) {
    coordinator_options.placement = options_.placement;
    coordinator_options.staleness_scaling = options_.staleness_scaling;
    coordinator_options.metrics = options_.metrics;
    // The checkpoint manager exists only once the coordinator does; the hook reads it then.
    coordinator_options.on_ps_restarted = [this](int ps) { return OnPsRestarted(ps); };
    ASSIGN_OR_RETURN(coordinator_, ClusterCoordinator::Create(spec, coordinator_options));
    result_.model = model_->name();
    result_.num_workers = coordinator_->num_workers();
    result_.num_ps = coordinator_->ps()->num_ps();
    return absl::OkStatus();
  }

  absl::Status OnPsRestarted(int ps) {
    if (options_.ps_restart_ends_run) {
      return absl::UnavailableError(absl::StrCat(
          "ps:", ps, " restarted without its shards; this run ends (the job resumes every worker "
          "from the latest checkpoint)"));
    }
    if (checkpoints_ == nullptr) {
      LOG(WARNING) << "ps:" << ps << " restarted and there are no checkpoints: its shards start "
                   << "again from their initial values";
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(std::optional<RestoredCheckpoint> r, checkpoints_->RestorePs(ps));
    if (r.has_value()) {
      LOG(WARNING) << "ps:" << ps << " restarted: its shards were reloaded from the checkpoint at "
                   << "step " << r->step << "; the updates they got since then are lost";
    } else {
      LOG(WARNING) << "ps:" << ps << " restarted before the first checkpoint: its shards start "
                   << "again from their initial values";
    }
    return absl::OkStatus();
  }

  // The model's variables and data on the cluster; what validation watches.
  absl::Status SetUpModel() {
    RETURN_IF_ERROR(model_->Setup(coordinator_.get()));
    total_ = model_->total_steps();
    validating_ = model_->has_validation() && options_.validate;
    if (!validating_ && options_.early_stopping_patience > 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "early stopping needs validation data, and ", model_->name(),
          " has none (validation_fraction is 0 and no validation_data was given)"));
    }
    watch_.monitor = options_.monitor.empty() ? model_->validation_metric() : options_.monitor;
    watch_.patience = options_.early_stopping_patience;
    watch_.min_delta = options_.early_stopping_min_delta;
    ASSIGN_OR_RETURN(EarlyStopping watcher, EarlyStopping::Create(watch_));
    watcher_.emplace(std::move(watcher));
    if (validating_) result_.monitor = watch_.monitor;
    validate_every_ = options_.validate_every_steps > 0
                          ? options_.validate_every_steps
                          : std::max<int64_t>(1, model_->steps_per_epoch());
    return absl::OkStatus();
  }

  // The checkpoint manager, and the restore the options ask for: where training starts and ends.
  absl::Status Restore() {
    if (!options_.checkpoint_dir.empty()) {
      CheckpointOptions c;
      c.dir = options_.checkpoint_dir;
      c.keep = options_.keep_checkpoints;
      c.incremental = options_.checkpoint_incremental;
      c.full_every = options_.full_checkpoint_every;
      ASSIGN_OR_RETURN(checkpoints_, CheckpointManager::Create(c, coordinator_->ps()->clients(),
                                                               coordinator_->variables()));
    }
    RestoreOptions restore_options;
    restore_options.skip_missing = options_.restore_skip_missing;
    restore_options.only_ps = options_.restore_only_ps;
    if (options_.restore != "none" && options_.restore != "latest") {
      if (checkpoints_ == nullptr) {
        // A checkpoint path without a checkpoint_dir: restore from it, save nowhere.
        CheckpointOptions c;
        c.dir = options_.restore + "/..";
        ASSIGN_OR_RETURN(checkpoints_, CheckpointManager::Create(c, coordinator_->ps()->clients(),
                                                                 coordinator_->variables()));
      }
      ASSIGN_OR_RETURN(restored_, checkpoints_->Restore(options_.restore, restore_options));
    } else if (options_.restore == "latest" && checkpoints_ != nullptr) {
      ASSIGN_OR_RETURN(restored_, checkpoints_->RestoreLatest(restore_options));
    }
    if (restored_.has_value()) RETURN_IF_ERROR(ResumeFrom(*restored_));
    result_.start_step = start_;
    // The end: the model's, or where a resumed run had stopped early.
    end_ = result_.stopped_early ? start_ : total_;
    if (checkpoints_ != nullptr && options_.save_checkpoints) {
      // A best mark from another run (or another point of this one's past) means nothing now.
      ASSIGN_OR_RETURN(std::optional<BestMarker> mark, checkpoints_->Best());
      if (mark.has_value() && (!watcher_->has_best() || mark->step != watcher_->best_step())) {
        RETURN_IF_ERROR(checkpoints_->ClearBest());
      }
    }
    return absl::OkStatus();
  }

  // The trainer's state saved in `restored`: the step, examples, the watcher's best, an early stop.
  absl::Status ResumeFrom(const RestoredCheckpoint& restored) {
    auto it = restored.state.find(kModelState);
    if (it != restored.state.end() && it->second != model_->name()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint ", restored.path, " is of model ", it->second, ", not ", model_->name()));
    }
    start_ = std::min(restored.step, total_);
    RETURN_IF_ERROR(model_->RestoreState(start_, restored.state));
    it = restored.state.find(kExamplesState);
    if (it != restored.state.end()) (void)absl::SimpleAtoi(it->second, &examples_before_);
    result_.restored_from = restored.path;
    watcher_->Restore(restored.state);
    result_.stopped_early = restored.state.count(kStoppedEarlyState) > 0;
    LOG(INFO) << "resuming " << model_->name() << " at step " << start_
              << (model_->follows_data() ? std::string(" (following its data)")
                                         : absl::StrCat(" of ", total_))
              << " from " << restored.path
              << (result_.stopped_early ? " (that run stopped early: no more training)" : "");
    return absl::OkStatus();
  }

  // TensorBoard events, the progress line and the metrics.
  absl::Status StartReporting() {
    if (!options_.logdir.empty()) {
      ASSIGN_OR_RETURN(events_, EventWriter::Create(options_.logdir));
    }
    ProgressOptions progress_options = options_.progress;
    progress_options.total_steps = model_->follows_data() ? 0 : end_;  // following: no end
    progress_options.initial_step = start_;
    progress_options.initial_examples = examples_before_;
    if (!progress_options.note) {
      progress_options.note = [model = model_] { return model->ProgressNote(); };
    }
    ASSIGN_OR_RETURN(progress_, ProgressReporter::Create(progress_options));
    examples_ = examples_before_;
    examples_at_summary_ = examples_;
    metrics_ = TrainerMetrics(options_.metrics, model_->name());
    // Models that can be served describe themselves in every checkpoint.
    serving_ = model_->ServingConfig();
    // The run's time counts from here (the first validation and before_steps included).
    train_start_ = absl::Now();
    last_save_ = train_start_;
    last_summary_ = train_start_;
    return absl::OkStatus();
  }

  // Whether TrainerOptions::stop_requested asks training to stop.
  bool StopRequested() const { return options_.stop_requested && options_.stop_requested(); }

  // Steps [start_, end_) (end_ moves back if validation stops training early), up to
  // max_pending_steps in flight, with validations and saves when due.
  absl::Status TrainSteps(bool stop) {
    const std::function<bool()> stop_requested = [this] { return StopRequested(); };
    for (int64_t step = start_; step < end_ && !stop; ++step) {
      bool ready = !StopRequested();
      // A model that follows its data waits here for rows (or the stop).
      if (ready) {
        ASSIGN_OR_RETURN(ready, model_->WaitForStep(step, stop_requested));
      }
      if (!ready) {
        // Steps [0, step) scheduled: they are collected, then Finish saves the final checkpoint
        // at `step`, from which a later run goes on.
        result_.interrupted = true;
        end_ = step;
        progress_->Message(absl::StrCat("stop requested: finishing the ", pending_.size(),
                                        " step(s) in flight, then a final checkpoint at step ",
                                        step));
        break;
      }
      // At most max_pending_steps in flight (with 1, a step starts only after the previous one
      // finished); the step after the first only once the first finished, if it runs alone.
      const int64_t limit =
          options_.first_step_alone && step == start_ + 1 ? 1 : options_.max_pending_steps;
      while (static_cast<int64_t>(pending_.size()) >= limit) {
        RETURN_IF_ERROR(CollectFront());
      }
      ASSIGN_OR_RETURN(RemoteValue value, model_->ScheduleStep(coordinator_.get(), step));
      pending_.emplace_back(step, std::move(value));
      while (!pending_.empty() && pending_.front().second.IsReady()) {
        RETURN_IF_ERROR(CollectFront());
      }
      const int64_t done = step + 1;
      if (validating_ && done < end_ && done % validate_every_ == 0) {
        RETURN_IF_ERROR(Validate(done, &stop));
        if (stop) end_ = done;
      }
      const bool by_steps =
          options_.checkpoint_every_steps > 0 && done % options_.checkpoint_every_steps == 0;
      const bool by_time = options_.checkpoint_every > absl::ZeroDuration() &&
                           absl::Now() - last_save_ >= options_.checkpoint_every;
      if (checkpoints_ != nullptr && done < end_ && (by_steps || by_time)) {
        RETURN_IF_ERROR(CollectAll());
        RETURN_IF_ERROR(Save(done));
        last_save_ = absl::Now();
      }
    }
    RETURN_IF_ERROR(CollectAll());
    RETURN_IF_ERROR(coordinator_->Join());
    return TrainPendingSteps(stop);
  }

  // Models whose data the coordinator deals (Model::PendingSteps): once their steps ran, the epoch
  // ends when its last row is trained; batches that came short leave a few steps to run.
  absl::Status TrainPendingSteps(bool stop) {
    if (stop || result_.stopped_early || end_ != total_) return absl::OkStatus();
    constexpr int kMaxRounds = 64;
    for (int round = 0;; ++round) {
      if (StopRequested()) {
        result_.interrupted = true;
        return absl::OkStatus();
      }
      const int64_t more = model_->PendingSteps();
      if (more == 0) return absl::OkStatus();
      if (round == kMaxRounds) {
        return absl::InternalError(absl::StrCat(
            model_->name(), ": data not yet trained after ", kMaxRounds,
            " rounds of extra steps (", more, " more asked)"));
      }
      for (int64_t i = 0; i < more; ++i) {
        const int64_t step = end_ + i;
        ASSIGN_OR_RETURN(RemoteValue value, model_->ScheduleStep(coordinator_.get(), step));
        pending_.emplace_back(step, std::move(value));
      }
      RETURN_IF_ERROR(CollectAll());
      RETURN_IF_ERROR(coordinator_->Join());
      end_ += more;
      total_ += more;
    }
  }

  // The oldest scheduled step's {loss, examples}: counted, reported, summarized.
  absl::Status CollectFront() {
    auto [step, value] = std::move(pending_.front());
    pending_.pop_front();
    absl::StatusOr<std::vector<Tensor>> fetched = value.Fetch();
    if (!fetched.ok()) {
      // Cancelled because the job failed elsewhere: report that first error, not the cancellation.
      if (fetched.status().code() == absl::StatusCode::kCancelled) {
        RETURN_IF_ERROR(coordinator_->Join());
      }
      return fetched.status();
    }
    std::vector<Tensor> out = *std::move(fetched);
    if (out.size() < 2 || !out[0].Is<float>() || !out[1].Is<int64_t>()) {
      return absl::InternalError(absl::StrCat("model ", model_->name(), ": step ", step,
                                              " did not return {loss, examples}"));
    }
    const double loss = out[0].scalar<float>();
    examples_ += out[1].scalar<int64_t>();
    if (metrics_.steps != nullptr) {
      metrics_.steps->Increment();
      metrics_.examples->Increment(out[1].scalar<int64_t>());
      metrics_.step->Set(static_cast<double>(step + 1));
      metrics_.loss->Set(loss);
    }
    model_->StepCollected(step, out);
    loss_sum_ += loss;
    ++loss_count_;
    progress_->Update(step + 1, examples_, loss);
    if (events_ != nullptr && ((step + 1) % options_.summary_every_steps == 0 || step + 1 == total_)) {
      RETURN_IF_ERROR(WriteSummary(step + 1));
    }
    result_.final_loss = loss;
    if (loss_count_ >= 50) {  // the summary's "recent loss": a mean over the last steps
      result_.final_loss = loss_sum_ / loss_count_;
      loss_sum_ = 0;
      loss_count_ = 0;
    }
    if (options_.after_step) RETURN_IF_ERROR(options_.after_step(step));
    return absl::OkStatus();
  }

  // The loss and examples/s scalars at `step`.
  absl::Status WriteSummary(int64_t step) {
    const absl::Time now = absl::Now();
    RETURN_IF_ERROR(events_->WriteScalar("loss", step, static_cast<float>(loss_sum_ / loss_count_)));
    const double seconds = absl::ToDoubleSeconds(now - last_summary_);
    if (seconds > 0 && metrics_.examples_per_sec != nullptr) {
      metrics_.examples_per_sec->Set((examples_ - examples_at_summary_) / seconds);
    }
    if (seconds > 0) {
      RETURN_IF_ERROR(events_->WriteScalar(
          "examples_per_sec", step, static_cast<float>((examples_ - examples_at_summary_) / seconds)));
    }
    last_summary_ = now;
    examples_at_summary_ = examples_;
    for (const auto& [name, value] : model_->StepFigures()) {
      RETURN_IF_ERROR(events_->WriteScalar(name, step, static_cast<float>(value)));
    }
    return absl::OkStatus();
  }

  absl::Status CollectAll() {
    while (!pending_.empty()) RETURN_IF_ERROR(CollectFront());
    return absl::OkStatus();
  }

  // Validation at `step` (every scheduled step finished first): scalars, the watcher's verdict, a
  // new best saved and marked; *stop when patience ran out.
  absl::Status Validate(int64_t step, bool* stop) {
    RETURN_IF_ERROR(CollectAll());
    RETURN_IF_ERROR(coordinator_->Join());
    ASSIGN_OR_RETURN(ModelMetrics m,
                     PreferJobError(model_->Validate(coordinator_.get()), coordinator_.get()));
    ++result_.validations;
    if (metrics_.validations != nullptr) metrics_.validations->Increment();
    last_validated_ = step;
    auto it = m.values.find(watch_.monitor);
    if (it == m.values.end()) {
      std::string names;
      for (const auto& [name, value] : m.values) absl::StrAppend(&names, names.empty() ? "" : ", ", name);
      return absl::InvalidArgumentError(absl::StrCat("the validation metric '", watch_.monitor,
                                                     "' is not one of ", model_->name(), "'s (",
                                                     names, ")"));
    }
    const double value = it->second;
    if (events_ != nullptr) {
      for (const auto& [name, v] : m.values) {
        RETURN_IF_ERROR(events_->WriteScalar(name, step, static_cast<float>(v)));
      }
    }
    const EarlyStopping::Verdict verdict = watcher_->Observe(step, value);
    *stop = verdict.stop;
    if (verdict.stop) result_.stopped_early = true;
    progress_->Message(absl::StrFormat(
        "validation at step %d: %s %.6g%s", step, watch_.monitor, value,
        verdict.improved ? " (best)"
                         : absl::StrFormat(" (best %.6g at step %d%s)", watcher_->best(),
                                           watcher_->best_step(),
                                           verdict.stop ? "; stopping early" : "")));
    if (!verdict.improved) return absl::OkStatus();
    best_metrics_ = std::move(m);
    if (checkpoints_ == nullptr || !options_.keep_best) return absl::OkStatus();
    RETURN_IF_ERROR(Save(step));
    return checkpoints_->MarkBest(result_.last_checkpoint,
                                  absl::StrFormat("%s=%.17g at step %d", watch_.monitor, value, step));
  }

  // A checkpoint of steps [0, step), with the trainer's state. A ps that fails during the save (or
  // restarted just before) fails that save: the ps tasks are checked and recovered (a restarted one
  // reloaded from the latest checkpoint, as between steps), then the save runs again.
  absl::Status Save(int64_t step, bool final_save = false) {
    if (checkpoints_ == nullptr || !options_.save_checkpoints) return absl::OkStatus();
    RETURN_IF_ERROR(coordinator_->Join());
    std::map<std::string, std::string> state = watcher_->State();
    state[kExamplesState] = absl::StrCat(examples_);
    state[kModelState] = model_->name();
    for (auto& [key, value] : model_->CheckpointState()) state[key] = std::move(value);
    if (serving_.ok()) state[kServingState] = *serving_;
    if (final_save) state[kFinalState] = "1";
    if (result_.stopped_early) state[kStoppedEarlyState] = "1";
    const absl::Time save_start = absl::Now();
    for (int attempt = 0;; ++attempt) {
      absl::Status saved = coordinator_->RunExclusive([&]() -> absl::Status {
        ASSIGN_OR_RETURN(result_.last_checkpoint, checkpoints_->Save(step, state));
        return absl::OkStatus();
      });
      if (saved.ok()) break;
      const absl::StatusCode code = saved.code();
      const bool ps_failure = code == absl::StatusCode::kUnavailable ||
                              code == absl::StatusCode::kDeadlineExceeded ||
                              code == absl::StatusCode::kAborted ||
                              code == absl::StatusCode::kFailedPrecondition;
      if (!ps_failure || attempt >= 3 || options_.ps_restart_ends_run) return saved;
      LOG(WARNING) << "checkpoint at step " << step << " failed (" << saved
                   << "); checking the ps tasks, then saving again";
      RETURN_IF_ERROR(coordinator_->RecoverPs());
    }
    if (metrics_.checkpoints != nullptr) {
      metrics_.checkpoints->Increment();
      metrics_.checkpoint_seconds->ObserveDuration(absl::Now() - save_start);
    }
    return absl::OkStatus();
  }

  // After the last step: a last validation (unless the last step had one), the run's figures, and
  // the final save.
  absl::Status Finish() {
    const bool trained = start_ < end_;
    if (validating_ && trained && last_validated_ != end_) {
      bool ignored = false;  // the run ends here anyway
      RETURN_IF_ERROR(Validate(end_, &ignored));
    }
    result_.train_seconds = absl::ToDoubleSeconds(absl::Now() - train_start_);
    if (loss_count_ > 0) result_.final_loss = loss_sum_ / loss_count_;
    progress_->Finish();
    result_.end_step = end_;
    result_.examples = examples_ - examples_before_;
    result_.examples_per_sec =
        result_.train_seconds > 0 ? result_.examples / result_.train_seconds : 0;
    if (trained || !restored_.has_value()) RETURN_IF_ERROR(Save(end_, /*final_save=*/true));
    return absl::OkStatus();
  }

  // Each dynamic table's counters, summed over its shards.
  absl::Status SumTables() {
    for (const auto& [name, table] : coordinator_->variables()->tables()) {
      ASSIGN_OR_RETURN(std::vector<DynamicShardStats> shards, table.Stats());
      DynamicShardStats& sum = result_.tables[name];
      for (const DynamicShardStats& s : shards) {
        sum.set_keys(sum.keys() + s.keys());
        sum.set_bytes(sum.bytes() + s.bytes());
        sum.set_admitted(sum.admitted() + s.admitted());
        sum.set_rejected(sum.rejected() + s.rejected());
        sum.set_evicted_ttl(sum.evicted_ttl() + s.evicted_ttl());
        sum.set_evicted_capacity(sum.evicted_capacity() + s.evicted_capacity());
        sum.set_erased(sum.erased() + s.erased());
        sum.set_dropped_gradients(sum.dropped_gradients() + s.dropped_gradients());
        sum.set_disk_tier(sum.disk_tier() || s.disk_tier());
        sum.set_ram_keys(sum.ram_keys() + s.ram_keys());
        sum.set_disk_keys(sum.disk_keys() + s.disk_keys());
        sum.set_disk_bytes(sum.disk_bytes() + s.disk_bytes());
        sum.set_disk_hits(sum.disk_hits() + s.disk_hits());
        sum.set_moved_to_disk(sum.moved_to_disk() + s.moved_to_disk());
        sum.set_moved_to_ram(sum.moved_to_ram() + s.moved_to_ram());
        sum.set_row_format(s.row_format());
        sum.set_slot_format(s.slot_format());
      }
    }
    return absl::OkStatus();
  }

  // The weights the test evaluation runs on: the best validation's checkpoint, where one was kept
  // (restored now), else the final weights; and the best validation's metrics.
  absl::Status EvaluateBest() {
    result_.evaluated = absl::StrCat("final weights (step ", end_, ")");
    // A job that follows its data is judged at its final weights: its best validation may be of
    // data long past.
    if (!validating_ || !watcher_->has_best() || model_->follows_data()) return absl::OkStatus();
    result_.best_step = watcher_->best_step();
    result_.best_value = watcher_->best();
    if (watcher_->best_step() == end_) {
      result_.evaluated = absl::StrCat("final weights (step ", end_, "), the best validation's");
    } else if (checkpoints_ == nullptr || !options_.keep_best) {
      result_.evaluated =
          absl::StrCat("final weights (step ", end_, "); the best validation was at step ",
                       watcher_->best_step(), ", not kept (",
                       checkpoints_ == nullptr ? "no checkpoint_dir" : "keep_best is off", ")");
    } else {
      ASSIGN_OR_RETURN(std::optional<BestMarker> mark, checkpoints_->Best());
      if (!mark.has_value() || mark->step != watcher_->best_step()) {
        return absl::DataLossError(absl::StrCat(
            "the best validation's checkpoint (step ", watcher_->best_step(), ") is not marked in ",
            options_.checkpoint_dir, "/", kBestFileName));
      }
      ASSIGN_OR_RETURN(RestoredCheckpoint best, checkpoints_->Restore(mark->path));
      result_.evaluated = absl::StrCat("best checkpoint ", best.path, " (step ", best.step, ")");
    }
    for (const auto& [name, value] : best_metrics_.values) result_.metrics.values[name] = value;
    return absl::OkStatus();
  }

  // The model's test metrics (with `evaluate`), into the result and TensorBoard.
  absl::Status EvaluateTest() {
    if (options_.evaluate) {
      ASSIGN_OR_RETURN(ModelMetrics test,
                       PreferJobError(model_->Evaluate(coordinator_.get()), coordinator_.get()));
      for (auto& [name, value] : test.values) result_.metrics.values[name] = value;
      for (auto& [name, note] : test.notes) result_.metrics.notes[name] = note;
      if (events_ != nullptr) {
        for (const auto& [name, value] : test.values) {
          RETURN_IF_ERROR(events_->WriteScalar(name, end_, static_cast<float>(value)));
        }
      }
    }
    if (events_ != nullptr) RETURN_IF_ERROR(events_->Flush());
    return absl::OkStatus();
  }

  Model* const model_;
  const TrainerOptions& options_;
  TrainResult result_;
  // Destroyed after the coordinator (its ps hook reads it).
  std::unique_ptr<CheckpointManager> checkpoints_;
  std::unique_ptr<ClusterCoordinator> coordinator_;
  // Validation (SetUpModel).
  bool validating_ = false;
  EarlyStoppingOptions watch_;
  std::optional<EarlyStopping> watcher_;
  int64_t validate_every_ = 1;
  int64_t last_validated_ = -1;
  ModelMetrics best_metrics_;  // the best validation's, if it ran in this run
  // Where training starts and ends (Restore; end_ moves back on an early stop).
  std::optional<RestoredCheckpoint> restored_;
  int64_t total_ = 0;
  int64_t start_ = 0;
  int64_t end_ = 0;
  // Reporting (StartReporting).
  std::unique_ptr<EventWriter> events_;
  std::unique_ptr<ProgressReporter> progress_;
  TrainerMetrics metrics_{nullptr, ""};
  absl::StatusOr<std::string> serving_;
  // Steps in flight, and what the collected ones added up to.
  std::deque<std::pair<int64_t, RemoteValue>> pending_;
  int64_t examples_before_ = 0;
  int64_t examples_ = 0;
  double loss_sum_ = 0;
  int64_t loss_count_ = 0;
  absl::Time train_start_;
  absl::Time last_save_;
  absl::Time last_summary_;
  int64_t examples_at_summary_ = 0;
};

}  // namespace

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
  TrainingLoop loop(model, options);
  return loop.Run(spec, std::move(coordinator_options));
}

}  // namespace pstrain
