#include "worker/device/device.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/thread_pool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/device/device_test_util.h"

namespace pstrain {
namespace {

using ::testing::ElementsAre;
using ::testing::FloatNear;
using ::testing::HasSubstr;

// Each test runs on a device without a pool and on one whose pool splits every op (minimums 0),
// so both the single-piece and the many-piece paths are checked.
struct DeviceParam {
  std::string name;
  int pool_threads;  // 0: no pool
};
void PrintTo(const DeviceParam& param, std::ostream* os) { *os << param.name; }

class CpuDeviceTest : public ::testing::TestWithParam<DeviceParam> {
 protected:
  void SetUp() override {
    CpuDeviceOptions options;
    if (GetParam().pool_threads > 0) {
      pool_ = std::make_unique<ThreadPool>(GetParam().pool_threads);
      options.pool = pool_.get();
      options.min_flops_per_piece = 0;
      options.min_bytes_per_piece = 0;
    }
    absl::StatusOr<std::unique_ptr<Device>> device = CreateCpuDevice(options);
    ASSERT_TRUE(device.ok()) << device.status();
    device_ = *std::move(device);
  }

  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<Device> device_;
  std::mt19937 rng_{1234};
};

INSTANTIATE_TEST_SUITE_P(Pools, CpuDeviceTest,
                         ::testing::Values(DeviceParam{"NoPool", 0}, DeviceParam{"Pool3", 3}),
                         [](const ::testing::TestParamInfo<DeviceParam>& info) {
                           return info.param.name;
                         });

// ---- Memory ------------------------------------------------------------------------------------

TEST_P(CpuDeviceTest, Allocate_CopiesRoundTrip_Aligned) {
  absl::StatusOr<DeviceBuffer> buffer = device_->Allocate(/*bytes=*/4 * 100);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  EXPECT_EQ(buffer->bytes(), 400);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer->data()) % 64, 0u);
  std::vector<float> host = RandomFloats(100, &rng_), back(100), copy(100);
  ASSERT_TRUE(device_->CopyToDevice(host.data(), buffer->data(), 400).ok());
  ASSERT_TRUE(device_->CopyOnDevice(buffer->data(), copy.data(), 400).ok());
  ASSERT_TRUE(device_->CopyToHost(buffer->data(), back.data(), 400).ok());
  ASSERT_TRUE(device_->Synchronize().ok());
  EXPECT_EQ(back, host);
  EXPECT_EQ(copy, host);
  ASSERT_TRUE(device_->Zero(buffer->data(), 400).ok());
  ASSERT_TRUE(device_->CopyToHost(buffer->data(), back.data(), 400).ok());
  EXPECT_EQ(back, std::vector<float>(100, 0.0f));
}

TEST_P(CpuDeviceTest, DeviceBuffer_Move_TransfersOwnership) {
  absl::StatusOr<DeviceBuffer> buffer = device_->Allocate(/*bytes=*/64);
  ASSERT_TRUE(buffer.ok());
  void* data = buffer->data();
  DeviceBuffer moved = *std::move(buffer);
  EXPECT_EQ(moved.data(), data);
  DeviceBuffer other;
  other = std::move(moved);
  EXPECT_EQ(other.data(), data);
  EXPECT_EQ(moved.data(), nullptr);  // NOLINT: checking the moved-from state
  absl::StatusOr<DeviceBuffer> empty = device_->Allocate(/*bytes=*/0);
  EXPECT_TRUE(empty.ok());
}

TEST_P(CpuDeviceTest, Allocate_Negative_InvalidArgument) {
  absl::StatusOr<DeviceBuffer> buffer = device_->Allocate(/*bytes=*/-1);
  EXPECT_EQ(buffer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(buffer.status().message(), HasSubstr("bytes"));
}

// ---- Gemm --------------------------------------------------------------------------------------

struct GemmCase {
  bool trans_a, trans_b;
  int64_t m, n, k;
  float alpha, beta;
  int64_t pad;  // added to every leading dimension
};

// C = alpha op(A) op(B) + beta C in double, the textbook triple loop.
std::vector<double> NaiveGemm(const GemmCase& g, const std::vector<float>& a, int64_t lda,
                              const std::vector<float>& b, int64_t ldb,
                              const std::vector<float>& c, int64_t ldc) {
  std::vector<double> out(c.begin(), c.end());
  for (int64_t i = 0; i < g.m; ++i) {
    for (int64_t j = 0; j < g.n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < g.k; ++p) {
        const double av = g.trans_a ? a[p * lda + i] : a[i * lda + p];
        const double bv = g.trans_b ? b[j * ldb + p] : b[p * ldb + j];
        sum += av * bv;
      }
      out[i * ldc + j] = g.alpha * sum + (g.beta == 0 ? 0.0 : g.beta * c[i * ldc + j]);
    }
  }
  return out;
}

