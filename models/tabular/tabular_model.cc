#include "models/tabular/tabular_model.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/byte_size.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "coordinator/split_ledger.h"
#include "models/batches.h"
#include "models/devices.h"
#include "models/tabular/data_follower.h"
#include "models/tabular/data_plan.h"
#include "models/tabular/progressive_window.h"
#include "models/tabular/feature_spec.h"
#include "models/tabular/tabular_lookup.h"
#include "models/tabular/tabular_model_worker.h"
#include "models/tabular/tabular_net.h"
#include "models/tabular/transforms.h"
#include "nlohmann/json.hpp"
#include "ps/sharded_variable.h"

namespace pstrain {
namespace {

using tabular::DataPlan;
using tabular::DeepBiasName;
using tabular::DeepWeightName;
using tabular::EvalSums;
using tabular::ExampleLayout;
using tabular::ModelType;
using tabular::NetShape;
using tabular::Outputs;
using tabular::PriorLogits;
using tabular::Range;
using tabular::Spec;
using tabular::Split;
using tabular::TableName;
using tabular::Task;
using tabular::kBaseBias;
using tabular::kBaseDense;
using tabular::kBaselineTables;
using tabular::kEmbeddingTables;
using tabular::kEvalBins;
using tabular::kWideBias;
using tabular::kWideDense;
using tabular::kWideTables;

// The AUC of a histogram: negatives' bins [0, kEvalBins), positives' [kEvalBins, 2 kEvalBins); pairs in the
// same bin count half.
double HistogramAuc(const std::vector<int64_t>& h) {
  double pos = 0, neg = 0, pairs = 0;
  for (int b = 0; b < kEvalBins; ++b) {
    const double n = static_cast<double>(h[b]), p = static_cast<double>(h[kEvalBins + b]);
    pairs += p * neg + 0.5 * p * n;
    pos += p;
    neg += n;
  }
  return pos > 0 && neg > 0 ? pairs / (pos * neg) : 0.5;
}

struct TabularConfig {
  std::string spec_path;
  std::string data;
  std::string validation_data;
  double validation_fraction = 0.1;
  int epochs = 5;
  int64_t max_steps = 0;
  int64_t batch_size = 256;
  double learning_rate = 0;  // > 0: the embeddings' and wide parts' rate
  RelativeSchedule lr_schedule;
  int64_t embedding_dim = 0;
  uint64_t seed = 1;
  bool skip_bad_rows = false;
  int64_t shuffle_buffer = 0;               // examples; 0: shuffle_memory's worth
  int64_t shuffle_memory = int64_t{256} << 20;
  int interleave = 64;
  WorkerDevices devices;
  int dense_turns = 1;
  int data_shard = 0;  // a synchronous rank's part of the data (ModelOptions::data_shard)
  int data_shards = 1;
  bool deal_splits = true;  // the coordinator deals the data (coordinator/split_ledger.h)
  int64_t hold_rows = 0;    // rows dealt ahead per worker; 0: the default (DealtHoldRows)
  std::string row_log;      // tests: where workers log the ids of the rows they train
  int slow_worker = -1;     // tests, benchmarks: this worker's steps take slow_factor times longer
  double slow_factor = 1;
  bool follow = false;      // data: a directory followed for new files (data_follower.h)
  absl::Duration follow_poll = absl::Seconds(1);
  int64_t progressive_window = 100000;  // examples progressive validation scores (following)
};

// The key of the split ledger's state in a checkpoint; of the files a following job read.
constexpr char kLedgerState[] = "tabular_split_ledger";
constexpr char kFollowState[] = "tabular_followed_files";
// A following job's steps: a bound it never reaches (it trains until stopped).
constexpr int64_t kFollowSteps = int64_t{1} << 60;

class TabularModel final : public Model {
 public:
  TabularModel(TabularConfig config, Spec spec) : config_(std::move(config)), spec_(std::move(spec)) {}

  std::string name() const override { return kTabularModel; }

