// A tabular job that follows its data (docs/online.md) on a real in-process cluster: a writer adds
// files to the directory while the job trains; each row is trained once, in file order, and the
// job, stopped, saves a final checkpoint from which a second run goes on with the files that
// arrived since, training no row twice.
#include <signal.h>

#include <atomic>
#include <functional>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "common/test_util.h"
#include "coordinator/checkpoint_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/registry.h"
#include "models/tabular/tabular_model.h"
#include "serving/export.h"
#include "serving/prediction_server_models.h"
#include "serving/predictor.h"
#include "nlohmann/json.hpp"
#include "tests/row_log.h"
#include "tests/subprocess.h"
#include "tests/train_in_process.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

constexpr int kBatch = 32;

// `rows` rows of a separable table (bought in cities 0 and 1), written whole: under a dot name,
// then renamed, as a writer of a followed directory does.
void WriteFile(const std::string& dir, const std::string& name, int rows, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string csv = "city,income,bought\n";
  for (int i = 0; i < rows; ++i) {
    const int c = static_cast<int>(rng() % 6);
    absl::StrAppend(&csv, "c", c, ",", rng() % 1000, ",", c < 2 ? "1" : "0", "\n");
  }
  const std::string tmp = dir + "/." + name;
  std::ofstream(tmp, std::ios::binary | std::ios::trunc) << csv;
  std::filesystem::rename(tmp, dir + "/" + name);
}

std::string WriteSpec(const std::string& dir) {
  const std::string path = dir + "/spec.json";
  std::ofstream(path) << absl::StrReplaceAll(R"({
    'label': {'column': 'bought'},
    'features': [{'name': 'city', 'column': 'city'},
                 {'name': 'income', 'type': 'numeric', 'column': 'income'}],
    'model': {'type': 'wide', 'embedding_dim': 4}})",
                                             {{"'", "\""}});
  return path;
}

int64_t Total(const std::map<int64_t, int>& rows) {
  int64_t n = 0;
  for (const auto& [id, times] : rows) n += times;
  return n;
}

class OnlineTrainingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = FreshTempDir("online");
    data_ = root_ + "/stream";
    std::filesystem::create_directories(data_);
    spec_ = WriteSpec(root_);
  }

  // A following run that stops once `writer_done`, rows were trained, and none for a second.
  absl::StatusOr<TrainResult> Run(const std::string& log, const std::atomic<bool>& writer_done,
                                  const std::function<void(TrainerOptions*)>& adjust = nullptr) {
    ModelOptions o;
    o.data = data_;
    o.batch_size = kBatch;
    o.extra = {{"feature_spec", spec_},
               {"follow", "true"},
               {"follow_poll_seconds", "0.05"},
               {"row_log", root_ + "/" + log},
               {"hold_rows", "128"}};
    absl::StatusOr<std::unique_ptr<Model>> model = CreateTabular(o);
    if (!model.ok()) return model.status();
    EXPECT_TRUE((*model)->follows_data());
    TrainerOptions t;
    t.checkpoint_dir = root_ + "/ckpt";
    t.checkpoint_every = absl::ZeroDuration();
    t.keep_best = false;
    t.validate = false;
    t.progress.is_tty = false;
    int64_t last_total = -1;
    absl::Time last_change = absl::Now();
    t.stop_requested = [&, log]() {
      const int64_t total = Total(LoggedRows(root_, log));
      if (total != last_total) {
        last_total = total;
        last_change = absl::Now();
      }
      // (Something trained first: a resumed run reads its files again before its first step.)
      return writer_done.load() && total > 0 && absl::Now() - last_change > absl::Seconds(1);
    };
    if (adjust) adjust(&t);
    return TrainInProcess(*TrainingRegistry(std::make_shared<ReplicaGroups>()), /*workers=*/2,
                          /*ps=*/2, model->get(), t);
  }

  std::string root_, data_, spec_;
};