void RunGemmCase(Device* device, const GemmCase& g, std::mt19937* rng) {
  const int64_t lda = (g.trans_a ? g.m : g.k) + g.pad;
  const int64_t ldb = (g.trans_b ? g.k : g.n) + g.pad;
  const int64_t ldc = g.n + g.pad;
  const std::vector<float> a = RandomFloats((g.trans_a ? g.k : g.m) * lda, rng);
  const std::vector<float> b = RandomFloats((g.trans_b ? g.n : g.k) * ldb, rng);
  std::vector<float> c = RandomFloats(g.m * ldc, rng);
  // beta == 0 must not read C: poison it.
  if (g.beta == 0) std::fill(c.begin(), c.end(), std::numeric_limits<float>::quiet_NaN());
  std::vector<double> expected = NaiveGemm(g, a, lda, b, ldb, c, ldc);
  // The padding columns of C must be left alone (NaN stays NaN: compare them separately).
  std::vector<float> out = c;
  absl::Status s = device->Gemm(g.trans_a, g.trans_b, g.m, g.n, g.k, g.alpha, a.data(), lda,
                                b.data(), ldb, g.beta, out.data(), ldc);
  ASSERT_TRUE(s.ok()) << s;
  const std::string what = ::testing::PrintToString(std::vector<int64_t>{
      g.trans_a, g.trans_b, g.m, g.n, g.k, g.pad}) + " alpha=" + std::to_string(g.alpha) +
      " beta=" + std::to_string(g.beta);
  for (int64_t i = 0; i < g.m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const int64_t at = i * ldc + j;
      if (j >= g.n) {
        ASSERT_TRUE(std::memcmp(&out[at], &c[at], sizeof(float)) == 0) << what << " pad " << at;
        continue;
      }
      ASSERT_NEAR(out[at], expected[at], 1e-5 * (1 + g.k)) << what << " at " << i << "," << j;
    }
  }
}

TEST_P(CpuDeviceTest, Gemm_AllTransposesAndEdgeSizes_MatchNaive) {
  const std::vector<int64_t> sizes = {1, 3, 8, 17, 33};
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (int64_t m : sizes) {
        for (int64_t n : sizes) {
          for (int64_t k : sizes) {
            RunGemmCase(device_.get(), {ta, tb, m, n, k, /*alpha=*/1, /*beta=*/0, /*pad=*/0},
                        &rng_);
          }
        }
      }
    }
  }
}

TEST_P(CpuDeviceTest, Gemm_LargerThanBlocks_MatchNaive) {
  // k > 256 (two depth slices), m > 128 (two row blocks), n not a multiple of the kernel width,
  // padded leading dimensions, alpha and beta both in play.
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      RunGemmCase(device_.get(), {ta, tb, 200, 75, 300, /*alpha=*/0.5f, /*beta=*/2, /*pad=*/3},
                  &rng_);
    }
  }
  RunGemmCase(device_.get(), {false, false, 9, 1030, 20, /*alpha=*/1, /*beta=*/1, /*pad=*/0},
              &rng_);
  RunGemmCase(device_.get(), {false, true, 1, 1, 600, /*alpha=*/-1, /*beta=*/0, /*pad=*/5}, &rng_);
}

TEST_P(CpuDeviceTest, Gemm_MlpShapes_MatchNaive) {
  // The Fashion-MNIST MLP's forward and backward products at batch 64.
  const std::vector<GemmCase> cases = {
      {false, false, 64, 256, 784, 1, 0, 0},  // x W1
      {false, false, 64, 10, 128, 1, 0, 0},   // h2 W3
      {true, false, 784, 256, 64, 1, 0, 0},   // dW1 = x^T dh1
      {true, false, 128, 10, 64, 1, 1, 0},    // dW3 (accumulated)
      {false, true, 64, 128, 10, 1, 0, 0},    // dh2 = dlogits W3^T
      {false, true, 64, 256, 128, 1, 0, 0},   // dh1 = dh2 W2^T
  };
  for (const GemmCase& g : cases) RunGemmCase(device_.get(), g, &rng_);
}

TEST_P(CpuDeviceTest, Gemm_ZeroKOrAlpha_ScalesC) {
  std::vector<float> c = {1, 2, 3, 4, 5, 6};
  ASSERT_TRUE(device_->Gemm(false, false, /*m=*/2, /*n=*/3, /*k=*/0, /*alpha=*/1, nullptr, 1,
                            nullptr, 3, /*beta=*/2, c.data(), 3)
                  .ok());
  EXPECT_THAT(c, ElementsAre(2, 4, 6, 8, 10, 12));
  const std::vector<float> a = {1, 1}, b = {1, 1, 1, 1, 1, 1};
  c.assign(6, std::numeric_limits<float>::quiet_NaN());
  ASSERT_TRUE(device_->Gemm(false, false, 2, 3, 1, /*alpha=*/0, a.data(), 1, b.data(), 3,
                            /*beta=*/0, c.data(), 3)
                  .ok());
  EXPECT_THAT(c, ElementsAre(0, 0, 0, 0, 0, 0));
  // m == 0: nothing to do, nothing read.
  EXPECT_TRUE(device_->Gemm(false, false, 0, 3, 4, 1, nullptr, 4, b.data(), 3, 0, nullptr, 3).ok());
}

