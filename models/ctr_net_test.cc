#include "models/ctr_net.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "common/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

// A tiny batch with repeated rows, and random parameters.
class CtrNetGradientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    device_ = *CreateCpuDevice();
    shape_.features = 3;
    shape_.dim = 2;
    shape_.hidden = 4;
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0, 0.7f);
    auto fill = [&](std::vector<float>& v, int64_t size) {
      v.resize(size);
      for (float& x : v) x = normal(rng);
    };
    fill(emb_, num_unique_ * shape_.dim);
    fill(lr_, num_unique_);
    fill(w1_, shape_.w1_size());
    fill(b1_, shape_.hidden);
    fill(w2_, shape_.hidden);
    fill(b2_, 1);
    fill(lr_bias_, 1);
    // Example 0 uses row 1 twice; row 5 is used by no example (zero gradient).
    index_ = {1, 1, 0, 2, 3, 4, 0, 2, 1, 4, 3, 0, 2, 2, 2};
    labels_ = {1, 0, 0, 1, 1};
  }

  CtrBatch Batch() const {
    return {n_, num_unique_, index_.data(), emb_.data(), lr_.data(), labels_.data()};
  }
  CtrDenseParams Params() const {
    return {w1_.data(), b1_.data(), w2_.data(), b2_.data(), lr_bias_.data()};
  }

  // The summed losses (model, baseline) at the current parameters, in double from the logits.
  std::pair<double, double> Losses() {
    CtrNet net(device_.get(), shape_);
    EXPECT_TRUE(net.Forward(Batch(), Params()).ok());
    auto sum = [&](const std::vector<float>& logits) {
      double s = 0;
      for (int64_t i = 0; i < n_; ++i) {
        const double x = logits[i], y = labels_[i];
        s += std::max(x, 0.0) - x * y + std::log1p(std::exp(-std::abs(x)));
      }
      return s;
    };
    std::vector<float> logits, lr_logits;
    EXPECT_TRUE(net.CopyLogits(&logits, &lr_logits).ok());
    return {sum(logits), sum(lr_logits)};
  }

  // Central differences of the summed model (or baseline) loss, divided by `divisor`, in every
  // element of `param` against `grad`.
  void Check(std::vector<float>& param, const std::vector<float>& grad, bool baseline,
             double divisor, const char* name) {
    ASSERT_EQ(param.size(), grad.size()) << name;
    const float eps = 1e-3f;
    for (size_t i = 0; i < param.size(); ++i) {
      const float old = param[i];
      param[i] = old + eps;
      const auto plus = Losses();
      param[i] = old - eps;
      const auto minus = Losses();
      param[i] = old;
      const double numeric = (baseline ? (plus.second - minus.second) / (2 * eps)
                                       : (plus.first - minus.first) / (2 * eps)) /
                             divisor;
      EXPECT_NEAR(grad[i], numeric, 2e-3 + 1e-2 * std::abs(numeric)) << name << "[" << i << "]";
    }
  }

  std::unique_ptr<Device> device_;
  CtrNetShape shape_;
  const int64_t n_ = 5;
  const int64_t num_unique_ = 6;
  std::vector<float> emb_, lr_, w1_, b1_, w2_, b2_, lr_bias_, labels_;
  std::vector<int32_t> index_;
};

TEST_F(CtrNetGradientTest, Backward_MatchesCentralDifferences) {
  CtrNet net(device_.get(), shape_);
  ASSERT_TRUE(net.Forward(Batch(), Params()).ok());
  const CtrGradLayout layout(shape_, num_unique_);
  std::vector<float> flat(layout.size, std::nanf(""));
  float loss = 0, lr_loss = 0;
  ASSERT_TRUE(net.Backward(Batch(), Params(), flat.data(), &loss, &lr_loss).ok());
  const CtrGrads g = CtrGrads::Split(flat.data(), layout);
  const auto [sum_loss, sum_lr_loss] = Losses();
  EXPECT_NEAR(loss, sum_loss / n_, 1e-5);  // the reported losses are means
  EXPECT_NEAR(lr_loss, sum_lr_loss / n_, 1e-5);

  // Tables: gradients of the summed loss; dense weights: of the mean loss.
  Check(emb_, g.emb, /*baseline=*/false, /*divisor=*/1, "emb");
  Check(w1_, g.w1, /*baseline=*/false, /*divisor=*/n_, "w1");
  Check(b1_, g.b1, /*baseline=*/false, /*divisor=*/n_, "b1");
  Check(w2_, g.w2, /*baseline=*/false, /*divisor=*/n_, "w2");
  Check(b2_, g.b2, /*baseline=*/false, /*divisor=*/n_, "b2");
  Check(lr_, g.lr, /*baseline=*/true, /*divisor=*/1, "lr");
  Check(lr_bias_, g.lr_bias, /*baseline=*/true, /*divisor=*/n_, "lr_bias");
  // An unused row gets nothing.
  EXPECT_EQ(g.emb[5 * shape_.dim], 0.0f);
  EXPECT_EQ(g.lr[5], 0.0f);
}