TEST_F(OnlineTrainingTest, FilesArriveWhileTraining_EachRowOnce_ResumedRunTakesOnlyTheNew) {
  WriteFile(data_, "000.csv", 1500, 1);
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (int f = 1; f <= 4; ++f) {
      absl::SleepFor(absl::Milliseconds(300));
      WriteFile(data_, absl::StrFormat("%03d.csv", f), 1000, 100 + f);
    }
    done = true;
  });
  absl::StatusOr<TrainResult> first = Run("first", done);
  writer.join();
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->interrupted);
  EXPECT_GT(first->metrics.values.at("test_auc"), 0.95);
  // Progressive validation: the stream's examples, each scored before it was trained on.
  EXPECT_GT(first->metrics.values.at("progressive_auc"), 0.9);
  EXPECT_GT(first->metrics.values.at("progressive_examples"), 0);
  // The first file's training rows (its test and validation rows held out) and every row of the
  // four that followed, each once; at most a batch's worth short (the tail waits for more data).
  const int64_t first_file_train = std::stoll(first->metrics.notes.at("train_rows"));
  const std::map<int64_t, int> before = LoggedRows(root_, "first");
  for (const auto& [id, times] : before) ASSERT_EQ(times, 1) << id;
  const int64_t expected = first_file_train + 4 * 1000;
  EXPECT_LE(Total(before), expected);
  EXPECT_GT(Total(before), expected - kBatch);
  EXPECT_EQ(first->metrics.values.at("data_rows_trained"), Total(before));

  // Two more files arrive while the job is down; the resumed job reads the six files again in
  // their order, trains what the first run left (its tail) and the new files, nothing twice.
  WriteFile(data_, "005.csv", 700, 105);
  WriteFile(data_, "006.csv", 300, 106);
  std::atomic<bool> none_coming{true};
  absl::StatusOr<TrainResult> second = Run("second", none_coming);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->start_step, first->end_step);
  const std::map<int64_t, int> after = LoggedRows(root_, "second");
  for (const auto& [id, times] : after) {
    ASSERT_EQ(times, 1) << id;
    ASSERT_EQ(before.count(id), 0u) << "row " << id << " trained in both runs";
  }
  EXPECT_LE(Total(before) + Total(after), expected + 1000);
  EXPECT_GT(Total(before) + Total(after), expected + 1000 - kBatch);
}