  absl::Status Setup(ClusterCoordinator* coordinator) override {
    tabular::ScanOptions so;
    so.data = config_.data;
    std::string first_file;
    if (config_.follow) {
      // The directory's first file is the job's first data (data_follower.h).
      std::error_code error;
      if (!std::filesystem::is_directory(config_.data, error)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--follow: --data=", config_.data, " is not a directory (a followed job reads the new "
            "files of a directory)"));
      }
      absl::StatusOr<std::vector<std::string>> files = tabular::ResolveFiles(config_.data);
      if (!files.ok()) {
        return absl::NotFoundError(absl::StrCat(
            "--follow: ", config_.data, " has no data file yet: its first file sets the "
            "statistics and the held-out rows, so the job starts once one is there"));
      }
      first_file = files->front();
      so.data = first_file;
    }
    so.validation_data = config_.validation_data;
    so.validation_fraction = config_.validation_fraction;
    so.seed = config_.seed;
    // A synchronous rank's coordinator has one worker (itself): its part of the data is one of
    // the ranks' shares. Dealt: one share, the splits of which the coordinator deals.
    const bool dealt = config_.deal_splits && config_.data_shards <= 1;
    if (config_.follow && !dealt) {
      return absl::InvalidArgumentError(
          "--follow: a followed job's data is dealt by the coordinator (the default "
          "asynchronous strategy, deal_splits=true)");
    }
    so.workers = config_.data_shards > 1 ? config_.data_shards
                 : dealt                  ? 1
                                          : coordinator->num_workers();
    so.skip_bad_rows = config_.skip_bad_rows;
    // Dealt: splits small enough that every worker is dealt many (a few hundred rows at least).
    if (dealt) so.min_ranges = 64 * coordinator->num_workers();
    const absl::Time scan_start = absl::Now();
    ASSIGN_OR_RETURN(plan_, tabular::Scan(spec_, so));
    scan_seconds_ = absl::ToDoubleSeconds(absl::Now() - scan_start);
    LOG(INFO) << "tabular: scanned " << plan_.files.size() << " file(s) in " << scan_seconds_
              << " s: " << plan_.rows[0] << " training, " << plan_.rows[1] << " validation, "
              << plan_.rows[2] << " test rows, " << plan_.bad_rows << " bad";
    for (const std::string& note : plan_.notes) LOG(WARNING) << "tabular: " << note;
    const ExampleLayout layout(spec_);
    shape_ = NetShape(spec_, layout, Outputs(spec_, plan_.stats));
    steps_per_epoch_ = (plan_.rows[0] + config_.batch_size - 1) / config_.batch_size;
    total_steps_ = config_.follow ? kFollowSteps : steps_per_epoch_ * config_.epochs;
    if (config_.max_steps > 0) total_steps_ = std::min(total_steps_, config_.max_steps);
    RETURN_IF_ERROR(CreateVariables(coordinator, layout));

    nlohmann::json job;
    job["spec"] = spec_.text;
    job["spec_path"] = spec_.path;
    job["embedding_dim"] = spec_.model.embedding_dim;
    job["plan"] = plan_.ToJson();
    job["seed"] = config_.seed;
    job["validation_fraction"] = config_.validation_fraction;
    job["skip_bad_rows"] = config_.skip_bad_rows;
    // A synchronous rank: its share of the files and of each step's batch (the ranks' parts add
    // up to batch_size).
    const int64_t shards = std::max(1, config_.data_shards);
    job["data_shard"] = shards > 1 ? config_.data_shard : -1;
    job["batch_size"] =
        config_.batch_size / shards + (config_.data_shard < config_.batch_size % shards ? 1 : 0);
    job["steps_per_epoch"] = steps_per_epoch_;
    job["shuffle_buffer"] = ShuffleBuffer(layout);
    job["interleave"] = config_.interleave;
    job["device_kind"] = static_cast<int>(config_.devices.kind);
    job["dense_turns"] = config_.dense_turns;
    if (config_.slow_worker >= 0) {
      job["slow_worker"] = config_.slow_worker;
      job["slow_factor"] = config_.slow_factor;
    }
    if (dealt) {
      job["dealt"] = true;
      // Following: each step also returns its predictions and labels (progressive validation).
      if (config_.follow) job["progressive"] = true;
      if (!config_.row_log.empty()) job["row_log"] = config_.row_log;
      SplitLedgerOptions lo;
      // Following, the first file's ranges are the first to arrive, each with its range (below).
      if (!config_.follow) {
        for (const tabular::Range& r : plan_.shares[0]) lo.split_rows.push_back(r.train_rows);
      }
      lo.epochs = config_.epochs;
      lo.seed = config_.seed;
      lo.num_workers = coordinator->num_workers();
      lo.batch_size = config_.batch_size;
      lo.hold_rows = config_.hold_rows > 0
                         ? config_.hold_rows
                         : DealtHoldRows(plan_.rows[0], lo.num_workers, ShuffleBuffer(layout));
      lo.rows_output = 3;
      if (config_.follow) {
        lo.follow = true;
        lo.epochs = 1;
      }
      ASSIGN_OR_RETURN(ledger_, SplitLedger::Create(std::move(lo)));
      if (config_.follow) {
        std::vector<int64_t> rows;
        std::vector<std::string> descriptors;
        for (const tabular::Range& r : plan_.shares[0]) {
          rows.push_back(r.train_rows);
          descriptors.push_back(tabular::FollowedSplitDescriptor(plan_.files[r.file], r));
        }
        RETURN_IF_ERROR(ledger_->Append(rows, descriptors));
        tabular::DataFollower::Options fo;
        fo.dir = config_.data;
        fo.first_file = first_file;
        fo.first_number = static_cast<int>(plan_.files.size());
        fo.poll = config_.follow_poll;
        fo.scan = so;
        follower_ = std::make_unique<tabular::DataFollower>(spec_, fo, ledger_);
        progressive_ = std::make_unique<tabular::ProgressiveWindow>(spec_.label.task,
                                                                    config_.progressive_window);
      }
    }
    ASSIGN_OR_RETURN(dataset_, coordinator->CreatePerWorkerDataset(kTabularData, {Tensor::String(job.dump())}));
    return absl::OkStatus();
  }

