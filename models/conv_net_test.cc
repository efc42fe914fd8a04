#include "models/conv_net.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "common/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::vector<float> Uniform(int64_t n, float limit, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-limit, limit);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

// A tiny network: odd, non-square images with 2 channels, a pool that drops the last row, 4
// classes.
ConvNetShape TinyShape() {
  ConvNetShape s;
  s.height = 8;
  s.width = 7;
  s.channels = 2;
  s.filters = 3;
  s.kernel = 3;
  s.pool = 2;
  s.hidden = 5;
  s.classes = 4;
  return s;
}

// The network as Keras writes it, in double with direct loops: relu(conv + bias), then max
// pooling, flatten, dense + relu, dense, mean softmax cross-entropy.
double NaiveLoss(const ConvNet& net, const std::vector<float>& params, int64_t batch,
                 const std::vector<float>& x, const std::vector<int32_t>& labels) {
  const ConvNetShape& s = net.shape();
  const float* kernel = params.data() + net.param_offset(ConvNet::kKernel);
  const float* kbias = params.data() + net.param_offset(ConvNet::kKernelBias);
  const float* w1 = params.data() + net.param_offset(ConvNet::kW1);
  const float* b1 = params.data() + net.param_offset(ConvNet::kB1);
  const float* w2 = params.data() + net.param_offset(ConvNet::kW2);
  const float* b2 = params.data() + net.param_offset(ConvNet::kB2);
  const int64_t ch = s.height - s.kernel + 1, cw = s.width - s.kernel + 1;
  const int64_t ph = ch / s.pool, pw = cw / s.pool;
  double total = 0;
  for (int64_t n = 0; n < batch; ++n) {
    std::vector<double> conv(ch * cw * s.filters);
    for (int64_t y = 0; y < ch; ++y) {
      for (int64_t xx = 0; xx < cw; ++xx) {
        for (int64_t f = 0; f < s.filters; ++f) {
          double sum = kbias[f];
          for (int64_t ky = 0; ky < s.kernel; ++ky) {
            for (int64_t kx = 0; kx < s.kernel; ++kx) {
              for (int64_t c = 0; c < s.channels; ++c) {
                sum += static_cast<double>(
                           x[((n * s.height + y + ky) * s.width + xx + kx) * s.channels + c]) *
                       kernel[((ky * s.kernel + kx) * s.channels + c) * s.filters + f];
              }
            }
          }
          conv[(y * cw + xx) * s.filters + f] = std::max(sum, 0.0);
        }
      }
    }
    std::vector<double> flat;
    for (int64_t y = 0; y < ph; ++y) {
      for (int64_t xx = 0; xx < pw; ++xx) {
        for (int64_t f = 0; f < s.filters; ++f) {
          double best = -INFINITY;
          for (int64_t dy = 0; dy < s.pool; ++dy) {
            for (int64_t dx = 0; dx < s.pool; ++dx) {
              const int64_t at = ((y * s.pool + dy) * cw + xx * s.pool + dx) * s.filters + f;
              best = std::max(best, conv[at]);
            }
          }
          flat.push_back(best);
        }
      }
    }
    std::vector<double> hidden(s.hidden), logits(s.classes);
    for (int64_t j = 0; j < s.hidden; ++j) {
      double sum = b1[j];
      for (size_t i = 0; i < flat.size(); ++i) sum += flat[i] * w1[i * s.hidden + j];
      hidden[j] = std::max(sum, 0.0);
    }
    double max = -INFINITY;
    for (int64_t k = 0; k < s.classes; ++k) {
      double sum = b2[k];
      for (int64_t j = 0; j < s.hidden; ++j) sum += hidden[j] * w2[j * s.classes + k];
      logits[k] = sum;
      max = std::max(max, sum);
    }
    double z = 0;
    for (double l : logits) z += std::exp(l - max);
    total += std::log(z) - (logits[labels[n]] - max);
  }
  return total / batch;
}

class ConvNetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto device = CreateCpuDevice();
    ASSERT_TRUE(device.ok()) << device.status();
    device_ = *std::move(device);
  }
  std::unique_ptr<Device> device_;
};

TEST_F(ConvNetTest, Create_SeedModel_KerasLayoutAndParameterCount) {
  auto net = ConvNet::Create(ConvNetShape{});
  ASSERT_TRUE(net.ok()) << net.status();
  // Keras' summary of the seed model: 320 + 346,176 + 650 parameters.
  EXPECT_EQ(net->num_params(), 347146);
  EXPECT_EQ(net->flat(), 13 * 13 * 32);
  EXPECT_EQ(net->inputs(), 784);
  EXPECT_EQ(net->param_shape(ConvNet::kKernel), (std::vector<int64_t>{3, 3, 1, 32}));
  EXPECT_EQ(net->param_shape(ConvNet::kW1), (std::vector<int64_t>{5408, 64}));
  EXPECT_EQ(net->param_offset(ConvNet::kKernelBias), 288);
  EXPECT_EQ(net->param_offset(ConvNet::kW1), 320);
  EXPECT_EQ(net->param_offset(ConvNet::kB1), 320 + 5408 * 64);
  EXPECT_EQ(net->param_size(ConvNet::kW2), 640);
  EXPECT_EQ(net->param_offset(ConvNet::kB2), net->num_params() - 10);
  EXPECT_EQ(net->ToString(), "conv32x3x3-pool2-64-10 on 28x28x1");
}

TEST_F(ConvNetTest, Create_BadShape_InvalidArgumentNamingIt) {
  ConvNetShape s;
  s.filters = 0;
  EXPECT_THAT(ConvNet::Create(s),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("filters is 0")));
  s = ConvNetShape{};
  s.kernel = 29;
  EXPECT_THAT(ConvNet::Create(s), StatusIs(absl::StatusCode::kInvalidArgument,
                                           AllOf(HasSubstr("kernel 29"), HasSubstr("28x28"))));
  s = ConvNetShape{};
  s.pool = 27;
  EXPECT_THAT(ConvNet::Create(s), StatusIs(absl::StatusCode::kInvalidArgument,
                                           AllOf(HasSubstr("pool 27"), HasSubstr("26x26"))));
  s = ConvNetShape{};
  s.hidden = int64_t{1} << 39;  // 5408 x 2^39 weights
  EXPECT_THAT(ConvNet::Create(s),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("too many")));
}

TEST_F(ConvNetTest, Evaluate_MatchesKerasOrderComputedDirectly) {
  // The network pools before its bias and ReLU (conv_net.cc); the loss must be Keras' order's.
  auto net = ConvNet::Create(TinyShape());
  ASSERT_TRUE(net.ok()) << net.status();
  const int64_t batch = 5;
  const std::vector<float> params = Uniform(net->num_params(), /*limit=*/0.8f, /*seed=*/7);
  const std::vector<float> x = Uniform(batch * net->inputs(), /*limit=*/1.0f, /*seed=*/8);
  const std::vector<int32_t> labels = {0, 3, 1, 2, 3};
  auto sums = net->Evaluate(device_.get(), params.data(), batch, x.data(), labels.data());
  ASSERT_TRUE(sums.ok()) << sums.status();
  EXPECT_NEAR(sums->loss_sum / batch, NaiveLoss(*net, params, batch, x, labels), 1e-5);
}

