// The trainer end to end on a small ratings file the test writes: it trains and evaluates; a run
// stopped after a checkpoint resumes at that step; the coordinator binary killed with SIGKILL
// mid-job and run again resumes at its last checkpoint and finishes; TensorBoard events appear.
#include <atomic>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "coordinator/checkpoint_files.h"
#include "models/model.h"
#include "trainer/event_writer.h"
#include "trainer/trainer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/test_util.h"
#include "models/movielens_mf.h"
#include "models/registry.h"
#include "nlohmann/json.hpp"
#include "coordinator/in_process_cluster.h"
#include "tests/subprocess.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

// 40 users x 30 items with a low-rank structure plus noise; about half the pairs rated.
std::string WriteRatings(const std::string& dir) {
  const std::string path = dir + "/ratings.csv";
  std::ofstream f(path);
  f << "user,item,stars,when\n";
  std::mt19937 rng(5);
  std::normal_distribution<double> noise(0, 0.3);
  for (int u = 0; u < 40; ++u) {
    for (int i = 0; i < 30; ++i) {
      if ((u * 7 + i * 3) % 2 == 0) continue;
      const double r = 3 + 0.8 * std::sin(u) * std::cos(i) + 0.5 * ((u % 3) - 1) + noise(rng);
      f << "u" << u << "," << 100 + i << "," << std::clamp(r, 1.0, 5.0) << ",0\n";
    }
  }
  return path;
}

std::unique_ptr<Model> SmallModel(const std::string& csv, int epochs) {
  ModelOptions o;
  o.data = csv;
  o.epochs = epochs;
  o.batch_size = 16;
  o.embedding_dim = 4;
  o.learning_rate = 0.1;
  o.extra = {{"user_col", "user"}, {"item_col", "item"}, {"rating_col", "stars"}};
  return *CreateMatrixFactorization(o);
}

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = FreshTempDir("trainer");
    csv_ = WriteRatings(dir_);
    InProcessClusterOptions o;
    o.num_ps = 2;
    o.num_workers = 2;
    o.registry = *TrainingRegistry(std::make_shared<ReplicaGroups>());
    cluster_ = std::move(*InProcessCluster::Start(o));
  }
  std::string dir_, csv_;
  std::unique_ptr<InProcessCluster> cluster_;
};

TEST_F(TrainerTest, Train_SmallRatings_BeatsBiasBaselineAndWritesEvents) {
  auto model = SmallModel(csv_, /*epochs=*/30);
  TrainerOptions options;
  options.logdir = dir_ + "/logs";
  options.progress.is_tty = false;
  absl::StatusOr<TrainResult> r = Train(cluster_->spec(), model.get(), options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->start_step, 0);
  EXPECT_GT(r->end_step, 0);
  EXPECT_LT(r->metrics.values["test_rmse"], r->metrics.values["baseline_test_rmse"]);
  EXPECT_THAT(r->ToJson(), HasSubstr("\"model\":\"movielens_mf\""));
  // The event file holds the loss curve and the final metrics, each record's CRCs checked.
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(options.logdir)) {
    files.push_back(e.path().string());
  }
  ASSERT_EQ(files.size(), 1u);
  absl::StatusOr<std::vector<tensorflow::Event>> events = ReadEventFile(files[0]);
  ASSERT_TRUE(events.ok()) << events.status();
  std::set<std::string> tags;
  for (const auto& e : *events) {
    for (const auto& v : e.summary().value()) tags.insert(v.tag());
  }
  EXPECT_TRUE(tags.count("loss") && tags.count("examples_per_sec") && tags.count("test_rmse"));
}