// Serving that follows training (serving/model_follower.h): a model exported from the job's first
// checkpoint is served while the job follows its data and saves incremental checkpoints; each
// poll brings the version served up to the newest checkpoint, so the probe set's predictions move
// as training goes on, and after the last poll equal those of an export of the final checkpoint.
// A corrupt checkpoint is skipped (DATA_LOSS) and a vanished checkpoint directory leaves the
// version served as it was.
TEST_F(OnlineTrainingTest, ServingFollowsTheJob_AfterTheLastSyncAsTheFinalCheckpoint) {
  WriteFile(data_, "000.csv", 1500, 1);
  const std::string ckpt = root_ + "/ckpt";
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (int f = 1; f <= 6; ++f) {
      absl::SleepFor(absl::Milliseconds(400));
      WriteFile(data_, absl::StrFormat("%03d.csv", f), 1000, 300 + f);
    }
    done = true;
  });
  absl::StatusOr<TrainResult> result;
  std::atomic<bool> finished{false};
  std::thread job([&] {
    result = Run("serve", done, [](TrainerOptions* t) {
      t->checkpoint_every_steps = 15;
      t->checkpoint_incremental = true;
      t->full_checkpoint_every = 11;  // chains past 8 layers (merged), and a full one later
      t->keep_checkpoints = 1000;
    });
    finished = true;
  });
  // The first checkpoint, exported as version 1.
  absl::StatusOr<CheckpointEntry> first = absl::NotFoundError("none yet");
  for (const absl::Time deadline = absl::Now() + absl::Seconds(120);
       !first.ok() && absl::Now() < deadline;) {
    absl::SleepFor(absl::Milliseconds(5));
    first = LatestCheckpoint(ckpt);
  }
  ASSERT_TRUE(first.ok()) << first.status();
  ExportOptions e;
  e.checkpoint = first->path;
  e.out = root_ + "/models/online/1";
  absl::StatusOr<ExportResult> exported = ExportModel(e);
  ASSERT_TRUE(exported.ok()) << exported.status();
  ModelVersionsOptions v;
  v.base = root_ + "/models/online";
  v.poll_period = absl::ZeroDuration();  // polled below
  v.follow_checkpoints = ckpt;
  absl::StatusOr<std::unique_ptr<ModelVersions>> versions = ModelVersions::Start(v);
  ASSERT_TRUE(versions.ok()) << versions.status();
  RawExamples probe;
  probe.columns = {"city", "income"};
  for (int c = 0; c < 6; ++c) probe.rows.push_back({absl::StrCat("c", c), absl::StrCat(c * 150)});
  auto predict = [&]() {
    std::vector<float> out;
    EXPECT_TRUE((*versions)->Current()->Predict(probe, &out).ok());
    return out;
  };
  const std::vector<float> at_export = predict();
  std::set<int64_t> steps_served;
  while (!finished.load()) {
    (*versions)->CheckNow();
    steps_served.insert((*versions)->Following().step);
    absl::SleepFor(absl::Milliseconds(50));
  }
  job.join();
  writer.join();
  ASSERT_TRUE(result.ok()) << result.status();
  (*versions)->CheckNow();
  const FollowStats followed = (*versions)->Following();
  absl::StatusOr<CheckpointEntry> last = LatestCheckpoint(ckpt);
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(followed.step, last->step);
  EXPECT_EQ(followed.step, result->end_step);
  EXPECT_EQ(followed.checkpoints_skipped, 0) << followed.last_error;
  EXPECT_GE(steps_served.size(), 3u) << "the version served moved with training";
  EXPECT_EQ((*versions)->Current()->version(), 1);
  const std::vector<float> synced = predict();
  EXPECT_NE(synced, at_export);
  // As the final checkpoint exported afresh predicts.
  e.checkpoint = last->path;
  e.out = root_ + "/models/final/1";
  ASSERT_TRUE(ExportModel(e).ok());
  absl::StatusOr<std::unique_ptr<Predictor>> final_model = Predictor::Load(e.out);
  ASSERT_TRUE(final_model.ok()) << final_model.status();
  std::vector<float> expected;
  ASSERT_TRUE((*final_model)->Predict(probe, &expected).ok());
  ASSERT_EQ(synced.size(), expected.size());
  for (size_t i = 0; i < synced.size(); ++i) EXPECT_NEAR(synced[i], expected[i], 1e-6) << i;

  // A corrupt checkpoint after the last: skipped, DATA_LOSS logged, the version served as it was.
  const std::string corrupt = CheckpointPath(ckpt, last->step + 1000);
  std::filesystem::create_directories(corrupt);
  std::ofstream(corrupt + "/" + kManifestFileName) << "PSCKPT01 not a manifest";
  (*versions)->CheckNow();
  (*versions)->CheckNow();  // (read once, not at every poll)
  EXPECT_EQ((*versions)->Following().step, last->step);
  EXPECT_EQ((*versions)->Following().checkpoints_skipped, 1);
  EXPECT_THAT((*versions)->Following().last_error, HasSubstr("DATA_LOSS"));
  EXPECT_EQ(predict(), synced);
  // The update source gone: still serving.
  std::filesystem::remove_all(ckpt);
  EXPECT_EQ((*versions)->CheckNow(), 1);
  EXPECT_EQ(predict(), synced);
}