TEST_P(CpuDeviceTest, Gemm_BadArguments_InvalidArgument) {
  std::vector<float> a(100), b(100), c(100);
  absl::Status s = device_->Gemm(false, false, 4, 4, 4, 1, a.data(), /*lda=*/3, b.data(), 4, 0,
                                 c.data(), 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("lda"));
  s = device_->Gemm(false, true, 4, 5, 4, 1, a.data(), 4, b.data(), /*ldb=*/3, 0, c.data(), 5);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("ldb (B is n x k)"));
  s = device_->Gemm(false, false, 4, 4, 4, 1, a.data(), 4, b.data(), 4, 0, c.data(), /*ldc=*/2);
  EXPECT_THAT(s.message(), HasSubstr("ldc"));
  s = device_->Gemm(false, false, /*m=*/-1, 4, 4, 1, a.data(), 4, b.data(), 4, 0, c.data(), 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("m must be >= 0"));
  s = device_->Gemm(false, false, 4, 4, 4, 1, /*a=*/nullptr, 4, b.data(), 4, 0, c.data(), 4);
  EXPECT_THAT(s.message(), HasSubstr("a is null"));
}

// ---- Dense layers ------------------------------------------------------------------------------

TEST_P(CpuDeviceTest, BiasAddAndBiasGrad_MatchNaive) {
  for (int64_t rows : {1, 5, 300}) {
    for (int64_t cols : {1, 7, 130}) {
      std::vector<float> x = RandomFloats(rows * cols, &rng_), bias = RandomFloats(cols, &rng_);
      std::vector<double> expected(rows * cols), expected_grad(cols, 0.0);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < cols; ++j) {
          expected[r * cols + j] = x[r * cols + j] + bias[j];
          expected_grad[j] += x[r * cols + j];
        }
      }
      std::vector<float> dbias(cols, std::numeric_limits<float>::quiet_NaN());
      ASSERT_TRUE(device_->BiasGrad(rows, cols, x.data(), dbias.data()).ok());
      ExpectNear(dbias, expected_grad, 1e-5, "BiasGrad");
      ASSERT_TRUE(device_->BiasAdd(rows, cols, bias.data(), x.data()).ok());
      ExpectNear(x, expected, 1e-6, "BiasAdd");
    }
  }
}

TEST_P(CpuDeviceTest, ReluAndReluGrad_InPlace) {
  std::vector<float> x = {-2, -0.0f, 0, 0.5f, 3, -1e-30f, 1e-30f};
  std::vector<float> y(x.size());
  ASSERT_TRUE(device_->Relu(x.size(), x.data(), y.data()).ok());
  EXPECT_THAT(y, ElementsAre(0, 0, 0, 0.5f, 3, 0, 1e-30f));
  std::vector<float> dy = {1, 2, 3, 4, 5, 6, 7};
  ASSERT_TRUE(device_->ReluGrad(y.size(), y.data(), dy.data(), dy.data()).ok());
  EXPECT_THAT(dy, ElementsAre(0, 0, 0, 4, 5, 0, 7));
  ASSERT_TRUE(device_->Relu(x.size(), x.data(), x.data()).ok());
  EXPECT_EQ(x, y);
  // Long enough for the vector loops and for several pieces.
  std::vector<float> big = RandomFloats(10001, &rng_), big_y(10001);
  ASSERT_TRUE(device_->Relu(big.size(), big.data(), big_y.data()).ok());
  for (size_t i = 0; i < big.size(); ++i) ASSERT_EQ(big_y[i], std::max(big[i], 0.0f)) << i;
}

TEST_P(CpuDeviceTest, Sigmoid_ExtremeValues_Finite) {
  std::vector<float> x = {-1000, -20, 0, 20, 1000, 1};
  std::vector<float> y(x.size());
  ASSERT_TRUE(device_->Sigmoid(x.size(), x.data(), y.data()).ok());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_NEAR(y[i], 1 / (1 + std::exp(-static_cast<double>(x[i]))), 1e-7) << x[i];
  }
  EXPECT_EQ(y[0], 0);
  EXPECT_EQ(y[4], 1);
}

// ---- Losses ------------------------------------------------------------------------------------

// Central differences of `loss_fn` (which computes the loss from the logits) at every logit,
// against `grad`.
void ExpectGradientMatchesFiniteDifferences(std::vector<float> logits,
                                            const std::function<float(const float*)>& loss_fn,
                                            const std::vector<float>& grad, double tol) {
  constexpr float kEps = 1e-2f;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float saved = logits[i];
    logits[i] = saved + kEps;
    const double up = loss_fn(logits.data());
    logits[i] = saved - kEps;
    const double down = loss_fn(logits.data());
    logits[i] = saved;
    EXPECT_NEAR(grad[i], (up - down) / (2 * kEps), tol) << "logit " << i;
  }
}

