// fashion_mnist_mlp trained by the trainer on a real in-process cluster, on a toy set in the
// Fashion-MNIST file layout: it learns, reports every metric, runs on CPU replicas, and fails
// clearly on missing data or a missing GPU.
#include <cstdlib>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/devices.h"
#include "models/fashion_mnist_mlp.h"
#include "models/fashion_mnist_mlp_worker.h"
#include "tests/toy_fashion_data.h"
#include "tests/train_in_process.h"

namespace pstrain {
namespace {

using ::testing::Gt;
using ::testing::HasSubstr;
using ::testing::Key;
using ::testing::Pair;
using ::testing::Contains;

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

std::shared_ptr<const ClosureRegistry> Registry() {
  auto registry = std::make_shared<ClosureRegistry>();
  EXPECT_TRUE(RegisterBuiltinClosures(registry.get()).ok());
  EXPECT_TRUE(RegisterFashionMnistMlp(registry.get(), std::make_shared<ReplicaGroups>()).ok());
  return registry;
}

// Options for a run on a fresh toy dataset: `train` and `test` examples written with seeds `seed`
// and `seed + 1`, batches of 20.
ModelOptions ToyDataOptions(int train, int test, uint32_t seed) {
  const std::string dir = TempDir();
  WriteToySplit(dir, "train", train, seed);
  WriteToySplit(dir, "t10k", test, seed + 1);
  ModelOptions options;
  options.data = dir;
  options.batch_size = 20;
  return options;
}

// The whole model on a real in-process cluster (2 workers, 2 ps, weights split over both): it
// learns the toy set and reports every metric.
TEST(FashionMnistMlpTrainTest, ToyData_TwoWorkersTwoPs_LearnsAndReportsMetrics) {
  ModelOptions options = ToyDataOptions(/*train=*/600, /*test=*/150, /*seed=*/1);
  options.epochs = 10;
  options.learning_rate = 0.01;
  options.validation_fraction = 0;  // every training example trains
  options.extra = {{"hidden", "8,6"}, {"train_eval_examples", "250"}};
  auto model = CreateFashionMnistMlp(options);
  ASSERT_TRUE(model.ok()) << model.status();
  auto result = TrainInProcess(Registry(), /*workers=*/2, /*ps=*/2, model->get());
  ASSERT_TRUE(result.ok()) << result.status();

  EXPECT_EQ(result->end_step, 10 * 30);
  EXPECT_EQ(result->examples, 10 * 600);
  EXPECT_GT(result->metrics.values["test_accuracy"], 0.9);
  EXPECT_GT(result->metrics.values["train_accuracy"], 0.9);
  EXPECT_THAT(result->metrics.values, Contains(Pair("test_loss", Gt(0))));
  EXPECT_THAT(result->metrics.values, Contains(Key("train_loss")));
  EXPECT_EQ(result->metrics.notes["layers"], "16-8-6-3");
  EXPECT_EQ(result->metrics.notes["train_eval_examples"], "250");
  // The default: the last 3 epochs' weights averaged, the final weights evaluated too.
  EXPECT_EQ(result->metrics.notes["averaged_steps"], "90");
  EXPECT_GT(result->metrics.values["last_test_accuracy"], 0.9);
}

// The default holds 10% of the training examples out for validation: validated at step 0 and
// every epoch (the averaged weights once averaging began), the rest train.
TEST(FashionMnistMlpTrainTest, ToyData_ValidationHeldOut_ValidatedEveryEpoch) {
  ModelOptions options = ToyDataOptions(/*train=*/600, /*test=*/150, /*seed=*/5);
  options.epochs = 4;
  options.learning_rate = 0.01;
  options.extra = {{"hidden", "8"}, {"average_epochs", "1"}};
  auto model = CreateFashionMnistMlp(options);
  ASSERT_TRUE(model.ok()) << model.status();
  auto result = TrainInProcess(Registry(), /*workers=*/2, /*ps=*/1, model->get());
  ASSERT_TRUE(result.ok()) << result.status();
  const int64_t validation = std::stoll(result->metrics.notes["validation_examples"]);
  EXPECT_NEAR(validation, 60, 20);
  const int64_t train = 600 - validation;
  EXPECT_EQ(result->end_step, 4 * ((train + 19) / 20));
  EXPECT_EQ(result->examples, 4 * train);
  EXPECT_EQ(result->validations, 5);
  EXPECT_EQ(result->monitor, "val_accuracy");
  EXPECT_GT(result->metrics.values["val_accuracy"], 0.85);
  EXPECT_GT(result->metrics.values["test_accuracy"], 0.85);
}

// Without averaging only the trained weights are evaluated; 2 steps at once per worker, weights
// in 3 shards over 2 ps tasks.
TEST(FashionMnistMlpTrainTest, ToyData_NoAveraging_OnlyTrainedWeightsMetrics) {
  ModelOptions options = ToyDataOptions(/*train=*/600, /*test=*/150, /*seed=*/3);
  options.epochs = 8;
  options.learning_rate = 0.01;
  options.extra = {{"hidden", "8"},
                   {"average_epochs", "0"},
                   {"shards", "3"}};
  options.dense_turns = 2;
  auto model = CreateFashionMnistMlp(options);
  ASSERT_TRUE(model.ok()) << model.status();
  auto result = TrainInProcess(Registry(), /*workers=*/1, /*ps=*/2, model->get());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_GT(result->metrics.values["test_accuracy"], 0.9);
  EXPECT_EQ(result->metrics.values.count("last_test_accuracy"), 0u);
  EXPECT_EQ(result->metrics.notes["averaged_steps"], "0");
}

// One worker splitting each batch over 4 CPU replicas (a batch of 20: 5 examples each), the
// gradients all-reduced: it learns as the unsplit run does.
TEST(FashionMnistMlpTrainTest, ToyData_FourReplicas_Learns) {
  ModelOptions options = ToyDataOptions(/*train=*/600, /*test=*/150, /*seed=*/1);
  options.epochs = 10;
  options.learning_rate = 0.01;
  options.devices.kind = DeviceOptions::Kind::kCpu;
  options.devices.replicas = 4;
  options.validation_fraction = 0;
  options.extra = {{"hidden", "8,6"}, {"train_eval_examples", "250"}};
  auto model = CreateFashionMnistMlp(options);
  ASSERT_TRUE(model.ok()) << model.status();
  auto result = TrainInProcess(Registry(), /*workers=*/1, /*ps=*/1, model->get());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->end_step, 10 * 30);
  EXPECT_GT(result->metrics.values["test_accuracy"], 0.9);
  EXPECT_GT(result->metrics.values["train_accuracy"], 0.9);
}

// --device=cuda on a machine without a GPU (this one, and CI) fails the job with a message that
// says so; on a GPU machine the same run trains.
TEST(FashionMnistMlpTrainTest, Cuda_WithoutGpuFailsClearly_WithGpuTrains) {
  ModelOptions options = ToyDataOptions(/*train=*/100, /*test=*/50, /*seed=*/1);
  options.epochs = 1;
  options.devices.kind = DeviceOptions::Kind::kCuda;
  options.extra = {{"hidden", "8"}, {"average_epochs", "0"}};
  auto model = CreateFashionMnistMlp(options);
  ASSERT_TRUE(model.ok()) << model.status();
  auto result = TrainInProcess(Registry(), /*workers=*/1, /*ps=*/1, model->get());
  DeviceOptions cuda;
  cuda.kind = DeviceOptions::Kind::kCuda;
  if (CreateDevice(cuda).ok()) {
    EXPECT_TRUE(result.ok()) << result.status();
  } else {
    EXPECT_THAT(result, StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("GPU")));
  }
}

TEST(FashionMnistMlpTrainTest, MissingData_SetupNotFoundNamingTheFile) {
  ModelOptions options;
  options.data = TempDir() + "/no_such_dir";
  auto model = CreateFashionMnistMlp(options);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_THAT(TrainInProcess(Registry(), /*workers=*/1, /*ps=*/1, model->get()),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no_such_dir/train-labels")));
}

}  // namespace
}  // namespace pstrain