TEST_F(CtrNetGradientTest, Forward_BaselineLogitIsBiasPlusRowSum) {
  CtrNet net(device_.get(), shape_);
  ASSERT_TRUE(net.Forward(Batch(), Params()).ok());
  std::vector<float> logits, lr_logits;
  ASSERT_TRUE(net.CopyLogits(&logits, &lr_logits).ok());
  for (int64_t i = 0; i < n_; ++i) {
    float expect = lr_bias_[0];
    for (int64_t f = 0; f < shape_.features; ++f) expect += lr_[index_[i * shape_.features + f]];
    EXPECT_NEAR(lr_logits[i], expect, 1e-5) << i;
  }
}

// The replicated step (a CPU group) gives the one-device gradients and losses: tables summed over
// the replicas' slices, dense weights weighted by their shares; also with more replicas than
// examples.
TEST_F(CtrNetGradientTest, ReplicatedStep_MatchesOneDevice) {
  CtrNet net(device_.get(), shape_);
  ASSERT_TRUE(net.Forward(Batch(), Params()).ok());
  const CtrGradLayout layout(shape_, num_unique_);
  std::vector<float> expected(layout.size);
  float loss = 0, lr_loss = 0;
  ASSERT_TRUE(net.Backward(Batch(), Params(), expected.data(), &loss, &lr_loss).ok());
  std::vector<float> logits, lr_logits;
  ASSERT_TRUE(net.CopyLogits(&logits, &lr_logits).ok());
  for (const int replicas : {1, 2, 3, 7}) {
    SCOPED_TRACE(testing::Message() << replicas << " replicas");
    ReplicaGroupOptions options;
    options.kind = DeviceOptions::Kind::kCpu;
    options.num_replicas = replicas;
    auto group = ReplicaGroup::Create(options);
    ASSERT_TRUE(group.ok()) << group.status();
    std::vector<float> grads;
    float r_loss = 0, r_lr_loss = 0;
    ASSERT_TRUE(CtrReplicatedStep(group->get(), shape_, Batch(), Params(), &grads, &r_loss,
                                  &r_lr_loss)
                    .ok());
    EXPECT_NEAR(r_loss, loss, 1e-5);
    EXPECT_NEAR(r_lr_loss, lr_loss, 1e-5);
    ASSERT_EQ(grads.size(), expected.size());
    for (size_t i = 0; i < grads.size(); ++i) {
      EXPECT_NEAR(grads[i], expected[i], 1e-5 + 1e-4 * std::abs(expected[i])) << i;
    }
    std::vector<float> r_logits, r_lr_logits;
    ASSERT_TRUE(CtrReplicatedForward(group->get(), shape_, Batch(), Params(), &r_logits,
                                     &r_lr_logits)
                    .ok());
    ASSERT_EQ(r_logits.size(), logits.size());
    for (size_t i = 0; i < logits.size(); ++i) {
      EXPECT_NEAR(r_logits[i], logits[i], 1e-5);
      EXPECT_NEAR(r_lr_logits[i], lr_logits[i], 1e-5);
    }
  }
}