TEST_P(CpuDeviceTest, SoftmaxCrossEntropy_MatchesNaiveAndGradient) {
  const int64_t rows = 6, classes = 5;
  std::vector<float> logits = RandomFloats(rows * classes, &rng_, -3, 3);
  const std::vector<int32_t> labels = {0, 4, 2, 2, 1, 3};
  std::vector<float> probs(rows * classes), dlogits(rows * classes);
  float loss = 0;
  ASSERT_TRUE(device_->SoftmaxCrossEntropy(rows, classes, logits.data(), labels.data(),
                                           probs.data(), &loss)
                  .ok());
  double expected_loss = 0;
  std::vector<double> expected_probs(rows * classes);
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0;
    for (int64_t j = 0; j < classes; ++j) sum += std::exp(double{logits[r * classes + j]});
    for (int64_t j = 0; j < classes; ++j) {
      expected_probs[r * classes + j] = std::exp(double{logits[r * classes + j]}) / sum;
    }
    expected_loss -= std::log(expected_probs[r * classes + labels[r]]);
  }
  EXPECT_NEAR(loss, expected_loss / rows, 1e-5);
  ExpectNear(probs, expected_probs, 1e-5, "probs");

  ASSERT_TRUE(device_->SoftmaxCrossEntropyGrad(rows, classes, probs.data(), labels.data(),
                                               dlogits.data())
                  .ok());
  ExpectGradientMatchesFiniteDifferences(
      logits,
      [&](const float* x) {
        std::vector<float> p(rows * classes);
        float l = 0;
        EXPECT_TRUE(device_->SoftmaxCrossEntropy(rows, classes, x, labels.data(), p.data(), &l)
                        .ok());
        return l;
      },
      dlogits, 2e-3);
  // In place: probs over the logits, dlogits over the probs.
  ASSERT_TRUE(device_->SoftmaxCrossEntropy(rows, classes, logits.data(), labels.data(),
                                           logits.data(), &loss)
                  .ok());
  EXPECT_EQ(logits, probs);
  ASSERT_TRUE(device_->SoftmaxCrossEntropyGrad(rows, classes, logits.data(), labels.data(),
                                               logits.data())
                  .ok());
  EXPECT_EQ(logits, dlogits);
}

TEST_P(CpuDeviceTest, SoftmaxCrossEntropy_HugeLogits_Stable) {
  const std::vector<float> logits = {1000, 0, -1000, 88, 89, 90};
  const std::vector<int32_t> labels = {1, 2};
  std::vector<float> probs(6);
  float loss = 0;
  ASSERT_TRUE(
      device_->SoftmaxCrossEntropy(2, 3, logits.data(), labels.data(), probs.data(), &loss).ok());
  EXPECT_TRUE(std::isfinite(loss));
  // Row 0: -log softmax[1] = 1000; row 1: -log(e^2 / (1 + e + e^2)).
  const double row1 = -(2 - std::log(1 + std::exp(1.0) + std::exp(2.0)));
  EXPECT_NEAR(loss, (1000 + row1) / 2, 1e-3);
  EXPECT_FLOAT_EQ(probs[0], 1);
  EXPECT_EQ(probs[2], 0);
}

TEST_P(CpuDeviceTest, SoftmaxCrossEntropy_LabelOutOfRange_InvalidArgument) {
  const std::vector<float> logits(6);
  const std::vector<int32_t> labels = {1, 3};
  std::vector<float> probs(6, -1);
  float loss = -1;
  absl::Status s =
      device_->SoftmaxCrossEntropy(2, 3, logits.data(), labels.data(), probs.data(), &loss);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("labels[1] = 3 is outside [0, 3)"));
  EXPECT_EQ(loss, -1);  // nothing written
  EXPECT_THAT(probs, ElementsAre(-1, -1, -1, -1, -1, -1));
  s = device_->SoftmaxCrossEntropyGrad(2, 3, probs.data(), labels.data(), probs.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(CpuDeviceTest, SigmoidCrossEntropy_MatchesNaiveAndGradient) {
  const int64_t n = 9;
  std::vector<float> logits = RandomFloats(n, &rng_, -4, 4);
  logits[0] = 0;
  const std::vector<float> labels = {1, 0, 1, 1, 0, 0, 0.25f, 1, 0};
  std::vector<float> dlogits(n);
  float loss = 0;
  ASSERT_TRUE(
      device_->SigmoidCrossEntropy(n, logits.data(), labels.data(), &loss, dlogits.data()).ok());
  double expected = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double s = 1 / (1 + std::exp(-double{logits[i]}));
    expected -= labels[i] * std::log(s) + (1 - labels[i]) * std::log(1 - s);
  }
  EXPECT_NEAR(loss, expected / n, 1e-6);
  ExpectGradientMatchesFiniteDifferences(
      logits,
      [&](const float* x) {
        float l = 0;
        EXPECT_TRUE(device_->SigmoidCrossEntropy(n, x, labels.data(), &l, nullptr).ok());
        return l;
      },
      dlogits, 1e-3);
}