// The analytic gradient against central differences of the loss, for every parameter of the tiny
// network: kernel and its bias (through the pooling), both dense layers.
TEST_F(ConvNetTest, ForwardBackward_TinyBatch_MatchesFiniteDifferences) {
  auto net = ConvNet::Create(TinyShape());
  ASSERT_TRUE(net.ok()) << net.status();
  const int64_t batch = 3;
  const std::vector<float> params = Uniform(net->num_params(), /*limit=*/0.8f, /*seed=*/1);
  const std::vector<float> x = Uniform(batch * net->inputs(), /*limit=*/1.0f, /*seed=*/2);
  const std::vector<int32_t> labels = {0, 3, 2};
  std::vector<float> grads(net->num_params(), std::nanf(""));
  auto loss = net->ForwardBackward(device_.get(), params.data(), batch, x.data(), labels.data(),
                                   grads.data());
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_NEAR(*loss, NaiveLoss(*net, params, batch, x, labels), 1e-5);
  auto loss_at = [&](const std::vector<float>& p) { return NaiveLoss(*net, p, batch, x, labels); };
  const float eps = 1e-3f;
  int nonzero = 0;
  for (int64_t i = 0; i < net->num_params(); ++i) {
    std::vector<float> p = params;
    const float plus = params[i] + eps, minus = params[i] - eps;  // the steps as floats
    p[i] = plus;
    const double up = loss_at(p);
    p[i] = minus;
    const double down = loss_at(p);
    const double numeric = (up - down) / (static_cast<double>(plus) - minus);
    EXPECT_NEAR(grads[i], numeric, 1e-3 + 1e-2 * std::fabs(numeric)) << "parameter " << i;
    if (std::fabs(grads[i]) > 1e-4) ++nonzero;
  }
  // Meaningful only if most gradients are not zero (dead ReLUs).
  EXPECT_GT(nonzero, net->num_params() / 2);
}

TEST_F(ConvNetTest, Evaluate_CountsArgmaxMatches) {
  auto net = ConvNet::Create(TinyShape());
  ASSERT_TRUE(net.ok()) << net.status();
  const int64_t batch = 6;
  std::vector<float> params = Uniform(net->num_params(), /*limit=*/0.5f, /*seed=*/3);
  // The output bias decides: class 2 wins every example by far.
  for (int64_t k = 0; k < 4; ++k) params[net->param_offset(ConvNet::kB2) + k] = k == 2 ? 50 : 0;
  const std::vector<float> x = Uniform(batch * net->inputs(), /*limit=*/1.0f, /*seed=*/4);
  const std::vector<int32_t> labels = {2, 0, 2, 2, 1, 3};
  auto sums = net->Evaluate(device_.get(), params.data(), batch, x.data(), labels.data());
  ASSERT_TRUE(sums.ok()) << sums.status();
  EXPECT_EQ(sums->correct, 3);
}

TEST_F(ConvNetTest, ForwardBackward_BadBatchOrLabel_InvalidArgument) {
  auto net = ConvNet::Create(TinyShape());
  ASSERT_TRUE(net.ok()) << net.status();
  std::vector<float> params(net->num_params()), grads(net->num_params());
  std::vector<float> x(2 * net->inputs());
  const std::vector<int32_t> labels = {1, 4};
  EXPECT_THAT(net->ForwardBackward(device_.get(), params.data(), /*batch=*/2, x.data(),
                                   labels.data(), grads.data()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("labels[1] = 4")));
  EXPECT_THAT(net->ForwardBackward(device_.get(), params.data(), /*batch=*/0, x.data(),
                                   labels.data(), grads.data()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("batch 0")));
}

std::unique_ptr<ReplicaGroup> CpuReplicas(int replicas) {
  ReplicaGroupOptions options;
  options.kind = DeviceOptions::Kind::kCpu;
  options.num_replicas = replicas;
  auto group = ReplicaGroup::Create(options);
  EXPECT_TRUE(group.ok()) << group.status();
  return *std::move(group);
}