TEST_F(TrainerTest, StoppedAfterCheckpoint_NextRunResumesAtSavedStep) {
  auto model = SmallModel(csv_, /*epochs=*/4);
  TrainerOptions options;
  options.checkpoint_dir = dir_ + "/ckpt";
  options.checkpoint_every_steps = 25;
  options.keep_best = false;  // only the periodic checkpoints
  options.progress.is_tty = false;
  options.evaluate = false;
  options.after_step = [](int64_t step) {
    return step == 60 ? absl::AbortedError("simulated crash at step 60") : absl::OkStatus();
  };
  absl::StatusOr<TrainResult> first = Train(cluster_->spec(), model.get(), options);
  EXPECT_EQ(first.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(LatestCheckpoint(options.checkpoint_dir)->step, 50);

  auto again = SmallModel(csv_, /*epochs=*/4);
  options.after_step = nullptr;
  absl::StatusOr<TrainResult> second = Train(cluster_->spec(), again.get(), options);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->start_step, 50);
  EXPECT_EQ(second->end_step, again->total_steps());
  EXPECT_THAT(second->restored_from, HasSubstr("ckpt-000000000050"));
  EXPECT_EQ(LatestCheckpoint(options.checkpoint_dir)->step, again->total_steps());
}

TEST_F(TrainerTest, StopRequested_FinalCheckpointWhereItStopped_NextRunGoesOnFromThere) {
  auto model = SmallModel(csv_, /*epochs=*/4);
  TrainerOptions options;
  options.checkpoint_dir = dir_ + "/ckpt";
  options.keep_best = false;
  options.progress.is_tty = false;
  std::atomic<int64_t> collected{0};
  options.after_step = [&](int64_t) {
    collected.fetch_add(1);
    return absl::OkStatus();
  };
  options.stop_requested = [&] { return collected.load() >= 40; };
  absl::StatusOr<TrainResult> first = Train(cluster_->spec(), model.get(), options);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->interrupted);
  EXPECT_GE(first->end_step, 40);
  EXPECT_LT(first->end_step, model->total_steps());
  // Every scheduled step was collected before the save: the checkpoint is at the step reached.
  EXPECT_EQ(collected.load(), first->end_step);
  EXPECT_EQ(LatestCheckpoint(options.checkpoint_dir)->step, first->end_step);
  EXPECT_GT(first->metrics.values.count("test_rmse"), 0u);  // evaluated all the same
  EXPECT_THAT(first->ToJson(), HasSubstr("\"interrupted\":true"));

  auto again = SmallModel(csv_, /*epochs=*/4);
  options.stop_requested = nullptr;
  options.after_step = nullptr;
  absl::StatusOr<TrainResult> second = Train(cluster_->spec(), again.get(), options);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_FALSE(second->interrupted);
  EXPECT_EQ(second->start_step, first->end_step);
  EXPECT_EQ(second->end_step, again->total_steps());
}

TEST_F(TrainerTest, CheckpointOfAnotherModelShape_ClearErrorBeforeTraining) {
  TrainerOptions options;
  options.checkpoint_dir = dir_ + "/ckpt_shape";
  options.progress.is_tty = false;
  options.evaluate = false;
  auto model = SmallModel(csv_, 1);
  ASSERT_TRUE(Train(cluster_->spec(), model.get(), options).ok());
  // The same names with another embedding width: the restore names the variable and both shapes.
  ModelOptions o;
  o.data = csv_;
  o.embedding_dim = 6;
  o.extra = {{"user_col", "user"}, {"item_col", "item"}, {"rating_col", "stars"}};
  InProcessClusterOptions co;
  co.num_ps = 1;
  co.num_workers = 1;
  co.registry = *TrainingRegistry(std::make_shared<ReplicaGroups>());
  auto fresh = std::move(*InProcessCluster::Start(co));
  auto wider = *CreateMatrixFactorization(o);
  absl::StatusOr<TrainResult> r = Train(fresh->spec(), wider.get(), options);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  // The tables are dynamic (the default): their shape is the row's.
  EXPECT_THAT(r.status().message(),
              HasSubstr("\"mf/item_embedding\" was saved as [4] DT_FLOAT32 but is now [6]"));
  // Fixed tables (tables=fixed), saved and then restored wider, say the same of their full shape.
  options.checkpoint_dir = dir_ + "/ckpt_shape_fixed";
  o.extra["tables"] = "fixed";
  o.embedding_dim = 4;
  auto fixed = *CreateMatrixFactorization(o);
  auto fixed_cluster = std::move(*InProcessCluster::Start(co));
  ASSERT_TRUE(Train(fixed_cluster->spec(), fixed.get(), options).ok());
  o.embedding_dim = 6;
  auto fixed_wider = *CreateMatrixFactorization(o);
  auto fixed_fresh = std::move(*InProcessCluster::Start(co));
  r = Train(fixed_fresh->spec(), fixed_wider.get(), options);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(),
              HasSubstr("\"mf/item_embedding\" was saved as [30,4] DT_FLOAT32 but is now [30,6]"));
}