TEST_P(CpuDeviceTest, SigmoidCrossEntropy_HugeLogits_Stable) {
  const std::vector<float> logits = {100, -100, 100, -100};
  const std::vector<float> labels = {1, 0, 0, 1};
  std::vector<float> dlogits(4);
  float loss = 0;
  ASSERT_TRUE(
      device_->SigmoidCrossEntropy(4, logits.data(), labels.data(), &loss, dlogits.data()).ok());
  EXPECT_NEAR(loss, 200.0 / 4, 1e-4);  // two right (~0 each) and two wrong by 100
  EXPECT_THAT(dlogits, ElementsAre(FloatNear(0, 1e-30), FloatNear(0, 1e-30), 0.25f, -0.25f));
}

TEST_P(CpuDeviceTest, MeanSquaredError_MatchesNaiveAndGradient) {
  std::vector<float> pred = RandomFloats(7, &rng_, 1, 5);
  const std::vector<float> target = RandomFloats(7, &rng_, 1, 5);
  std::vector<float> dpred(7);
  float loss = 0;
  ASSERT_TRUE(device_->MeanSquaredError(7, pred.data(), target.data(), &loss, dpred.data()).ok());
  double expected = 0;
  for (int i = 0; i < 7; ++i) expected += (double{pred[i]} - target[i]) * (pred[i] - target[i]);
  EXPECT_NEAR(loss, expected / 7, 1e-5);
  ExpectGradientMatchesFiniteDifferences(
      pred,
      [&](const float* p) {
        float l = 0;
        EXPECT_TRUE(device_->MeanSquaredError(7, p, target.data(), &l, nullptr).ok());
        return l;
      },
      dpred, 2e-3);
}

TEST_P(CpuDeviceTest, Losses_EmptyBatch_ZeroLoss) {
  float loss = -1;
  ASSERT_TRUE(device_->SigmoidCrossEntropy(0, nullptr, nullptr, &loss, nullptr).ok());
  EXPECT_EQ(loss, 0);
  loss = -1;
  ASSERT_TRUE(device_->SoftmaxCrossEntropy(0, 3, nullptr, nullptr, nullptr, &loss).ok());
  EXPECT_EQ(loss, 0);
}

// ---- Embeddings --------------------------------------------------------------------------------

TEST_P(CpuDeviceTest, Unique_ManyDuplicates_FirstAppearanceOrder) {
  const std::vector<int64_t> ids = {7, -3, 7, 1LL << 40, -3, 0, 7, INT64_MIN, INT64_MAX, 0};
  std::vector<int64_t> unique(ids.size());
  std::vector<int32_t> index(ids.size());
  absl::StatusOr<int64_t> count =
      device_->Unique(ids.size(), ids.data(), unique.data(), index.data());
  ASSERT_TRUE(count.ok()) << count.status();
  ASSERT_EQ(*count, 6);
  unique.resize(6);
  EXPECT_THAT(unique, ElementsAre(7, -3, 1LL << 40, 0, INT64_MIN, INT64_MAX));
  EXPECT_THAT(index, ElementsAre(0, 1, 0, 2, 1, 3, 0, 4, 5, 3));
}

TEST_P(CpuDeviceTest, Unique_RandomAndCollidingIds_MatchNaive) {
  // Random ids from a small vocabulary (many repeats), and strided ids that share low bits.
  std::vector<std::vector<int64_t>> inputs;
  {
    std::uniform_int_distribution<int64_t> dist(0, 999);
    std::vector<int64_t> ids(50000);
    for (int64_t& id : ids) id = dist(rng_);
    inputs.push_back(ids);
  }
  {
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < 20000; ++i) ids.push_back((i % 5000) << 32);
    inputs.push_back(ids);
  }
  inputs.push_back({42});
  inputs.push_back(std::vector<int64_t>(1000, 5));
  for (const std::vector<int64_t>& ids : inputs) {
    std::vector<int64_t> unique(ids.size());
    std::vector<int32_t> index(ids.size());
    absl::StatusOr<int64_t> count =
        device_->Unique(ids.size(), ids.data(), unique.data(), index.data());
    ASSERT_TRUE(count.ok());
    std::vector<int64_t> expected_unique;
    std::vector<int32_t> expected_index;
    std::map<int64_t, int32_t> position;
    for (int64_t id : ids) {
      auto [it, inserted] = position.emplace(id, static_cast<int32_t>(expected_unique.size()));
      if (inserted) expected_unique.push_back(id);
      expected_index.push_back(it->second);
    }
    unique.resize(*count);
    EXPECT_EQ(unique, expected_unique);
    EXPECT_EQ(index, expected_index);
  }
}

