#include "models/dense_mlp.h"

#include <cmath>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/test_util.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

std::vector<float> Uniform(int64_t n, float limit, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-limit, limit);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

class DenseMlpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto device = CreateCpuDevice();
    ASSERT_TRUE(device.ok()) << device.status();
    device_ = *std::move(device);
  }
  std::unique_ptr<Device> device_;
};

TEST_F(DenseMlpTest, Create_Layout_WeightsThenBiasPerLayer) {
  auto mlp = DenseMlp::Create({/*inputs=*/784, 256, 128, /*classes=*/10});
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  EXPECT_EQ(mlp->num_layers(), 3);
  EXPECT_EQ(mlp->num_params(), 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
  EXPECT_EQ(mlp->weight_offset(0), 0);
  EXPECT_EQ(mlp->bias_offset(0), 784 * 256);
  EXPECT_EQ(mlp->weight_offset(1), 784 * 256 + 256);
  EXPECT_EQ(mlp->bias_offset(2), mlp->num_params() - 10);
  EXPECT_EQ(mlp->ToString(), "784-256-128-10");
}

TEST_F(DenseMlpTest, Create_BadWidths_InvalidArgument) {
  EXPECT_THAT(DenseMlp::Create({10}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at least 2 widths")));
  EXPECT_THAT(DenseMlp::Create({10, 0, 3}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("width 1 is 0")));
}

// The analytic gradient against central finite differences of the loss, for every parameter of a
// tiny network (two hidden layers, so the ReLU backward and the middle layer are both covered).
TEST_F(DenseMlpTest, ForwardBackward_TinyBatch_MatchesFiniteDifferences) {
  auto mlp = DenseMlp::Create({/*inputs=*/6, 5, 4, /*classes=*/3});
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  const int64_t batch = 4;
  std::vector<float> params = Uniform(mlp->num_params(), /*limit=*/0.8f, /*seed=*/1);
  const std::vector<float> x = Uniform(batch * mlp->inputs(), /*limit=*/1.0f, /*seed=*/2);
  const std::vector<int32_t> labels = {0, 2, 1, 2};
  std::vector<float> grads(mlp->num_params());
  auto loss = mlp->ForwardBackward(device_.get(), params.data(), batch, x.data(), labels.data(),
                                   grads.data());
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_GT(*loss, 0);

  auto loss_at = [&](const std::vector<float>& p) {
    auto sums = mlp->Evaluate(device_.get(), p.data(), batch, x.data(), labels.data());
    EXPECT_TRUE(sums.ok()) << sums.status();
    return sums->loss_sum / batch;
  };
  EXPECT_NEAR(loss_at(params), *loss, 1e-6);
  const float eps = 1e-3f;
  int nonzero = 0;
  for (int64_t i = 0; i < mlp->num_params(); ++i) {
    std::vector<float> p = params;
    p[i] = params[i] + eps;
    const double up = loss_at(p);
    p[i] = params[i] - eps;
    const double down = loss_at(p);
    const double numeric = (up - down) / (2.0 * eps);
    EXPECT_NEAR(grads[i], numeric, 2e-3 + 1e-2 * std::fabs(numeric)) << "parameter " << i;
    if (std::fabs(grads[i]) > 1e-4) ++nonzero;
  }
  // The check means something only if most gradients are not zero (dead ReLUs).
  EXPECT_GT(nonzero, mlp->num_params() / 2);
}

TEST_F(DenseMlpTest, Evaluate_CountsArgmaxMatches) {
  // One layer, identity weights, zero bias: the logits are the inputs.
  auto mlp = DenseMlp::Create({/*inputs=*/3, /*classes=*/3});
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  std::vector<float> params = {1, 0, 0, 0, 1, 0, 0, 0, 1, /*bias=*/0, 0, 0};
  const std::vector<float> x = {5, 1, 0, /**/ 0, 0, 2, /**/ 1, 3, 0};
  const std::vector<int32_t> labels = {0, 1, 1};  // right, wrong, right
  auto sums = mlp->Evaluate(device_.get(), params.data(), /*batch=*/3, x.data(), labels.data());
  ASSERT_TRUE(sums.ok()) << sums.status();
  EXPECT_EQ(sums->correct, 2);
  const double expected = -std::log(std::exp(5.0) / (std::exp(5.0) + std::exp(1.0) + 1)) -
                          std::log(1 / (2 + std::exp(2.0))) -
                          std::log(std::exp(3.0) / (std::exp(1.0) + std::exp(3.0) + 1));
  EXPECT_NEAR(sums->loss_sum, expected, 1e-4);
}

TEST_F(DenseMlpTest, ForwardBackward_LabelOutOfRange_InvalidArgument) {
  auto mlp = DenseMlp::Create({/*inputs=*/2, /*classes=*/3});
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  std::vector<float> params(mlp->num_params()), grads(mlp->num_params()), x(2);
  const std::vector<int32_t> labels = {3};
  EXPECT_THAT(mlp->ForwardBackward(device_.get(), params.data(), /*batch=*/1, x.data(),
                                   labels.data(), grads.data()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("label")));
  EXPECT_THAT(mlp->ForwardBackward(device_.get(), params.data(), /*batch=*/0, x.data(),
                                   labels.data(), grads.data()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("batch 0")));
}

// A CPU replica group of `replicas`.
std::unique_ptr<ReplicaGroup> CpuReplicas(int replicas) {
  ReplicaGroupOptions options;
  options.kind = DeviceOptions::Kind::kCpu;
  options.num_replicas = replicas;
  auto group = ReplicaGroup::Create(options);
  EXPECT_TRUE(group.ok()) << group.status();
  return *std::move(group);
}

// Splitting the batch over replicas and all-reducing their weighted gradients gives the one-device
// gradient and loss, also when the batch does not divide evenly and when a replica gets nothing.
TEST_F(DenseMlpTest, ForwardBackward_Replicas_MatchOneDevice) {
  auto mlp = DenseMlp::Create({/*inputs=*/7, 6, 5, /*classes=*/4});
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  const std::vector<float> params = Uniform(mlp->num_params(), /*limit=*/0.8f, /*seed=*/3);
  for (const int64_t batch : {1, 2, 10, 11}) {
    const std::vector<float> x = Uniform(batch * mlp->inputs(), /*limit=*/1.0f, /*seed=*/4);
    std::vector<int32_t> labels(batch);
    for (int64_t i = 0; i < batch; ++i) labels[i] = static_cast<int32_t>((i * 7) % 4);
    std::vector<float> expected(mlp->num_params());
    auto expected_loss = mlp->ForwardBackward(device_.get(), params.data(), batch, x.data(),
                                              labels.data(), expected.data());
    ASSERT_TRUE(expected_loss.ok()) << expected_loss.status();
    auto expected_sums =
        mlp->Evaluate(device_.get(), params.data(), batch, x.data(), labels.data());
    ASSERT_TRUE(expected_sums.ok()) << expected_sums.status();
    for (const int replicas : {1, 2, 3}) {
      SCOPED_TRACE(testing::Message() << "batch " << batch << ", " << replicas << " replicas");
      std::unique_ptr<ReplicaGroup> group = CpuReplicas(replicas);
      std::vector<float> grads(mlp->num_params(), std::nanf(""));
      auto loss = mlp->ForwardBackward(group.get(), params.data(), batch, x.data(),
                                       labels.data(), grads.data());
      ASSERT_TRUE(loss.ok()) << loss.status();
      EXPECT_NEAR(*loss, *expected_loss, 1e-5);
      for (int64_t i = 0; i < mlp->num_params(); ++i) {
        ASSERT_NEAR(grads[i], expected[i], 1e-5 + 1e-4 * std::fabs(expected[i])) << i;
      }
      auto sums = mlp->Evaluate(group.get(), params.data(), batch, x.data(), labels.data());
      ASSERT_TRUE(sums.ok()) << sums.status();
      EXPECT_EQ(sums->correct, expected_sums->correct);
      EXPECT_NEAR(sums->loss_sum, expected_sums->loss_sum, 1e-4);
    }
  }
}

TEST_F(DenseMlpTest, ForwardBackward_Replicas_BadLabelInAnyReplica_InvalidArgument) {
  auto mlp = DenseMlp::Create({/*inputs=*/2, /*classes=*/3});
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  std::unique_ptr<ReplicaGroup> group = CpuReplicas(2);
  std::vector<float> params(mlp->num_params()), grads(mlp->num_params()), x(2 * 4);
  const std::vector<int32_t> labels = {0, 1, 2, 5};  // the last is replica 1's
  EXPECT_THAT(mlp->ForwardBackward(group.get(), params.data(), /*batch=*/4, x.data(),
                                   labels.data(), grads.data()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("label")));
  EXPECT_THAT(mlp->ForwardBackward(group.get(), params.data(), /*batch=*/0, x.data(),
                                   labels.data(), grads.data()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("batch 0")));
}

}  // namespace
}  // namespace pstrain