// movielens_mf as it is, but the metric its validation is watched on follows a crafted curve; its
// real validation RMSE is recorded at each validation and again when the test evaluation runs, to
// tell which weights that evaluation saw.
class CraftedCurveModel : public Model {
 public:
  CraftedCurveModel(std::unique_ptr<Model> inner, std::vector<double> curve)
      : inner_(std::move(inner)), curve_(std::move(curve)) {}
  std::string name() const override { return inner_->name(); }
  absl::Status Setup(ClusterCoordinator* c) override { return inner_->Setup(c); }
  int64_t total_steps() const override { return inner_->total_steps(); }
  int64_t steps_per_epoch() const override { return inner_->steps_per_epoch(); }
  int64_t examples_per_step() const override { return inner_->examples_per_step(); }
  absl::StatusOr<RemoteValue> ScheduleStep(ClusterCoordinator* c, int64_t step) override {
    return inner_->ScheduleStep(c, step);
  }
  bool has_validation() const override { return true; }
  std::string validation_metric() const override { return "val_crafted"; }
  absl::StatusOr<ModelMetrics> Validate(ClusterCoordinator* c) override {
    absl::StatusOr<ModelMetrics> m = inner_->Validate(c);
    if (!m.ok()) return m.status();
    real_val_rmse.push_back(m->values.at("val_rmse"));
    m->values["val_crafted"] = curve_.at(std::min(calls_++, curve_.size() - 1));
    return m;
  }
  absl::StatusOr<ModelMetrics> Evaluate(ClusterCoordinator* c) override {
    absl::StatusOr<ModelMetrics> v = inner_->Validate(c);
    if (!v.ok()) return v.status();
    evaluated_val_rmse = v->values.at("val_rmse");
    return inner_->Evaluate(c);
  }
  std::vector<double> real_val_rmse;
  double evaluated_val_rmse = -1;

 private:
  std::unique_ptr<Model> inner_;
  std::vector<double> curve_;
  size_t calls_ = 0;
};

// Validations at step 0 and after each epoch see 1.0, 0.9, 0.8 (the best, after epoch 2), 0.85,
// 0.86: with patience 2 training stops after epoch 4. The best checkpoint is marked, the test
// evaluation runs on it (the validation RMSE it sees is the one recorded after epoch 2), and a
// rerun resumes at the stop and trains no further.
TEST_F(TrainerTest, EarlyStopping_CraftedCurve_StopsAndEvaluatesTheBestCheckpoint) {
  const std::vector<double> curve = {1.0, 0.9, 0.8, 0.85, 0.86, 0.7, 0.6};
  CraftedCurveModel model(SmallModel(csv_, /*epochs=*/8), curve);
  TrainerOptions options;
  options.checkpoint_dir = dir_ + "/early";
  options.early_stopping_patience = 2;
  options.progress.is_tty = false;
  absl::StatusOr<TrainResult> r = Train(cluster_->spec(), &model, options);
  ASSERT_TRUE(r.ok()) << r.status();
  const int64_t epoch = model.steps_per_epoch();
  EXPECT_TRUE(r->stopped_early);
  EXPECT_EQ(r->end_step, 4 * epoch);
  EXPECT_LT(r->end_step, model.total_steps());
  EXPECT_EQ(r->validations, 5);
  EXPECT_EQ(r->monitor, "val_crafted");
  EXPECT_EQ(r->best_step, 2 * epoch);
  EXPECT_EQ(r->best_value, 0.8);
  absl::StatusOr<std::optional<BestMarker>> mark = ReadBestMarker(options.checkpoint_dir);
  ASSERT_TRUE(mark.ok() && mark->has_value()) << mark.status();
  EXPECT_EQ((*mark)->step, 2 * epoch);
  EXPECT_THAT(r->evaluated, HasSubstr(absl::StrCat("(step ", 2 * epoch, ")")));
  ASSERT_EQ(model.real_val_rmse.size(), 5u);
  EXPECT_EQ(model.evaluated_val_rmse, model.real_val_rmse[2]);
  EXPECT_NE(model.evaluated_val_rmse, model.real_val_rmse[4]);
  EXPECT_EQ(LatestCheckpoint(options.checkpoint_dir)->step, 4 * epoch);
  EXPECT_THAT(r->ToJson(), HasSubstr("\"stopped_early\":true"));

  CraftedCurveModel again(SmallModel(csv_, /*epochs=*/8), curve);
  absl::StatusOr<TrainResult> rerun = Train(cluster_->spec(), &again, options);
  ASSERT_TRUE(rerun.ok()) << rerun.status();
  EXPECT_TRUE(rerun->stopped_early);
  EXPECT_EQ(rerun->start_step, 4 * epoch);
  EXPECT_EQ(rerun->end_step, 4 * epoch);
  EXPECT_EQ(rerun->examples, 0);
  EXPECT_EQ(rerun->best_step, 2 * epoch);
  EXPECT_EQ(again.evaluated_val_rmse, model.real_val_rmse[2]);
}