TEST_P(CpuDeviceTest, GatherRows_MatchNaive_ConcatLayout) {
  const int64_t num_rows = 50, dim = 13, batch = 40, features = 3;
  const std::vector<float> table = RandomFloats(num_rows * dim, &rng_);
  const std::vector<int32_t> index = RandomIndex(batch * features, num_rows, &rng_);
  std::vector<float> out(batch * features * dim);
  ASSERT_TRUE(
      device_->GatherRows(num_rows, dim, table.data(), index.data(), batch * features, out.data())
          .ok());
  // Row b of the [batch, features * dim] concat is its features' rows side by side.
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t f = 0; f < features; ++f) {
      for (int64_t j = 0; j < dim; ++j) {
        ASSERT_EQ(out[b * features * dim + f * dim + j], table[index[b * features + f] * dim + j]);
      }
    }
  }
}

TEST_P(CpuDeviceTest, GatherRows_IndexOutOfRange_InvalidArgumentNothingWritten) {
  const std::vector<float> table(4 * 2, 1.0f);
  for (int32_t bad : {4, -1}) {
    const std::vector<int32_t> index = {0, 3, bad, 1};
    std::vector<float> out(4 * 2, -7);
    absl::Status s = device_->GatherRows(4, 2, table.data(), index.data(), 4, out.data());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("index[2] = " + std::to_string(bad)));
    EXPECT_EQ(out, std::vector<float>(8, -7));
  }
}

TEST_P(CpuDeviceTest, SumPoolAndGrad_MatchNaive) {
  for (int64_t features : {1, 4}) {
    const int64_t batch = 33, dim = 17;
    const std::vector<float> in = RandomFloats(batch * features * dim, &rng_);
    std::vector<float> out(batch * dim);
    ASSERT_TRUE(device_->SumPool(batch, features, dim, in.data(), out.data()).ok());
    std::vector<double> expected(batch * dim, 0.0);
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t f = 0; f < features; ++f) {
        for (int64_t j = 0; j < dim; ++j) expected[b * dim + j] += in[(b * features + f) * dim + j];
      }
    }
    ExpectNear(out, expected, 1e-6, "SumPool");
    std::vector<float> din(batch * features * dim);
    ASSERT_TRUE(device_->SumPoolGrad(batch, features, dim, out.data(), din.data()).ok());
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t f = 0; f < features; ++f) {
        for (int64_t j = 0; j < dim; ++j) {
          ASSERT_EQ(din[(b * features + f) * dim + j], out[b * dim + j]);
        }
      }
    }
  }
}

TEST_P(CpuDeviceTest, SegmentSum_ManyDuplicates_MatchNaive) {
  for (int64_t dim : {1, 16, 37}) {
    const int64_t n = 5000, num_unique = 23;
    const std::vector<float> grads = RandomFloats(n * dim, &rng_);
    std::vector<int32_t> index = RandomIndex(n, num_unique, &rng_);
    index[0] = num_unique - 1;
    std::vector<float> out(num_unique * dim, std::numeric_limits<float>::quiet_NaN());
    ASSERT_TRUE(
        device_->SegmentSum(n, dim, grads.data(), index.data(), num_unique, out.data()).ok());
    std::vector<double> expected(num_unique * dim, 0.0);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < dim; ++j) expected[index[i] * dim + j] += grads[i * dim + j];
    }
    ExpectNear(out, expected, 1e-4, "SegmentSum");
  }
}

TEST_P(CpuDeviceTest, SegmentSum_UnusedRows_Zero) {
  const std::vector<float> grads = {1, 2, 3, 4};
  const std::vector<int32_t> index = {2, 2};
  std::vector<float> out(8, 9);
  ASSERT_TRUE(device_->SegmentSum(2, 2, grads.data(), index.data(), 4, out.data()).ok());
  EXPECT_THAT(out, ElementsAre(0, 0, 0, 0, 4, 6, 0, 0));
}

TEST_P(CpuDeviceTest, SegmentSum_IndexOutOfRange_InvalidArgument) {
  const std::vector<float> grads = {1, 2};
  const std::vector<int32_t> index = {0, 2};
  std::vector<float> out(2, 9);
  absl::Status s = device_->SegmentSum(2, 1, grads.data(), index.data(), 2, out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("index[1] = 2 is outside [0, 2)"));
  EXPECT_THAT(out, ElementsAre(9, 9));
}