// The coordinator binary following a directory is killed (-9) mid-stream; run again, it goes on
// from its last checkpoint: no row is skipped, and the rows trained twice are those trained after
// that checkpoint (their updates had reached the ps tasks), not those it holds.
TEST_F(OnlineTrainingTest, CoordinatorKilled_RerunGoesOnFromItsCheckpoint_NothingSkipped) {
  WriteFile(data_, "000.csv", 1500, 1);
  for (int f = 1; f <= 6; ++f) WriteFile(data_, absl::StrFormat("%03d.csv", f), 1000, 200 + f);
  const std::string ckpt = root_ + "/ckpt_binary";
  const std::vector<std::string> argv = {
      RunfilePath("trainer/coordinator"),
      "--model=tabular",
      "--feature_spec=" + spec_,
      "--data=" + data_,
      "--follow",
      "--batch_size=32",
      "--checkpoint_dir=" + ckpt,
      "--checkpoint_every_steps=40",
      "--logdir=",
      "--model_opt=row_log=" + root_ + "/bin,follow_poll_seconds=0.05,hold_rows=128"};
  int64_t saved_step = 0;
  {
    auto first = Subprocess::Start("first", argv, {}, root_);
    ASSERT_TRUE(first.ok()) << first.status();
    const absl::Time deadline = absl::Now() + absl::Seconds(120);
    while (absl::Now() < deadline) {
      absl::StatusOr<CheckpointEntry> latest = LatestCheckpoint(ckpt);
      // A few batches past a checkpoint: their rows will be trained again.
      if (latest.ok() && latest->step >= 80 &&
          Total(LoggedRows(root_, "bin")) >= latest->step * kBatch + 300) {
        break;
      }
      absl::SleepFor(absl::Milliseconds(2));
    }
    (*first)->Signal(SIGKILL);
    ASSERT_EQ(*(*first)->Wait(absl::Seconds(30)), 128 + SIGKILL) << (*first)->Stderr();
    absl::StatusOr<CheckpointEntry> latest = LatestCheckpoint(ckpt);
    ASSERT_TRUE(latest.ok()) << latest.status();
    saved_step = latest->step;
  }
  const int64_t first_rows = Total(LoggedRows(root_, "bin"));
  auto second = Subprocess::Start("second", argv, {}, root_);
  ASSERT_TRUE(second.ok()) << second.status();
  // Once nothing more is trained for a second, stop it as Kubernetes would.
  int64_t last = -1;
  absl::Time last_change = absl::Now();
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  while (absl::Now() < deadline) {
    const int64_t total = Total(LoggedRows(root_, "bin"));
    if (total != last) {
      last = total;
      last_change = absl::Now();
    } else if (total > first_rows && absl::Now() - last_change > absl::Seconds(1)) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  (*second)->Signal(SIGTERM);
  ASSERT_EQ(*(*second)->Wait(absl::Seconds(60)), 128 + SIGTERM) << (*second)->Stderr();
  EXPECT_THAT((*second)->Stderr(),
              HasSubstr("resuming tabular at step " + std::to_string(saved_step)));
  const nlohmann::json summary = nlohmann::json::parse((*second)->SummaryLine());
  const int64_t first_file_train = std::stoll(summary["train_rows"].get<std::string>());
  const int64_t expected = first_file_train + 6 * 1000;
  const std::map<int64_t, int> rows = LoggedRows(root_, "bin");
  int64_t twice = 0;
  for (const auto& [id, times] : rows) {
    ASSERT_LE(times, 2) << id;
    twice += times - 1;
  }
  // Nothing skipped (but the tail of less than a batch, waiting for more data).
  EXPECT_GT(static_cast<int64_t>(rows.size()), expected - kBatch);
  EXPECT_LE(static_cast<int64_t>(rows.size()), expected);
  std::printf("killed after the checkpoint at step %lld: %lld rows trained before, %lld twice\n",
              static_cast<long long>(saved_step), static_cast<long long>(first_rows),
              static_cast<long long>(twice));
  EXPECT_GT(twice, 0);  // the batches after the checkpoint
  // The checkpoint's rows (its steps' batches) were not trained again.
  EXPECT_LE(twice, first_rows - saved_step * kBatch * 9 / 10) << "saved at step " << saved_step;
}

TEST_F(OnlineTrainingTest, BadFollowOptions_ClearErrors) {
  std::atomic<bool> done{true};
  // No file yet: the first one sets the statistics.
  EXPECT_THAT(Run("x", done).status().message(), HasSubstr("has no data file yet"));
  WriteFile(data_, "000.csv", 200, 1);
  ModelOptions o;
  o.data = data_ + "/000.csv";
  o.extra = {{"feature_spec", spec_}, {"follow", "true"}};
  absl::StatusOr<std::unique_ptr<Model>> model = CreateTabular(o);
  ASSERT_TRUE(model.ok());
  absl::StatusOr<TrainResult> r = TrainInProcess(
      *TrainingRegistry(std::make_shared<ReplicaGroups>()), 1, 1, model->get(), TrainerOptions());
  EXPECT_THAT(r.status().message(), HasSubstr("is not a directory"));
  o.extra["follow"] = "yes";
  EXPECT_THAT(CreateTabular(o).status().message(), HasSubstr("follow=yes is not true or false"));
}

}  // namespace
}  // namespace pstrain
