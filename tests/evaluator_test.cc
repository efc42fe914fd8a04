// The evaluator (trainer/evaluator.h) beside a running in-process job: it evaluates checkpoints as
// they appear, skips those it fell behind on (saying which), writes its scalars under
// <logdir>/eval at each checkpoint's step, stops after the job's final checkpoint, and its metrics
// for that checkpoint equal the trainer's own evaluation.
#include "trainer/evaluator.h"

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "common/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/registry.h"
#include "tests/toy_fashion_data.h"
#include "tests/train_in_process.h"
#include "trainer/event_writer.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

class EvaluatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = FreshTempDir("evaluator");
    WriteToySplit(dir_, "train", 400, /*seed=*/11);
    WriteToySplit(dir_, "t10k", 100, /*seed=*/12);
  }

  ModelOptions Model() const {
    ModelOptions o;
    o.data = dir_;
    o.batch_size = 20;
    o.epochs = 3;  // 60 steps
    o.learning_rate = 0.05;
    o.validation_fraction = 0.2;
    o.extra = {{"hidden", "8"}, {"average_epochs", "0"}};
    return o;
  }

  std::string dir_;
  std::ostream null_{nullptr};
};

TEST_F(EvaluatorTest, BesideARunningJob_SkipsWhenBehind_StopsAfterFinal_MatchesTrainer) {
  const std::string ckpt = dir_ + "/ckpt";
  absl::Notification trained, first_evaluated;
  absl::StatusOr<TrainResult> result;
  std::thread job([&] {
    auto model = CreateModel("fashion_mnist_mlp", Model());
    ASSERT_TRUE(model.ok()) << model.status();
    TrainerOptions t;
    t.checkpoint_dir = ckpt;
    t.checkpoint_every_steps = 10;
    t.keep_checkpoints = 10;
    t.keep_best = false;  // the trainer's test evaluation: the final weights
    t.restore = "none";
    t.progress.out = &null_;
    // Past the checkpoint of step 10, the job waits for the evaluator's first evaluation.
    t.after_step = [&](int64_t step) {
      if (step == 12) first_evaluated.WaitForNotificationWithTimeout(absl::Seconds(60));
      return absl::OkStatus();
    };
    result = TrainInProcess(*TrainingRegistry(std::make_shared<ReplicaGroups>()), /*workers=*/2,
                            /*ps=*/1, model->get(), t);
    trained.Notify();
  });
  EvaluatorOptions options;
  options.checkpoint_dir = ckpt;
  options.logdir = dir_ + "/logs";
  options.poll = absl::Milliseconds(20);
  int calls = 0;
  // The first evaluation holds the evaluator back until the job is done: it falls behind.
  options.on_evaluated = [&](const Evaluation&) {
    if (++calls > 1) return;
    first_evaluated.Notify();
    trained.WaitForNotification();
  };
  auto evaluations = RunEvaluator("fashion_mnist_mlp", Model(), options);
  job.join();
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_TRUE(evaluations.ok()) << evaluations.status();
  ASSERT_GE(evaluations->size(), 2u);
  const Evaluation& first = evaluations->front();
  const Evaluation& last = evaluations->back();
  EXPECT_FALSE(first.final);
  EXPECT_TRUE(last.final);
  EXPECT_EQ(last.step, result->end_step);
  EXPECT_THAT(last.skipped, Not(IsEmpty()));  // the checkpoints saved while it waited
  for (const char* metric : {"test_accuracy", "test_loss"}) {
    EXPECT_NEAR(last.metrics.values.at(metric), result->metrics.values.at(metric), 1e-9) << metric;
  }
  EXPECT_EQ(last.metrics.values.count("val_accuracy"), 1u);

  // The scalars: under <logdir>/eval, at each evaluated checkpoint's step.
  std::set<int64_t> steps;
  for (const auto& entry : std::filesystem::directory_iterator(dir_ + "/logs/eval")) {
    auto events = ReadEventFile(entry.path().string());
    ASSERT_TRUE(events.ok()) << events.status();
    for (const tensorflow::Event& e : *events) {
      if (e.has_summary() && e.summary().value(0).tag() == "test_accuracy") steps.insert(e.step());
    }
  }
  std::set<int64_t> expected;
  for (const Evaluation& e : *evaluations) expected.insert(e.step);
  EXPECT_EQ(steps, expected);
}

TEST_F(EvaluatorTest, MaxEvaluationsAndIdleTimeout) {
  EvaluatorOptions options;
  options.checkpoint_dir = dir_ + "/never_written";
  options.poll = absl::Milliseconds(10);
  options.idle_timeout = absl::Milliseconds(200);
  EXPECT_THAT(RunEvaluator("fashion_mnist_mlp", Model(), options).status(),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("no new checkpoint")));
  options.checkpoint_dir = "";
  EXPECT_THAT(RunEvaluator("fashion_mnist_mlp", Model(), options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("checkpoint directory")));
  // A stop request ends the wait at once.
  options.checkpoint_dir = dir_ + "/never_written";
  options.idle_timeout = absl::InfiniteDuration();
  absl::Notification stop;
  stop.Notify();
  auto none = RunEvaluator("fashion_mnist_mlp", Model(), options, &stop);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_THAT(*none, IsEmpty());
}

}  // namespace
}  // namespace pstrain