TEST_P(CpuDeviceTest, UniqueGatherSegmentSum_EndToEnd_SumsDuplicateIdGradients) {
  // ids -> Unique -> "pulled" rows -> Gather; gradients of ones -> SegmentSum = counts per id.
  const std::vector<int64_t> ids = {10, 20, 10, 10, 30, 20};
  std::vector<int64_t> unique(ids.size());
  std::vector<int32_t> index(ids.size());
  absl::StatusOr<int64_t> count = device_->Unique(ids.size(), ids.data(), unique.data(),
                                                  index.data());
  ASSERT_TRUE(count.ok());
  const int64_t dim = 2;
  std::vector<float> rows(*count * dim);
  for (int64_t u = 0; u < *count; ++u) rows[u * dim] = rows[u * dim + 1] = unique[u];
  std::vector<float> gathered(ids.size() * dim);
  ASSERT_TRUE(device_->GatherRows(*count, dim, rows.data(), index.data(), ids.size(),
                                  gathered.data())
                  .ok());
  EXPECT_THAT(gathered, ElementsAre(10, 10, 20, 20, 10, 10, 10, 10, 30, 30, 20, 20));
  const std::vector<float> ones(ids.size() * dim, 1.0f);
  std::vector<float> grads(*count * dim);
  ASSERT_TRUE(device_->SegmentSum(ids.size(), dim, ones.data(), index.data(), *count,
                                  grads.data())
                  .ok());
  EXPECT_THAT(grads, ElementsAre(3, 3, 2, 2, 1, 1));
}

TEST_P(CpuDeviceTest, ConcatAndSplitColumns_RoundTrip) {
  const int64_t rows = 21;
  std::vector<float> a = RandomFloats(rows * 5, &rng_), b = RandomFloats(rows * 3, &rng_);
  // `a` is the first 4 columns of a [rows, 5] buffer (ld 5); `b` is [rows, 3].
  const std::vector<Device::ConstColumnBlock> blocks = {{a.data(), 4, 5}, {b.data(), 3, 3}};
  std::vector<float> out(rows * 7);
  ASSERT_TRUE(device_->ConcatColumns(rows, blocks, out.data()).ok());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < 4; ++j) ASSERT_EQ(out[r * 7 + j], a[r * 5 + j]);
    for (int64_t j = 0; j < 3; ++j) ASSERT_EQ(out[r * 7 + 4 + j], b[r * 3 + j]);
  }
  std::vector<float> a2(rows * 5, -1), b2(rows * 3, -1);
  const std::vector<Device::ColumnBlock> back = {{a2.data(), 4, 5}, {b2.data(), 3, 3}};
  ASSERT_TRUE(device_->SplitColumns(rows, out.data(), back).ok());
  EXPECT_EQ(b2, b);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < 4; ++j) ASSERT_EQ(a2[r * 5 + j], a[r * 5 + j]);
    ASSERT_EQ(a2[r * 5 + 4], -1);  // outside the block: untouched
  }
}

TEST_P(CpuDeviceTest, ConcatColumns_LdTooSmall_InvalidArgument) {
  std::vector<float> a(10), out(10);
  const std::vector<Device::ConstColumnBlock> blocks = {{a.data(), 4, 3}};
  absl::Status s = device_->ConcatColumns(2, blocks, out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("blocks[0].ld"));
}

// ---- Vectors -----------------------------------------------------------------------------------

TEST_P(CpuDeviceTest, AxpyAndScale_MatchNaive) {
  const std::vector<float> x = RandomFloats(1001, &rng_);
  std::vector<float> y = RandomFloats(1001, &rng_);
  std::vector<double> expected(1001);
  for (int i = 0; i < 1001; ++i) expected[i] = (y[i] + 0.5 * x[i]) * -3.0;
  ASSERT_TRUE(device_->Axpy(1001, 0.5f, x.data(), y.data()).ok());
  ASSERT_TRUE(device_->Scale(1001, -3.0f, y.data()).ok());
  ExpectNear(y, expected, 1e-6, "Axpy/Scale");
}

TEST_P(CpuDeviceTest, RowDotAndGrad_MatchNaiveAndGradient) {
  for (int64_t dim : {1, 8, 16, 35}) {
    const int64_t rows = 19;
    const std::vector<float> a = RandomFloats(rows * dim, &rng_);
    const std::vector<float> b = RandomFloats(rows * dim, &rng_);
    const std::vector<float> dout = RandomFloats(rows, &rng_);
    std::vector<float> out(rows), da(rows * dim), db(rows * dim);
    ASSERT_TRUE(device_->RowDot(rows, dim, a.data(), b.data(), out.data()).ok());
    std::vector<double> expected(rows, 0.0), expected_da(rows * dim), expected_db(rows * dim);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < dim; ++j) {
        expected[r] += double{a[r * dim + j]} * b[r * dim + j];
        expected_da[r * dim + j] = double{dout[r]} * b[r * dim + j];
        expected_db[r * dim + j] = double{dout[r]} * a[r * dim + j];
      }
    }
    ExpectNear(out, expected, 1e-5, "RowDot");
    ASSERT_TRUE(
        device_->RowDotGrad(rows, dim, a.data(), b.data(), dout.data(), da.data(), db.data())
            .ok());
    ExpectNear(da, expected_da, 1e-6, "da");
    ExpectNear(db, expected_db, 1e-6, "db");
    std::vector<float> only_db(rows * dim);
    ASSERT_TRUE(
        device_->RowDotGrad(rows, dim, a.data(), nullptr, dout.data(), nullptr, only_db.data())
            .ok());
    EXPECT_EQ(only_db, db);
  }
}

