// fashion_mnist_cnn: its options, and a few seconds of real training on a toy set in the
// Fashion-MNIST file layout, driven step by step through a ClusterCoordinator on an in-process
// cluster (real ps and worker servers), as the trainer drives a model.
#include "models/fashion_mnist_cnn.h"

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/test_util.h"
#include "coordinator/cluster_coordinator.h"
#include "coordinator/in_process_cluster.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/data/idx_test_util.h"
#include "models/data/image_splits.h"
#include "models/fashion_mnist_cnn_worker.h"
#include "worker/closure_registry.h"
#include "models/model_test_util.h"

namespace pstrain {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// ---- Options -----------------------------------------------------------------------------------

TEST(FashionMnistCnnOptionsTest, Defaults_Ok) {
  auto model = CreateFashionMnistCnn(ModelOptions{});
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->name(), "fashion_mnist_cnn");
  EXPECT_EQ((*model)->examples_per_step(), 32);
}

TEST(FashionMnistCnnOptionsTest, UnknownOption_InvalidArgumentNamingIt) {
  EXPECT_THAT(CreateFashionMnistCnn(WithExtra({{"filter", "16"}})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("fashion_mnist_cnn"), HasSubstr("filter"))));
}

TEST(FashionMnistCnnOptionsTest, UnknownOptimizer_InvalidArgumentListingChoices) {
  EXPECT_THAT(CreateFashionMnistCnn(WithExtra({{"optimizer", "rmsprop"}})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("optimizer=rmsprop"), HasSubstr("sgd, momentum"))));
}

TEST(FashionMnistCnnOptionsTest, BadNumbers_InvalidArgumentNamingThem) {
  EXPECT_THAT(CreateFashionMnistCnn(WithExtra({{"filters", "0"}})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("filters=0 must be in")));
  EXPECT_THAT(CreateFashionMnistCnn(WithExtra({{"kernel", "three"}})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("kernel=three")));
  EXPECT_THAT(CreateFashionMnistCnn(WithExtra({{"pool", "-2"}})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("pool=-2")));
  EXPECT_THAT(CreateFashionMnistCnn(WithExtra({{"shards", "-1"}})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("shards=-1 must be >= 0")));
  EXPECT_THAT(CreateFashionMnistCnn(WithExtra({{"average_epochs", "-1"}})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("average_epochs=-1 must be >= 0")));
  ModelOptions options;
  options.validation_fraction = 1;
  EXPECT_THAT(CreateFashionMnistCnn(options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("validation_fraction")));
}

TEST(FashionMnistCnnOptionsTest, KnownOptions_Ok) {
  for (const char* optimizer : {"sgd", "momentum", "adam", "adagrad"}) {
    EXPECT_TRUE(CreateFashionMnistCnn(WithExtra({{"optimizer", optimizer},
                                                 {"filters", "8"},
                                                 {"kernel", "5"},
                                                 {"pool", "3"},
                                                 {"hidden", "16"},
                                                 {"shards", "3"},
                                                 {"train_eval_examples", "0"},
                                                 {"average_epochs", "0.5"}}))
                    .ok())
        << optimizer;
  }
}

// ---- Training on a toy set ---------------------------------------------------------------------

// 8x8 images of 3 classes that only a spatial filter tells apart: the same number of lit pixels,
// in a horizontal stroke (class 0), a vertical one (1) or a diagonal (2), anywhere in the image,
// over noise. Uncompressed IDX files under the gzip names (the reader takes either).
void WriteToySplit(const std::string& dir, bool train, int count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> pixels(count * 64), labels(count);
  for (int i = 0; i < count; ++i) {
    const int label = static_cast<int>(rng() % 3);
    labels[i] = static_cast<uint8_t>(label);
    uint8_t* image = pixels.data() + i * 64;
    for (int p = 0; p < 64; ++p) image[p] = static_cast<uint8_t>(rng() % 60);
    const int y = static_cast<int>(rng() % 5), x = static_cast<int>(rng() % 5);
    for (int k = 0; k < 4; ++k) {
      const int py = label == 0 ? y : y + k, px = label == 1 ? x : x + k;
      image[py * 8 + px] = static_cast<uint8_t>(200 + rng() % 56);
    }
  }
  data::WriteIdx(data::DataFile(dir, train ? data::kTrainImagesFile : data::kTestImagesFile),
                 0x803, {static_cast<uint32_t>(count), 8, 8}, pixels);
  data::WriteIdx(data::DataFile(dir, train ? data::kTrainLabelsFile : data::kTestLabelsFile),
                 0x801, {static_cast<uint32_t>(count)}, labels);
}