// A CUDA replica group (one GPU) and a CPU one, for checks of the GPU against the CPU; the tests
// skip, saying why, without a GPU (or a CUDA build).
class CtrNetDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ReplicaGroupOptions options;
    options.kind = DeviceOptions::Kind::kCuda;
    options.num_replicas = 1;
    auto cuda = ReplicaGroup::Create(options);
    if (!cuda.ok()) GTEST_SKIP() << "no CUDA replica group here: " << cuda.status();
    cuda_ = *std::move(cuda);
    options.kind = DeviceOptions::Kind::kCpu;
    auto cpu = ReplicaGroup::Create(options);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    cpu_ = *std::move(cpu);
  }

  // A random batch of `n` examples over `num_unique` rows, random parameters (normal, `sigma`),
  // and the CPU group's step on it.
  struct Case {
    int64_t n = 0, num_unique = 0;
    std::vector<int32_t> index;
    std::vector<float> emb, lr, w1, b1, w2, b2, lr_bias, labels;
    std::vector<float> expected;  // the CPU's gradients
    float loss = 0, lr_loss = 0;  // and losses
    CtrBatch Batch() const {
      return {n, num_unique, index.data(), emb.data(), lr.data(), labels.data()};
    }
    CtrDenseParams Params() const {
      return {w1.data(), b1.data(), w2.data(), b2.data(), lr_bias.data()};
    }
  };
  Case MakeCase(int64_t n, int64_t num_unique, float sigma, uint32_t seed) {
    Case k;
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0, sigma);
    k.n = n;
    k.num_unique = num_unique;
    std::uniform_int_distribution<int32_t> row(0, static_cast<int32_t>(num_unique - 1));
    k.index.resize(n * shape_.features);
    for (int32_t& i : k.index) i = row(rng);
    auto fill = [&](std::vector<float>* v, int64_t size) {
      v->resize(size);
      for (float& x : *v) x = normal(rng);
    };
    fill(&k.emb, num_unique * shape_.dim);
    fill(&k.lr, num_unique);
    fill(&k.w1, shape_.w1_size());
    fill(&k.b1, shape_.hidden);
    fill(&k.w2, shape_.hidden);
    fill(&k.b2, 1);
    fill(&k.lr_bias, 1);
    k.labels.resize(n);
    for (int64_t i = 0; i < n; ++i) k.labels[i] = static_cast<float>((i + seed) % 3 == 0);
    EXPECT_TRUE(CtrReplicatedStep(cpu_.get(), shape_, k.Batch(), k.Params(), &k.expected, &k.loss,
                                  &k.lr_loss)
                    .ok());
    return k;
  }

  const CtrNetShape shape_{};  // the flights model's: 14 features x 16 wide, 64 hidden
  std::unique_ptr<ReplicaGroup> cuda_;
  std::unique_ptr<ReplicaGroup> cpu_;
};

// The flights model's shapes on the GPU: the same gradients, losses and logits as on the CPU, up to
// float rounding.
TEST_F(CtrNetDeviceTest, ReplicatedStep_CudaGroup_MatchesCpuGroup) {
  for (const int64_t n : {int64_t{7}, int64_t{256}, int64_t{1024}}) {
    SCOPED_TRACE(testing::Message() << n << " examples");
    const Case k = MakeCase(n, std::min<int64_t>(n * shape_.features, 3000), /*sigma=*/0.1f,
                            /*seed=*/11);
    std::vector<float> grads;
    float loss = 0, lr_loss = 0;
    ASSERT_TRUE(
        CtrReplicatedStep(cuda_.get(), shape_, k.Batch(), k.Params(), &grads, &loss, &lr_loss)
            .ok());
    EXPECT_NEAR(loss, k.loss, 1e-5 + 1e-5 * std::abs(k.loss));
    EXPECT_NEAR(lr_loss, k.lr_loss, 1e-5 + 1e-5 * std::abs(k.lr_loss));
    ASSERT_EQ(grads.size(), k.expected.size());
    const CtrGradLayout layout(shape_, k.num_unique);
    int reported = 0;
    for (size_t i = 0; i < grads.size(); ++i) {
      if (std::abs(grads[i] - k.expected[i]) > 1e-5 + 1e-3 * std::abs(k.expected[i]) &&
          reported++ < 10) {
        ADD_FAILURE() << "gradient " << i << " (emb at 0, lr at " << layout.lr << ", w1 at "
                      << layout.w1 << ", b1 at " << layout.b1 << ", w2 at " << layout.w2
                      << ", b2 at " << layout.b2 << ", lr_bias at " << layout.lr_bias
                      << "): gpu " << grads[i] << ", cpu " << k.expected[i];
      }
    }
    std::vector<float> logits, lr_logits, gpu_logits, gpu_lr_logits;
    ASSERT_TRUE(
        CtrReplicatedForward(cpu_.get(), shape_, k.Batch(), k.Params(), &logits, &lr_logits).ok());
    ASSERT_TRUE(CtrReplicatedForward(cuda_.get(), shape_, k.Batch(), k.Params(), &gpu_logits,
                                     &gpu_lr_logits)
                    .ok());
    ASSERT_EQ(gpu_logits.size(), logits.size());
    ASSERT_EQ(gpu_lr_logits.size(), lr_logits.size());
    for (size_t i = 0; i < logits.size(); ++i) {
      EXPECT_NEAR(gpu_logits[i], logits[i], 1e-4) << i;
      EXPECT_NEAR(gpu_lr_logits[i], lr_logits[i], 1e-4) << i;
    }
  }
}

