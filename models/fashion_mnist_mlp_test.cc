#include "models/fashion_mnist_mlp.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/test_util.h"
#include "models/model_test_util.h"

namespace pstrain {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(FashionMnistMlpOptionsTest, Defaults_Ok) {
  auto model = CreateFashionMnistMlp(ModelOptions{});
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->name(), "fashion_mnist_mlp");
  EXPECT_EQ((*model)->examples_per_step(), 128);
}

TEST(FashionMnistMlpOptionsTest, UnknownOption_InvalidArgumentNamingIt) {
  EXPECT_THAT(CreateFashionMnistMlp(WithExtra({{"hiden", "64"}})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("fashion_mnist_mlp"), HasSubstr("hiden"))));
}

TEST(FashionMnistMlpOptionsTest, UnknownOptimizer_InvalidArgumentListingChoices) {
  EXPECT_THAT(CreateFashionMnistMlp(WithExtra({{"optimizer", "rmsprop"}})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("optimizer=rmsprop"), HasSubstr("adam, adagrad"))));
}

TEST(FashionMnistMlpOptionsTest, BadHidden_InvalidArgumentNamingThePart) {
  EXPECT_THAT(CreateFashionMnistMlp(WithExtra({{"hidden", "256,x"}})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("hidden=256,x"), HasSubstr("\"x\""))));
  EXPECT_THAT(CreateFashionMnistMlp(WithExtra({{"hidden", "256,0"}})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"0\"")));
  EXPECT_THAT(CreateFashionMnistMlp(WithExtra({{"hidden", "256,,128"}})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"\"")));
}

TEST(FashionMnistMlpOptionsTest, BadNumbers_InvalidArgument) {
  EXPECT_THAT(CreateFashionMnistMlp(WithExtra({{"shards", "two"}})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("shards=two")));
  EXPECT_THAT(CreateFashionMnistMlp(WithExtra({{"shards", "-1"}})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("shards=-1 must be >= 0")));
  EXPECT_THAT(CreateFashionMnistMlp(WithExtra({{"train_eval_examples", "-5"}})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("train_eval_examples=-5 must be >= 0")));
  EXPECT_THAT(CreateFashionMnistMlp(WithExtra({{"average_epochs", "-0.5"}})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("average_epochs=-0.5 must be >= 0")));
  EXPECT_THAT(CreateFashionMnistMlp(WithExtra({{"average_epochs", "last"}})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("average_epochs=last")));
  ModelOptions negative_turns;
  negative_turns.dense_turns = -1;
  EXPECT_THAT(CreateFashionMnistMlp(negative_turns),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dense_turns=-1 must be >= 0")));
  EXPECT_THAT(CreateFashionMnistMlp(WithExtra({{"steps_per_worker", "2"}})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("steps_per_worker")));
}

TEST(FashionMnistMlpOptionsTest, KnownOptions_Ok) {
  for (const char* optimizer : {"adam", "adagrad", "momentum", "sgd"}) {
    EXPECT_TRUE(CreateFashionMnistMlp(WithExtra({{"optimizer", optimizer},
                                                 {"hidden", "32"},
                                                 {"shards", "3"},
                                                 {"train_eval_examples", "0"},
                                                 {"average_epochs", "0.5"}}))
                    .ok())
        << optimizer;
  }
}

}  // namespace
}  // namespace pstrain