// ---- Replicas ----------------------------------------------------------------------------------

TEST_P(CpuDeviceTest, AllReduceSum_OneToFourReplicas_EveryBufferHoldsSum) {
  for (int replicas = 1; replicas <= 4; ++replicas) {
    for (int64_t n : {1, 2048, 5000}) {
      std::vector<std::vector<float>> data;
      std::vector<double> expected(n, 0.0);
      for (int r = 0; r < replicas; ++r) {
        data.push_back(RandomFloats(n, &rng_));
        for (int64_t j = 0; j < n; ++j) expected[j] += data[r][j];
      }
      std::vector<float*> buffers;
      for (std::vector<float>& d : data) buffers.push_back(d.data());
      ASSERT_TRUE(device_->AllReduceSum(buffers, n).ok());
      for (int r = 0; r < replicas; ++r) {
        ExpectNear(data[r], expected, 1e-6, "replica " + std::to_string(r));
        EXPECT_EQ(data[r], data[0]);  // bit-identical across replicas
      }
    }
  }
}

TEST_P(CpuDeviceTest, AllReduceSum_BadBuffers_InvalidArgument) {
  std::vector<float> a(10), b(10);
  absl::Status s = device_->AllReduceSum({}, 10);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("no buffers"));
  s = device_->AllReduceSum({a.data(), a.data() + 5}, 10);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("buffers[0] and buffers[1] overlap"));
  s = device_->AllReduceSum({a.data(), nullptr}, 10);
  EXPECT_THAT(s.message(), HasSubstr("buffers[1] is null"));
}

// ---- Threads -----------------------------------------------------------------------------------

TEST(CpuDeviceThreadsTest, OpsCalledFromPoolThreads_FinishWithoutDeadlock) {
  // Every pool thread is busy calling split ops that want the same pool: the callers must run
  // the pieces themselves rather than wait on helpers that cannot start.
  ThreadPool pool(2);
  CpuDeviceOptions options;
  options.pool = &pool;
  options.min_flops_per_piece = 0;
  options.min_bytes_per_piece = 0;
  absl::StatusOr<std::unique_ptr<Device>> device = CreateCpuDevice(options);
  ASSERT_TRUE(device.ok());
  constexpr int kCallers = 4;
  absl::BlockingCounter done(kCallers);
  absl::Notification all_done;
  std::vector<absl::Status> results(kCallers);
  for (int t = 0; t < kCallers; ++t) {
    pool.Schedule([&, t] {
      std::vector<float> a(64 * 64, 1.0f), c(64 * 64);
      for (int i = 0; i < 20 && results[t].ok(); ++i) {
        results[t] = (*device)->Gemm(false, false, 64, 64, 64, 1, a.data(), 64, a.data(), 64, 0,
                                     c.data(), 64);
        if (results[t].ok() && c[0] != 64) results[t] = absl::InternalError("wrong product");
      }
      done.DecrementCount();
    });
  }
  pool.Schedule([&] {
    done.Wait();
    all_done.Notify();
  });
  ASSERT_TRUE(all_done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
}

// ---- Factories ---------------------------------------------------------------------------------

TEST(CreateDeviceTest, CpuAndAuto_GiveCpu) {
  for (DeviceOptions::Kind kind : {DeviceOptions::Kind::kCpu, DeviceOptions::Kind::kAuto}) {
    DeviceOptions options;
    options.kind = kind;
    absl::StatusOr<std::unique_ptr<Device>> device = CreateDevice(options);
    ASSERT_TRUE(device.ok()) << device.status();
    if (kind == DeviceOptions::Kind::kAuto && (*device)->name() != "cpu") {
      EXPECT_EQ((*device)->name(), "cuda:0");  // a CUDA build on a GPU machine
      continue;
    }
    EXPECT_EQ((*device)->name(), "cpu");
    EXPECT_TRUE((*device)->host_memory());
  }
}

TEST(CreateDeviceTest, Cuda_WithoutCudaBuild_FailedPrecondition) {
  DeviceOptions options;
  options.kind = DeviceOptions::Kind::kCuda;
  absl::StatusOr<std::unique_ptr<Device>> device = CreateDevice(options);
  if (device.ok()) GTEST_SKIP() << "a CUDA build on a GPU machine: got " << (*device)->name();
  EXPECT_EQ(device.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(device.status().message(), HasSubstr("no CUDA"));
}

TEST(CreateDeviceTest, NegativeMinimum_InvalidArgument) {
  CpuDeviceOptions options;
  options.min_bytes_per_piece = -1;
  absl::StatusOr<std::unique_ptr<Device>> device = CreateCpuDevice(options);
  EXPECT_EQ(device.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(device.status().message(), HasSubstr("min_bytes_per_piece"));
}

}  // namespace
}  // namespace pstrain