class FashionMnistCnnTrainTest : public ::testing::Test {
 protected:
  // An in-process cluster whose workers run this model's closures, and its coordinator.
  void StartCluster(int workers, int ps) {
    auto registry = std::make_shared<ClosureRegistry>();
    ASSERT_TRUE(RegisterFashionMnistCnn(registry.get(), std::make_shared<ReplicaGroups>()).ok());
    InProcessClusterOptions options;
    options.num_workers = workers;
    options.num_ps = ps;
    options.registry = registry;
    auto cluster = InProcessCluster::Start(options);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    auto coordinator = ClusterCoordinator::Create(cluster_->spec());
    ASSERT_TRUE(coordinator.ok()) << coordinator.status();
    coordinator_ = *std::move(coordinator);
  }

  // A toy data directory of `train` and `test` examples.
  static std::string ToyData(const std::string& name, int train, int test) {
    const std::string dir = FreshTempDir(name);
    WriteToySplit(dir, /*train=*/true, train, /*seed=*/1);
    WriteToySplit(dir, /*train=*/false, test, /*seed=*/2);
    return dir;
  }

  // Runs every step of `model` (set up already) and returns the steps' losses in step order.
  std::vector<float> TrainAll(Model* model) {
    std::vector<RemoteValue> values;
    for (int64_t step = 0; step < model->total_steps(); ++step) {
      auto value = model->ScheduleStep(coordinator_.get(), step);
      EXPECT_TRUE(value.ok()) << value.status();
      if (!value.ok()) return {};
      values.push_back(*std::move(value));
    }
    EXPECT_TRUE(coordinator_->Join().ok());
    std::vector<float> losses;
    for (const RemoteValue& v : values) {
      auto out = v.Fetch();
      EXPECT_TRUE(out.ok()) << out.status();
      if (!out.ok()) return {};
      losses.push_back((*out)[0].scalar<float>());
    }
    return losses;
  }

  // Destroyed in reverse: the coordinator before the tasks it talks to.
  std::unique_ptr<InProcessCluster> cluster_;
  std::unique_ptr<ClusterCoordinator> coordinator_;
};

