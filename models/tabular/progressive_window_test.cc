#include "models/tabular/progressive_window.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace pstrain {
namespace tabular {
namespace {

TEST(ProgressiveWindowTest, Binary_KnownAucAndLogLoss_OverTheLastWindowOnly) {
  ProgressiveWindow w(Task::kBinary, /*window=*/4);
  EXPECT_TRUE(w.Metrics().empty());
  // An old batch that ranks every pair wrong, then two that rank every pair right.
  w.Add({0.9f, 0.1f}, {0, 1});
  w.Add({0.8f, 0.2f}, {1, 0});
  w.Add({0.7f, 0.4f}, {1, 0});
  const auto m = w.Metrics();
  EXPECT_EQ(m.at("progressive_examples"), 4);  // the oldest batch left the window
  EXPECT_DOUBLE_EQ(m.at("progressive_auc"), 1.0);
  const double loss = -(std::log(0.8) + std::log(0.8) + std::log(0.7) + std::log(0.6)) / 4;
  EXPECT_NEAR(m.at("progressive_logloss"), loss, 1e-6);
}

TEST(ProgressiveWindowTest, Binary_RandomScores_AboutOneHalf) {
  ProgressiveWindow w(Task::kBinary, 100000);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(0, 1);
  for (int b = 0; b < 200; ++b) {
    std::vector<float> p(256), y(256);
    for (int i = 0; i < 256; ++i) {
      p[i] = u(rng);
      y[i] = u(rng) < 0.3f ? 1 : 0;
    }
    w.Add(p, y);
  }
  EXPECT_NEAR(w.Metrics().at("progressive_auc"), 0.5, 0.01);
}

TEST(ProgressiveWindowTest, RegressionAndMulticlass_AndMismatchedBatchIgnored) {
  ProgressiveWindow r(Task::kRegression, 10);
  r.Add({1, 2}, {1, 4});
  r.Add({1, 2, 3}, {1});  // sizes differ: ignored
  EXPECT_DOUBLE_EQ(r.Metrics().at("progressive_rmse"), std::sqrt(2.0));
  ProgressiveWindow c(Task::kMulticlass, 10);
  c.Add({0, 2, 1, 1}, {0, 2, 2, 1});
  EXPECT_DOUBLE_EQ(c.Metrics().at("progressive_accuracy"), 0.75);
}

}  // namespace
}  // namespace tabular
}  // namespace pstrain