  // Rows dealt ahead to each worker: a shuffle buffer's worth, but at most a 32nd of a worker's
  // part of the epoch (a slow worker's held rows are the epoch's tail), and at least 32 batches
  // (enough for its closures in flight).
  int64_t DealtHoldRows(int64_t train_rows, int workers, int64_t shuffle_buffer) const {
    const int64_t part = train_rows / (32 * std::max(1, workers));
    return std::max(std::min(shuffle_buffer, part), 32 * config_.batch_size);
  }

  bool follows_data() const override { return config_.follow; }

  void StepCollected(int64_t step, const std::vector<Tensor>& outputs) override {
    if (progressive_ == nullptr || outputs.size() < 6 || !outputs[4].Is<float>() ||
        !outputs[5].Is<float>()) {
      return;
    }
    progressive_->Add(outputs[4].ToVector<float>(), outputs[5].ToVector<float>());
  }

  // Progressive validation's metrics, computed at most every 2 s (the window is sorted for AUC).
  std::map<std::string, double> StepFigures() const override {
    if (progressive_ == nullptr) return {};
    absl::MutexLock lock(&figures_mu_);
    const absl::Time now = absl::Now();
    if (now - figures_at_ >= absl::Seconds(2)) {
      figures_ = progressive_->Metrics();
      figures_at_ = now;
    }
    return figures_;
  }