// The batch split over replicas (unevenly, one replica empty at batch 2 of 3) gives the one-device
// gradient, loss and counts.
TEST_F(ConvNetTest, ForwardBackward_Replicas_MatchOneDevice) {
  auto net = ConvNet::Create(TinyShape());
  ASSERT_TRUE(net.ok()) << net.status();
  const std::vector<float> params = Uniform(net->num_params(), /*limit=*/0.8f, /*seed=*/5);
  for (const int64_t batch : {2, 7}) {
    const std::vector<float> x = Uniform(batch * net->inputs(), /*limit=*/1.0f, /*seed=*/6);
    std::vector<int32_t> labels(batch);
    for (int64_t i = 0; i < batch; ++i) labels[i] = static_cast<int32_t>((i * 3) % 4);
    std::vector<float> expected(net->num_params());
    auto expected_loss = net->ForwardBackward(device_.get(), params.data(), batch, x.data(),
                                              labels.data(), expected.data());
    ASSERT_TRUE(expected_loss.ok()) << expected_loss.status();
    auto expected_sums =
        net->Evaluate(device_.get(), params.data(), batch, x.data(), labels.data());
    ASSERT_TRUE(expected_sums.ok()) << expected_sums.status();
    for (const int replicas : {1, 3}) {
      SCOPED_TRACE(testing::Message() << "batch " << batch << ", " << replicas << " replicas");
      std::unique_ptr<ReplicaGroup> group = CpuReplicas(replicas);
      std::vector<float> grads(net->num_params(), std::nanf(""));
      auto loss = net->ForwardBackward(group.get(), params.data(), batch, x.data(),
                                       labels.data(), grads.data());
      ASSERT_TRUE(loss.ok()) << loss.status();
      EXPECT_NEAR(*loss, *expected_loss, 1e-5);
      for (int64_t i = 0; i < net->num_params(); ++i) {
        ASSERT_NEAR(grads[i], expected[i], 1e-5 + 1e-4 * std::fabs(expected[i])) << i;
      }
      auto sums = net->Evaluate(group.get(), params.data(), batch, x.data(), labels.data());
      ASSERT_TRUE(sums.ok()) << sums.status();
      EXPECT_EQ(sums->correct, expected_sums->correct);
      EXPECT_NEAR(sums->loss_sum, expected_sums->loss_sum, 1e-4);
    }
  }
}

// Plain SGD on the gradients learns a toy task (which quadrant of the image is lit): the network's
// pieces fit together.
TEST_F(ConvNetTest, Sgd_ToyQuadrants_Learns) {
  ConvNetShape s;
  s.height = s.width = 8;
  s.channels = 1;
  s.filters = 4;
  s.kernel = 3;
  s.pool = 2;
  s.hidden = 8;
  s.classes = 4;
  auto net = ConvNet::Create(s);
  ASSERT_TRUE(net.ok()) << net.status();
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> noise(0, 0.3f);
  const int64_t batch = 32;
  std::vector<float> x(batch * 64);
  std::vector<int32_t> labels(batch);
  for (int64_t n = 0; n < batch; ++n) {
    labels[n] = static_cast<int32_t>(n % 4);
    for (int64_t p = 0; p < 64; ++p) {
      const int64_t quadrant = (p / 8 >= 4) * 2 + (p % 8 >= 4);
      x[n * 64 + p] = noise(rng) + (quadrant == labels[n] ? 0.7f : 0.0f);
    }
  }
  std::vector<float> params = Uniform(net->num_params(), /*limit=*/0.3f, /*seed=*/10);
  for (int64_t i = net->param_offset(ConvNet::kKernelBias); i < net->param_offset(ConvNet::kW1);
       ++i) {
    params[i] = 0.1f;  // start every filter alive
  }
  std::vector<float> grads(net->num_params());
  float first = 0, last = 0;
  for (int step = 0; step < 200; ++step) {
    auto loss = net->ForwardBackward(device_.get(), params.data(), batch, x.data(),
                                     labels.data(), grads.data());
    ASSERT_TRUE(loss.ok()) << loss.status();
    if (step == 0) first = *loss;
    last = *loss;
    for (int64_t i = 0; i < net->num_params(); ++i) params[i] -= 0.2f * grads[i];
  }
  EXPECT_LT(last, 0.25f * first);
  auto sums = net->Evaluate(device_.get(), params.data(), batch, x.data(), labels.data());
  ASSERT_TRUE(sums.ok()) << sums.status();
  EXPECT_EQ(sums->correct, batch);
}

}  // namespace
}  // namespace pstrain
