// The coordinator side fashion_mnist_mlp and fashion_mnist_cnn share: the options both read, with
// a model's own defaults and optimizers. (Setup, training and evaluation against a cluster:
// fashion_mnist_cnn_test and tests/fashion_mnist_mlp_training_test.)
#include "models/fashion_mnist.h"

#include <map>
#include <string>

#include "common/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/batches.h"
#include "models/model_test_util.h"

namespace pstrain {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

FashionMnistModelDef ToyDef() {
  FashionMnistModelDef def;
  def.name = "toy";
  def.names = {"toy/train", "toy/eval", "toy/data", "toy/", "toy/avg/", "toy/avg/count"};
  def.network_note = "net";
  def.epochs = 7;
  def.batch_size = 9;
  def.optimizers = {{"plain", OptimizerDef::SGD, 0.5}, {"fancy", OptimizerDef::ADAM, 0.01}};
  return def;
}

absl::StatusOr<FashionMnistConfig> Read(const ModelOptions& options) {
  ExtraOptions extra("toy", options.extra);
  return ReadFashionMnistConfig(ToyDef(), options, &extra);
}

TEST(FashionMnistConfigTest, Defaults_TheModelsAndTheFirstOptimizers) {
  absl::StatusOr<FashionMnistConfig> c = Read(ModelOptions{});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->data_dir, "data/fashion_mnist");
  EXPECT_EQ(c->epochs, 7);
  EXPECT_EQ(c->batch_size, 9);
  EXPECT_EQ(c->optimizer, OptimizerDef::SGD);
  EXPECT_EQ(c->learning_rate, 0.5);
  EXPECT_EQ(c->shards, 0);
  EXPECT_EQ(c->train_eval_examples, 10000);
  EXPECT_EQ(c->dense_turns, 1);
  EXPECT_EQ(c->average_epochs, 3);
  // Rounded to float, as the workers get it.
  EXPECT_EQ(c->validation_fraction, static_cast<double>(0.1f));
  EXPECT_TRUE(c->validation_dir.empty());
  EXPECT_TRUE(CheckFashionMnistConfig(ToyDef(), *c).ok());
}

TEST(FashionMnistConfigTest, Options_OverrideTheDefaults) {
  ModelOptions options = WithExtra({{"optimizer", "fancy"},
                                    {"shards", "3"},
                                    {"train_eval_examples", "0"},
                                    {"average_epochs", "0.5"}});
  options.data = "elsewhere";
  options.dense_turns = 0;
  options.epochs = 2;
  options.batch_size = 4;
  options.validation_data = "validation";
  absl::StatusOr<FashionMnistConfig> c = Read(options);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->data_dir, "elsewhere");
  EXPECT_EQ(c->epochs, 2);
  EXPECT_EQ(c->batch_size, 4);
  EXPECT_EQ(c->optimizer, OptimizerDef::ADAM);
  EXPECT_EQ(c->learning_rate, 0.01);  // the optimizer's default
  EXPECT_EQ(c->shards, 3);
  EXPECT_EQ(c->train_eval_examples, 0);
  EXPECT_EQ(c->dense_turns, 0);
  EXPECT_EQ(c->average_epochs, 0.5);
  EXPECT_EQ(c->validation_dir, "validation");
  options.learning_rate = 0.2;
  EXPECT_EQ(Read(options)->learning_rate, 0.2);
}

TEST(FashionMnistConfigTest, UnknownOptimizer_InvalidArgumentListingTheModelsInOrder) {
  EXPECT_THAT(Read(WithExtra({{"optimizer", "rmsprop"}})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("toy: optimizer=rmsprop is not one of plain, fancy")));
}

TEST(FashionMnistConfigTest, UnknownOption_InvalidArgumentNamingIt) {
  EXPECT_THAT(
      Read(WithExtra({{"shard", "2"}})),
      StatusIs(absl::StatusCode::kInvalidArgument, AllOf(HasSubstr("toy"), HasSubstr("shard"))));
}

TEST(FashionMnistConfigTest, ValidationFractionOutsideTheRange_InvalidArgument) {
  ModelOptions options;
  options.validation_fraction = 1;
  EXPECT_THAT(Read(options), StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr("toy: validation_fraction 1 is outside [0, 1)")));
}

TEST(FashionMnistConfigTest, Check_NegativeNumbers_InvalidArgumentNamingThem) {
  for (const char* option : {"shards", "train_eval_examples"}) {
    absl::StatusOr<FashionMnistConfig> c = Read(WithExtra({{option, "-2"}}));
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_THAT(CheckFashionMnistConfig(ToyDef(), *c),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr(absl::StrCat("toy: ", option, "=-2 must be >= 0"))));
  }
  absl::StatusOr<FashionMnistConfig> c = Read(WithExtra({{"average_epochs", "-0.5"}}));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(CheckFashionMnistConfig(ToyDef(), *c),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("toy: average_epochs=-0.5 must be >= 0")));
}

TEST(FashionMnistModelTest, BeforeSetup_NameAndBatchFromTheConfig) {
  absl::StatusOr<FashionMnistConfig> c = Read(ModelOptions{});
  ASSERT_TRUE(c.ok()) << c.status();
  std::unique_ptr<Model> model = NewFashionMnistModel(ToyDef(), *c, [](int64_t, int64_t, int64_t) {
    return absl::StatusOr<std::unique_ptr<FashionNetLayout>>(absl::UnimplementedError("not built"));
  });
  EXPECT_EQ(model->name(), "toy");
  EXPECT_EQ(model->examples_per_step(), 9);
  EXPECT_EQ(model->validation_metric(), "val_accuracy");
}

}  // namespace
}  // namespace pstrain