// Noisy ratings with no structure beyond the biases: the factors only overfit. The untrained model
// is the bias baseline (zero user factors, biases warm-started from it), so the best validation,
// the step-0 one at worst, is never worse than the baseline's, and the test evaluation runs on it.
TEST_F(TrainerTest, NoisyRatings_BestCheckpointNoWorseThanTheBiasBaseline) {
  const std::string path = dir_ + "/noisy.csv";
  {
    std::ofstream f(path);
    f << "\"reader\",\"book\",\"score\"\n";  // quoted, as R's write.csv writes them
    std::mt19937 rng(11);
    std::normal_distribution<double> noise(0, 2.0);
    for (int k = 0; k < 3000; ++k) {
      const int u = static_cast<int>(rng() % 150), i = static_cast<int>(rng() % 400);
      const double r = 5.5 + (u % 5) * 0.3 - (i % 7) * 0.2 + noise(rng);
      f << "\"r" << u << "\",\"b" << i << "\"," << std::clamp(std::round(r), 1.0, 10.0) << "\n";
    }
  }
  ModelOptions o;
  o.data = path;
  o.epochs = 30;
  o.batch_size = 32;
  o.learning_rate = 0.1;
  o.extra = {{"user_col", "reader"}, {"item_col", "book"}, {"rating_col", "score"}, {"l2", "0"}};
  auto model = *CreateMatrixFactorization(o);
  TrainerOptions options;
  options.checkpoint_dir = dir_ + "/noisy_ckpt";
  options.progress.is_tty = false;
  absl::StatusOr<TrainResult> r = Train(cluster_->spec(), model.get(), options);
  ASSERT_TRUE(r.ok()) << r.status();
  const auto& v = r->metrics.values;
  EXPECT_LE(r->best_value, v.at("val_baseline_rmse") + 1e-4);
  EXPECT_EQ(v.at("val_rmse"), r->best_value);
  // The final weights overfit (their training RMSE far below the noise) ...
  EXPECT_LT(r->best_step, r->end_step);
  // ... and the test evaluation ran on the best, within noise of the baseline, not far above it
  // (600 test ratings of 2-star noise; which step is best varies with the workers' timing: 0.021
  // above the baseline was seen once under a loaded machine; the overfit final weights end about
  // 0.07 above it).
  EXPECT_THAT(r->evaluated, HasSubstr("best checkpoint"));
  EXPECT_LT(v.at("test_rmse"), v.at("baseline_test_rmse") + 0.04);
}