// Two workers train asynchronously, the dense kernel split over two ps: the loss falls, the
// averaged weights classify the held-out and the test examples, and every metric and note is there.
TEST_F(FashionMnistCnnTrainTest, ToyStrokes_TwoWorkersTwoPs_Learns) {
  StartCluster(/*workers=*/2, /*ps=*/2);
  ModelOptions options;
  options.data = ToyData("strokes", /*train=*/600, /*test=*/150);
  options.epochs = 16;
  options.batch_size = 16;
  options.learning_rate = 0.1;
  options.validation_fraction = 0.2;
  options.devices.kind = DeviceOptions::Kind::kCpu;
  options.extra = {{"filters", "6"}, {"hidden", "12"}, {"average_epochs", "2"}};
  auto model = CreateFashionMnistCnn(options);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE((*model)->Setup(coordinator_.get()).ok());
  ASSERT_TRUE((*model)->has_validation());
  EXPECT_EQ((*model)->validation_metric(), "val_accuracy");
  const std::vector<float> losses = TrainAll(model->get());
  ASSERT_EQ(static_cast<int64_t>(losses.size()), (*model)->total_steps());
  const int64_t per_epoch = (*model)->steps_per_epoch();
  double first = 0, last = 0;
  for (int64_t s = 0; s < per_epoch; ++s) {
    first += losses[s];
    last += losses[losses.size() - 1 - s];
  }
  // Asynchronous: over runs the last epoch's mean loss lands at 0.2-0.45 of the first's.
  EXPECT_LT(last, 0.5 * first) << "first epoch's mean loss " << first / per_epoch
                               << ", last's " << last / per_epoch;

  auto validation = (*model)->Validate(coordinator_.get());
  ASSERT_TRUE(validation.ok()) << validation.status();
  EXPECT_GT(validation->values["val_accuracy"], 0.9);
  auto metrics = (*model)->Evaluate(coordinator_.get());
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_GT(metrics->values["test_accuracy"], 0.9);
  EXPECT_GT(metrics->values["train_accuracy"], 0.9);
  EXPECT_GT(metrics->values["last_test_accuracy"], 0.85);
  EXPECT_GT(metrics->values["test_loss"], 0);
  EXPECT_EQ(metrics->notes["network"], "conv6x3x3-pool2-12-3 on 8x8x1");
  // 3x3x1x6 + 6, 3x3x6 flattened x 12 + 12, 12 x 3 + 3.
  EXPECT_EQ(metrics->notes["parameters"], absl::StrCat(54 + 6 + 54 * 12 + 12 + 36 + 3));
  EXPECT_EQ(metrics->notes["averaged_steps"], absl::StrCat(2 * per_epoch));
  const int64_t held_out = std::stoll(metrics->notes["validation_examples"]);
  EXPECT_NEAR(held_out, 120, 40);
  EXPECT_EQ(std::stoll(metrics->notes["train_examples"]), 600 - held_out);
}

// Without averaging only the trained weights are evaluated; a dense kernel in 3 shards over 2 ps,
// 2 steps at once per worker, and the batch split over 2 CPU replicas.
TEST_F(FashionMnistCnnTrainTest, ToyStrokes_NoAveragingShardsReplicas_Learns) {
  StartCluster(/*workers=*/1, /*ps=*/2);
  ModelOptions options;
  options.data = ToyData("strokes_replicas", /*train=*/400, /*test=*/100);
  options.epochs = 16;
  options.batch_size = 16;
  options.learning_rate = 0.1;
  options.validation_fraction = 0;
  options.devices.kind = DeviceOptions::Kind::kCpu;
  options.devices.replicas = 2;
  options.dense_turns = 2;
  options.extra = {{"filters", "6"}, {"hidden", "12"}, {"average_epochs", "0"},
                   {"shards", "3"},  {"train_eval_examples", "0"}};
  auto model = CreateFashionMnistCnn(options);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE((*model)->Setup(coordinator_.get()).ok());
  EXPECT_FALSE((*model)->has_validation());
  TrainAll(model->get());
  auto metrics = (*model)->Evaluate(coordinator_.get());
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_GT(metrics->values["test_accuracy"], 0.9);
  EXPECT_EQ(metrics->values.count("last_test_accuracy"), 0u);
  EXPECT_EQ(metrics->values.count("train_accuracy"), 0u);
  EXPECT_EQ(metrics->notes["averaged_steps"], "0");
}

TEST_F(FashionMnistCnnTrainTest, Setup_NoData_NotFoundNamingTheFile) {
  StartCluster(/*workers=*/1, /*ps=*/1);
  ModelOptions options;
  options.data = FreshTempDir("no_data");
  auto model = CreateFashionMnistCnn(options);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_THAT((*model)->Setup(coordinator_.get()),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr(data::kTrainLabelsFile)));
}

TEST_F(FashionMnistCnnTrainTest, Setup_KernelLargerThanImages_InvalidArgument) {
  StartCluster(/*workers=*/1, /*ps=*/1);
  ModelOptions options;
  options.data = ToyData("small_images", /*train=*/20, /*test=*/10);
  options.extra = {{"kernel", "9"}};
  auto model = CreateFashionMnistCnn(options);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_THAT((*model)->Setup(coordinator_.get()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("kernel 9"), HasSubstr("8x8"))));
}

}  // namespace
}  // namespace pstrain