// Two threads stepping on one CUDA replica group at once (as a process's in-process workers share
// their machine's GPU) each get their own batch's gradients.
TEST_F(CtrNetDeviceTest, ReplicatedStep_TwoThreadsShareACudaGroup_EachMatchesCpu) {
  const std::vector<Case> cases = {MakeCase(512, 2000, /*sigma=*/0.3f, /*seed=*/100),
                                   MakeCase(1024, 2500, /*sigma=*/0.3f, /*seed=*/101)};
  std::vector<int> mismatches(cases.size(), 0);
  std::vector<std::thread> threads;
  for (size_t c = 0; c < cases.size(); ++c) {
    threads.emplace_back([&, c] {
      const Case& k = cases[c];
      for (int iteration = 0; iteration < 50; ++iteration) {
        std::vector<float> grads;
        float loss = 0, lr_loss = 0;
        if (!CtrReplicatedStep(cuda_.get(), shape_, k.Batch(), k.Params(), &grads, &loss,
                               &lr_loss)
                 .ok() ||
            grads.size() != k.expected.size()) {
          ++mismatches[c];
          continue;
        }
        bool same = std::abs(loss - k.loss) <= 1e-4 + 1e-4 * std::abs(k.loss);
        for (size_t i = 0; i < grads.size() && same; ++i) {
          same = std::abs(grads[i] - k.expected[i]) <= 1e-4 + 1e-3 * std::abs(k.expected[i]);
        }
        if (!same) ++mismatches[c];
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(mismatches[0], 0) << "of 50 steps of the first thread";
  EXPECT_EQ(mismatches[1], 0) << "of 50 steps of the second thread";
}

TEST(CtrGradLayoutTest, TablesThenDenseInOneBuffer) {
  CtrNetShape shape;
  shape.features = 3;
  shape.dim = 2;
  shape.hidden = 4;
  const CtrGradLayout layout(shape, /*num_unique=*/5);
  EXPECT_EQ(layout.emb, 0);
  EXPECT_EQ(layout.lr, 10);
  EXPECT_EQ(layout.w1, 15);
  EXPECT_EQ(layout.b1, 15 + 24);
  EXPECT_EQ(layout.w2, 15 + 24 + 4);
  EXPECT_EQ(layout.b2, 15 + 24 + 8);
  EXPECT_EQ(layout.lr_bias, 15 + 24 + 9);
  EXPECT_EQ(layout.size, 15 + 24 + 10);
}

TEST_F(CtrNetGradientTest, IndexOutOfRange_InvalidArgument) {
  index_[4] = 6;
  CtrNet net(device_.get(), shape_);
  EXPECT_THAT(net.Forward(Batch(), Params()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("index")));
}

TEST_F(CtrNetGradientTest, BackwardWithoutForward_InvalidArgument) {
  CtrNet net(device_.get(), shape_);
  std::vector<float> flat(CtrGradLayout(shape_, num_unique_).size);
  float loss, lr_loss;
  EXPECT_THAT(net.Backward(Batch(), Params(), flat.data(), &loss, &lr_loss),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("after a Forward")));
}

TEST_F(CtrNetGradientTest, EmptyBatch_ZeroGradients) {
  CtrNet net(device_.get(), shape_);
  CtrBatch b = Batch();
  b.n = 0;
  ASSERT_TRUE(net.Forward(b, Params()).ok());
  const CtrGradLayout layout(shape_, num_unique_);
  std::vector<float> flat(layout.size, 1.0f);
  float loss = 1, lr_loss = 1;
  ASSERT_TRUE(net.Backward(b, Params(), flat.data(), &loss, &lr_loss).ok());
  EXPECT_EQ(loss, 0.0f);
  const CtrGrads g = CtrGrads::Split(flat.data(), layout);
  EXPECT_EQ(g.w1.size(), static_cast<size_t>(shape_.w1_size()));
  for (float x : flat) EXPECT_EQ(x, 0.0f);
}

}  // namespace
}  // namespace pstrain