// The coordinator binary (with its own in-process cluster) training the ratings in `csv` long
// enough to be stopped, with a checkpoint every 200 steps in `ckpt`.
std::vector<std::string> RatingsJobArgv(const std::string& csv, const std::string& ckpt) {
  return {RunfilePath("trainer/coordinator"),
          "--model=movielens_mf",
          "--data=" + csv,
          "--user_col=user",
          "--item_col=item",
          "--rating_col=stars",
          "--batch_size=8",
          "--epochs=150",
          "--checkpoint_dir=" + ckpt,
          "--checkpoint_every_steps=200",
          "--logdir="};
}

// The coordinator binary (with its own in-process cluster) killed mid-job and started again.
TEST(CoordinatorBinaryTest, KilledMidJob_RerunResumesAtLastCheckpointAndFinishes) {
  const std::string dir = FreshTempDir("binary");
  const std::string csv = WriteRatings(dir);
  const std::string ckpt = dir + "/ckpt";
  const std::vector<std::string> argv = RatingsJobArgv(csv, ckpt);
  {
    auto first = Subprocess::Start("first", argv, {}, dir);
    ASSERT_TRUE(first.ok()) << first.status();
    const absl::Time deadline = absl::Now() + absl::Seconds(120);
    while (!LatestCheckpoint(ckpt).ok() && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    (*first)->Signal(SIGKILL);
    ASSERT_EQ(*(*first)->Wait(absl::Seconds(30)), 128 + SIGKILL) << (*first)->Stderr();
  }
  absl::StatusOr<CheckpointEntry> latest = LatestCheckpoint(ckpt);
  ASSERT_TRUE(latest.ok()) << latest.status();
  auto second = Subprocess::Start("second", argv, {}, dir);
  ASSERT_TRUE(second.ok());
  ASSERT_EQ(*(*second)->Wait(absl::Seconds(240)), 0) << (*second)->Stderr();
  nlohmann::json j = nlohmann::json::parse((*second)->SummaryLine());
  EXPECT_EQ(j["start_step"].get<int64_t>(), latest->step);
  EXPECT_GT(j["end_step"].get<int64_t>(), latest->step);
  EXPECT_LT(j["test_rmse"].get<double>(), j["baseline_test_rmse"].get<double>());
}

// SIGTERM (as Kubernetes stops a pod): the job stops between steps, saves a final checkpoint, prints
// its summary and exits 143; a rerun goes on from that checkpoint.
TEST(CoordinatorBinaryTest, SigtermMidJob_FinalCheckpointAndSummary_RerunGoesOn) {
  const std::string dir = FreshTempDir("sigterm");
  const std::string csv = WriteRatings(dir);
  const std::string ckpt = dir + "/ckpt";
  const std::vector<std::string> argv = RatingsJobArgv(csv, ckpt);
  auto first = Subprocess::Start("first", argv, {}, dir);
  ASSERT_TRUE(first.ok()) << first.status();
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  while (!LatestCheckpoint(ckpt).ok() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_TRUE(LatestCheckpoint(ckpt).ok()) << (*first)->Stderr();
  (*first)->Signal(SIGTERM);
  ASSERT_EQ(*(*first)->Wait(absl::Seconds(120)), 128 + SIGTERM) << (*first)->Stderr();
  EXPECT_THAT((*first)->Stderr(), HasSubstr("SIGTERM: stopping after the steps in flight"));
  nlohmann::json j = nlohmann::json::parse((*first)->SummaryLine());
  EXPECT_TRUE(j.value("interrupted", false));
  absl::StatusOr<CheckpointEntry> latest = LatestCheckpoint(ckpt);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->step, j["end_step"].get<int64_t>());

  auto second = Subprocess::Start("second", argv, {}, dir);
  ASSERT_TRUE(second.ok());
  ASSERT_EQ(*(*second)->Wait(absl::Seconds(240)), 0) << (*second)->Stderr();
  nlohmann::json j2 = nlohmann::json::parse((*second)->SummaryLine());
  EXPECT_EQ(j2["start_step"].get<int64_t>(), latest->step);
  EXPECT_FALSE(j2.value("interrupted", false));
}

}  // namespace
}  // namespace pstrain