  absl::StatusOr<bool> WaitForStep(int64_t step, const std::function<bool()>& stop) override {
    if (follower_ == nullptr) return true;
    while (true) {
      RETURN_IF_ERROR(follower_->Poll());
      // Rows for every closure scheduled and not yet done, and a batch for this one.
      const int64_t outstanding = scheduled_ - ledger_->ClosuresCompleted();
      if (ledger_->counts().rows_left >= (outstanding + 1) * config_.batch_size) {
        waiting_.store(false);
        return true;
      }
      if (stop()) return false;
      // (Logged at most once a minute; the progress line says so meanwhile.)
      if (!waiting_.exchange(true) && absl::Now() - last_wait_log_ >= absl::Minutes(1)) {
        last_wait_log_ = absl::Now();
        LOG(INFO) << "tabular: following " << follower_->dir() << ": waiting for new data ("
                  << follower_->files() << " file(s) read after the first)";
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  }

  int64_t PendingSteps() const override {
    if (follower_ != nullptr) return 0;  // trains until stopped
    // A run cut short by max_steps ends where it was told to.
    if (ledger_ == nullptr || total_steps_ < steps_per_epoch_ * config_.epochs) return 0;
    return ledger_->PendingSteps();
  }

  std::string ProgressNote() const override {
    if (ledger_ == nullptr) return "";
    const SplitLedger::Counts c = ledger_->counts();
    if (follower_ != nullptr) {
      std::string progressive;
      const std::map<std::string, double> f = StepFigures();
      for (const char* name : {"progressive_auc", "progressive_rmse", "progressive_accuracy"}) {
        if (auto it = f.find(name); it != f.end()) {
          progressive = absl::StrFormat(", %s %.4f", name, it->second);
        }
      }
      return absl::StrCat("following: ", follower_->files(), " new file(s), ", c.rows_trained,
                          " rows trained, ", c.rows_left, " to train", progressive,
                          waiting_.load() ? ", waiting for data" : "");
    }
    std::string note = absl::StrCat("splits ", c.splits_done, "/", c.splits * config_.epochs,
                                    " done, ", c.splits_in_flight, " dealt");
    if (c.splits_reassigned > 0) absl::StrAppend(&note, ", ", c.splits_reassigned, " again");
    if (c.rows_twice > 0) absl::StrAppend(&note, ", ", c.rows_twice, " rows twice");
    return note;
  }

  std::map<std::string, std::string> CheckpointState() const override {
    if (ledger_ == nullptr) return {};
    std::map<std::string, std::string> state = {{kLedgerState, ledger_->State()}};
    if (follower_ != nullptr) state[kFollowState] = follower_->State();
    return state;
  }

  absl::Status RestoreState(int64_t step,
                            const std::map<std::string, std::string>& state) override {
    if (ledger_ == nullptr) return absl::OkStatus();
    if (follower_ != nullptr) {
      // The files read before, read again in their order (their splits keep their ids), then the
      // ledger's state.
      auto f = state.find(kFollowState);
      if (f == state.end() || state.count(kLedgerState) == 0) {
        return absl::InvalidArgumentError(
            "--follow: the checkpoint is of a job that did not follow its data; start this one "
            "with another --checkpoint_dir, or --restore=none");
      }
      RETURN_IF_ERROR(follower_->Restore(f->second));
    }
    auto it = state.find(kLedgerState);
    if (it == state.end()) {
      // A checkpoint without the ledger (the synchronous strategies', or older code's): its whole
      // epochs count as trained, and the epoch it stopped in starts afresh.
      const int epochs_done = static_cast<int>(
          std::min<int64_t>(config_.epochs, step / std::max<int64_t>(1, steps_per_epoch_)));
      RETURN_IF_ERROR(ledger_->StartAtEpoch(epochs_done));
      LOG(INFO) << "tabular: the checkpoint has no data ledger: " << epochs_done
                << " epoch(s) count as trained, the next starts afresh";
      return absl::OkStatus();
    }
    RETURN_IF_ERROR(ledger_->Restore(it->second));
    const SplitLedger::Counts c = ledger_->counts();
    LOG(INFO) << "tabular: the data ledger resumes at epoch " << c.epoch << ": " << c.splits_done
              << " splits done, " << c.rows_trained << " rows trained, " << c.rows_left << " left";
    return absl::OkStatus();
  }

  int64_t total_steps() const override { return total_steps_; }
  int64_t steps_per_epoch() const override { return steps_per_epoch_; }
  int64_t examples_per_step() const override { return config_.batch_size; }

  absl::StatusOr<RemoteValue> ScheduleStep(ClusterCoordinator* coordinator, int64_t step) override {
    ++scheduled_;
    return coordinator->Schedule(kTabularTrain, {Tensor::Scalar<int64_t>(step)}, {dataset_},
                                 ledger_);
  }

  bool has_validation() const override { return plan_.rows[1] > 0; }
  std::string validation_metric() const override {
    switch (spec_.label.task) {
      case Task::kBinary: return "val_auc";
      case Task::kRegression: return "val_rmse";
      case Task::kMulticlass: return "val_accuracy";
    }
    return "val_loss";
  }

  absl::StatusOr<ModelMetrics> Validate(ClusterCoordinator* coordinator) override {
    ModelMetrics m;
    RETURN_IF_ERROR(Score(coordinator, Split::kValidation, "val_", &m));
    return m;
  }

  absl::StatusOr<std::string> ServingConfig() const override {
    nlohmann::json j;
    j["spec"] = spec_.text;
    j["spec_path"] = spec_.path;
    j["embedding_dim"] = spec_.model.embedding_dim;
    j["stats"] = plan_.stats.ToJson();
    j["seed"] = config_.seed;
    return j.dump();
  }

  absl::StatusOr<ModelMetrics> Evaluate(ClusterCoordinator* coordinator) override {
    ModelMetrics m;
    RETURN_IF_ERROR(Score(coordinator, Split::kTest, "test_", &m));
    m.notes["task"] = tabular::TaskName(spec_.label.task);
    m.notes["spec"] = spec_.path;
    m.notes["model_type"] = spec_.model.type == ModelType::kWide     ? "wide"
                            : spec_.model.type == ModelType::kDeep   ? "deep"
                                                                     : "wide_and_deep";
    m.notes["files"] = absl::StrCat(plan_.files.size());
    if (follower_ != nullptr) {
      m.notes["followed_files"] = absl::StrCat(follower_->files(), " after the first, in ",
                                               follower_->dir());
    }
    m.notes["train_rows"] = absl::StrCat(plan_.rows[0]);
    m.notes["validation_rows"] = absl::StrCat(plan_.rows[1]);
    m.notes["test_rows"] = absl::StrCat(plan_.rows[2]);
    m.notes["bad_rows"] = absl::StrCat(plan_.bad_rows);
    if (!plan_.bad_row_examples.empty()) {
      m.notes["bad_row_examples"] = absl::StrJoin(plan_.bad_row_examples, " | ");
    }
    m.notes["scan_seconds"] = absl::StrFormat("%.2f", scan_seconds_);
    const ExampleLayout layout(spec_);
    m.notes["features"] = absl::StrCat(spec_.features.size(), " (", layout.embedded.size(),
                                       " embedded in ", layout.num_slots, " slots, ",
                                       layout.num_dense, " dense)");
    m.notes["shuffle_buffer"] = absl::StrCat(ShuffleBuffer(layout), " examples (",
                                             ShuffleBuffer(layout) * ExampleBytes(layout),
                                             " bytes) per worker");
    if (!plan_.notes.empty()) m.notes["data_notes"] = absl::StrJoin(plan_.notes, " | ");
    if (ledger_ != nullptr) {
      const SplitLedger::Counts c = ledger_->counts();
      m.notes["data_splits"] = absl::StrCat(
          c.splits, follower_ != nullptr ? " followed" : " per epoch", ", dealt on demand: ",
          c.splits_done, " done, ", c.splits_reassigned, " dealt again after ", c.workers_lost, " lost worker(s); ", c.rows_trained,
          " rows trained, ", c.rows_twice, " reported twice, ", c.rows_left, " left");
      m.values["data_rows_trained"] = static_cast<double>(c.rows_trained);
      m.values["data_rows_twice"] = static_cast<double>(c.rows_twice);
      m.values["data_rows_left"] = static_cast<double>(c.rows_left);
    }
    return m;
  }

 private:
  static int64_t ExampleBytes(const ExampleLayout& layout) {
    return 8 * layout.num_slots + 4 * layout.num_dense + 4;
  }
  // Examples per worker's shuffle buffer.
  int64_t ShuffleBuffer(const ExampleLayout& layout) const {
    if (config_.shuffle_buffer > 0) return config_.shuffle_buffer;
    return std::max<int64_t>(1024, config_.shuffle_memory / ExampleBytes(layout));
  }

  absl::Status CreateVariables(ClusterCoordinator* coordinator, const ExampleLayout& layout) {
    OptimizerDef emb_opt = spec_.model.embeddings, wide_opt = spec_.model.wide,
                 dense_opt = spec_.model.dense;
    if (config_.learning_rate > 0) {
      emb_opt.set_learning_rate(config_.learning_rate);
      wide_opt.set_learning_rate(config_.learning_rate);
    }
    if (!spec_.model.embeddings_schedule) ApplyLrSchedule(config_.lr_schedule, &emb_opt);
    if (!spec_.model.wide_schedule) ApplyLrSchedule(config_.lr_schedule, &wide_opt);
    if (!spec_.model.dense_schedule) ApplyLrSchedule(config_.lr_schedule, &dense_opt);
    const std::vector<int64_t> groups = tabular::GroupTables(spec_, layout).min_counts;
    const int shards = coordinator->ps()->num_ps();
    const int K = shape_.outputs;
    for (int64_t mc : groups) {
      if (mc > 255) {
        return absl::InvalidArgumentError(absl::StrCat(spec_.path, ": min_count ", mc,
                                                       " is over 255 (the ps counts to 255)"));
      }
      DynamicTableDef options;
      options.set_admit_min_count(static_cast<int>(mc));
      options.set_row_format(spec_.model.row_format);
      options.set_slot_format(spec_.model.slot_format);
      auto table = [&](const char* base, int64_t dim, const OptimizerDef& opt, bool random,
                       uint64_t salt) -> absl::Status {
        TableSpec t;
        t.name = TableName(base, mc);
        t.dim = dim;
        t.num_shards = shards;
        t.optimizer = opt;
        t.options = options;
        if (random && spec_.model.init_stddev > 0) {
          t.initializer.set_kind(InitializerDef::TRUNCATED_NORMAL);
          t.initializer.set_stddev(spec_.model.init_stddev);
          t.initializer.set_seed(config_.seed * 1000 + salt + static_cast<uint64_t>(mc));
        }
        return coordinator->variables()->CreateTable(t).status();
      };
      if (shape_.deep) RETURN_IF_ERROR(table(kEmbeddingTables, shape_.dim, emb_opt, true, 1));
      if (shape_.wide) RETURN_IF_ERROR(table(kWideTables, K, wide_opt, false, 2));
      if (shape_.baseline) RETURN_IF_ERROR(table(kBaselineTables, K, wide_opt, false, 3));
    }
    const std::vector<float> prior = PriorLogits(spec_.label.task, plan_.stats);
    auto var = [&](const std::string& name, Shape shape, const OptimizerDef& opt,
                   InitializerDef init) -> absl::Status {
      VariableSpec v;
      v.name = name;
      v.shape = std::move(shape);
      v.optimizer = opt;
      v.initializer = std::move(init);
      return coordinator->variables()->Create(v).status();
    };
    auto normal = [&](double stddev, uint64_t salt) {
      InitializerDef init;
      init.set_kind(InitializerDef::TRUNCATED_NORMAL);
      init.set_stddev(stddev);
      init.set_seed(config_.seed * 1000 + salt);
      return init;
    };
    if (shape_.deep) {
      const std::vector<int64_t> widths = shape_.widths();
      const int layers = static_cast<int>(widths.size()) - 1;
      for (int l = 0; l < layers; ++l) {
        // He-normal into ReLUs; the output layer 1 / sqrt(fan-in) (as flights_ctr's).
        const double fan_in = static_cast<double>(widths[l]);
        const double stddev = l + 1 < layers ? std::sqrt(2.0 / fan_in) : 1.0 / std::sqrt(fan_in);
        RETURN_IF_ERROR(var(DeepWeightName(l), {widths[l], widths[l + 1]}, dense_opt,
                            normal(stddev, 10 + l)));
        RETURN_IF_ERROR(var(DeepBiasName(l), {widths[l + 1]}, dense_opt, InitializerDef()));
      }
      // The output bias starts at the prior (wide & deep: the deep part carries it).
      RETURN_IF_ERROR(coordinator->ps()->Variable(DeepBiasName(layers - 1)).status());
      ASSIGN_OR_RETURN(ShardedVariable out_bias, coordinator->ps()->Variable(DeepBiasName(layers - 1)));
      RETURN_IF_ERROR(out_bias.AssignAll(absl::string_view(
          reinterpret_cast<const char*>(prior.data()), prior.size() * sizeof(float))));
    }
    auto wide_vars = [&](const char* dense_name, const char* bias_name, bool carry_prior) -> absl::Status {
      if (shape_.dense > 0) {
        RETURN_IF_ERROR(var(dense_name, {shape_.dense, K}, wide_opt, InitializerDef()));
      }
      RETURN_IF_ERROR(var(bias_name, {K}, wide_opt, InitializerDef()));
      if (!carry_prior) return absl::OkStatus();
      ASSIGN_OR_RETURN(ShardedVariable bias, coordinator->ps()->Variable(bias_name));
      return bias.AssignAll(absl::string_view(reinterpret_cast<const char*>(prior.data()),
                                              prior.size() * sizeof(float)));
    };
    if (shape_.wide) RETURN_IF_ERROR(wide_vars(kWideDense, kWideBias, !shape_.deep));
    if (shape_.baseline) RETURN_IF_ERROR(wide_vars(kBaseDense, kBaseBias, true));
    return absl::OkStatus();
  }

  // The split's metrics, "<prefix>auc" and so on, from eval closures over its units (scheduled a
  // few per worker at a time, their sums added as they come).
  absl::Status Score(ClusterCoordinator* coordinator, Split split, const std::string& prefix,
                     ModelMetrics* m) {
    const std::vector<Range> units = plan_.EvalUnits(split);
    EvalSums sums;
    const size_t wave = static_cast<size_t>(std::max(1, coordinator->num_workers()) * 4);
    for (size_t first = 0; first < units.size(); first += wave) {
      std::vector<RemoteValue> values;
      for (size_t u = first; u < std::min(units.size(), first + wave); ++u) {
        const Range& r = units[u];
        ASSIGN_OR_RETURN(
            RemoteValue v,
            coordinator->Schedule(
                kTabularEval,
                {Tensor::Scalar<int64_t>(static_cast<int64_t>(split)),
                 Tensor::Scalar<int64_t>(r.file), Tensor::Scalar<int64_t>(r.begin),
                 Tensor::Scalar<int64_t>(r.end), Tensor::Scalar<int64_t>(r.first_line),
                 Tensor::Scalar<int64_t>(r.rows), Tensor::Scalar<int64_t>(r.train_rows)},
                {dataset_}));
        values.push_back(std::move(v));
      }
      for (const RemoteValue& v : values) {
        ASSIGN_OR_RETURN(std::vector<Tensor> out, v.Fetch());
        RETURN_IF_ERROR(sums.Add(out));
      }
    }
    const double n = static_cast<double>(std::max<int64_t>(sums.count, 1));
    const bool baseline = shape_.baseline;
    switch (spec_.label.task) {
      case Task::kBinary:
        m->values[prefix + "auc"] = HistogramAuc(sums.hist);
        m->values[prefix + "logloss"] = sums.loss / n;
        m->values[prefix + "prior_logloss"] = sums.prior_loss / n;
        if (baseline) {
          m->values[prefix + "baseline_auc"] = HistogramAuc(sums.base_hist);
          m->values[prefix + "baseline_logloss"] = sums.base_loss / n;
        }
        break;
      case Task::kRegression:
        m->values[prefix + "rmse"] = std::sqrt(sums.sq / n);
        m->values[prefix + "prior_rmse"] = std::sqrt(sums.prior_sq / n);
        if (baseline) m->values[prefix + "baseline_rmse"] = std::sqrt(sums.base_sq / n);
        break;
      case Task::kMulticlass:
        m->values[prefix + "accuracy"] = sums.correct / n;
        m->values[prefix + "logloss"] = sums.loss / n;
        m->values[prefix + "prior_accuracy"] = sums.prior_correct / n;
        m->values[prefix + "prior_logloss"] = sums.prior_loss / n;
        if (baseline) {
          m->values[prefix + "baseline_accuracy"] = sums.base_correct / n;
          m->values[prefix + "baseline_logloss"] = sums.base_loss / n;
        }
        break;
    }
    m->notes[prefix + "rows_evaluated"] = absl::StrCat(sums.count);
    return absl::OkStatus();
  }

  const TabularConfig config_;
  // The data's splits dealt on demand (coordinator/split_ledger.h); null for fixed shares.
  std::shared_ptr<SplitLedger> ledger_;
  // A job that follows its data: the directory's new files into the ledger; null otherwise.
  std::unique_ptr<tabular::DataFollower> follower_;
  int64_t scheduled_ = 0;              // steps scheduled by this run
  std::unique_ptr<tabular::ProgressiveWindow> progressive_;  // following: the last examples scored
  mutable absl::Mutex figures_mu_;
  mutable std::map<std::string, double> figures_ ABSL_GUARDED_BY(figures_mu_);
  mutable absl::Time figures_at_ ABSL_GUARDED_BY(figures_mu_) = absl::InfinitePast();
  std::atomic<bool> waiting_{false};   // for rows (the progress note)
  absl::Time last_wait_log_ = absl::InfinitePast();
  Spec spec_;
  DataPlan plan_;
  NetShape shape_;
  double scan_seconds_ = 0;
  int64_t steps_per_epoch_ = 0;
  int64_t total_steps_ = 0;
  PerWorkerDataset dataset_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> CreateTabular(const ModelOptions& options) {
  TabularConfig c;
  ExtraOptions extra(kTabularModel, options.extra);
  c.spec_path = extra.GetString("feature_spec", "");
  const std::string bad_rows = extra.GetString("bad_rows", "error");
  ASSIGN_OR_RETURN(c.shuffle_buffer, extra.GetInt("shuffle_buffer", c.shuffle_buffer));
  ASSIGN_OR_RETURN(c.shuffle_memory, ParseByteSize(extra.GetString("shuffle_memory", "256M")));
  ASSIGN_OR_RETURN(int64_t interleave, extra.GetInt("interleave", c.interleave));
  const std::string deal = extra.GetString("deal_splits", "true");
  ASSIGN_OR_RETURN(c.hold_rows, extra.GetInt("hold_rows", 0));
  c.row_log = extra.GetString("row_log", "");
  const std::string follow = extra.GetString("follow", "false");
  ASSIGN_OR_RETURN(double follow_poll, extra.GetDouble("follow_poll_seconds", 1.0));
  ASSIGN_OR_RETURN(c.progressive_window, extra.GetInt("progressive_window", c.progressive_window));
  ASSIGN_OR_RETURN(int64_t slow_worker, extra.GetInt("slow_worker", -1));
  ASSIGN_OR_RETURN(c.slow_factor, extra.GetDouble("slow_factor", 1.0));
  RETURN_IF_ERROR(extra.Finish());
  auto bad = [](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(kTabularModel, ": ", what));
  };
  if (c.spec_path.empty()) return bad("--feature_spec=FILE is required (see docs/feature-spec.md)");
  if (options.data.empty()) return bad("--data=FILE, DIRECTORY or GLOB is required");
  if (bad_rows != "error" && bad_rows != "skip") {
    return bad(absl::StrCat("--bad_rows=", bad_rows, " is not error or skip"));
  }
  if (c.shuffle_buffer < 0 || c.shuffle_buffer > (int64_t{1} << 28)) {
    return bad("shuffle_buffer must be in [0, 2^28]");
  }
  if (c.shuffle_memory < (int64_t{1} << 20)) return bad("shuffle_memory must be at least 1M");
  if (interleave < 1 || interleave > 1024) return bad("interleave must be in [1, 1024]");
  if (deal != "true" && deal != "false") {
    return bad(absl::StrCat("deal_splits=", deal, " is not true or false"));
  }
  c.deal_splits = deal == "true";
  if (follow != "true" && follow != "false") {
    return bad(absl::StrCat("follow=", follow, " is not true or false"));
  }
  c.follow = follow == "true";
  if (!(follow_poll >= 0.01 && follow_poll <= 3600)) {
    return bad("follow_poll_seconds must be in [0.01, 3600]");
  }
  c.follow_poll = absl::Seconds(follow_poll);
  if (c.progressive_window < 1 || c.progressive_window > (int64_t{1} << 26)) {
    return bad("progressive_window must be in [1, 2^26] examples");
  }
  if (c.hold_rows < 0) return bad("hold_rows must be >= 0 (0: the default)");
  if (slow_worker < -1 || !(c.slow_factor >= 1 && c.slow_factor <= 100)) {
    return bad("slow_worker must be a worker's index (or -1) and slow_factor in [1, 100]");
  }
  c.slow_worker = static_cast<int>(slow_worker);
  if (options.devices.replicas > 1) {
    return bad(absl::StrCat("runs one replica per worker (asked: ", options.devices.replicas,
                            "); use more workers instead"));
  }
  c.interleave = static_cast<int>(interleave);
  c.skip_bad_rows = bad_rows == "skip";
  c.data = options.data;
  c.validation_data = options.validation_data;
  c.validation_fraction = options.validation_fraction;
  if (options.epochs > 0) c.epochs = options.epochs;
  if (options.batch_size > 0) c.batch_size = options.batch_size;
  c.max_steps = options.max_steps;
  c.learning_rate = options.learning_rate;
  c.lr_schedule = options.lr_schedule;
  c.embedding_dim = options.embedding_dim;
  c.seed = options.seed;
  c.devices = options.devices;
  c.dense_turns = options.dense_turns;
  if (options.data_shards < 1 || options.data_shard < 0 ||
      options.data_shard >= options.data_shards) {
    return bad(absl::StrCat("data shard ", options.data_shard, " of ", options.data_shards));
  }
  if (options.data_shards > c.batch_size) {
    return bad(absl::StrCat("batch_size ", c.batch_size, " is smaller than the ",
                            options.data_shards, " synchronous workers that split each batch"));
  }
  c.data_shard = options.data_shard;
  c.data_shards = options.data_shards;
  ASSIGN_OR_RETURN(Spec spec, tabular::ReadSpec(c.spec_path));
  if (c.embedding_dim > 0) spec.model.embedding_dim = c.embedding_dim;
  return std::unique_ptr<Model>(new TabularModel(std::move(c), std::move(spec)));
}

}  // namespace pstrain
