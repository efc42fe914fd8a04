#include "models/binary_metrics.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

TEST(BinaryAucTest, Perfect_Reversed_Random) {
  const std::vector<float> labels = {0, 0, 1, 1};
  EXPECT_DOUBLE_EQ(BinaryAuc(std::vector<float>{0.1f, 0.2f, 0.8f, 0.9f}, labels), 1.0);
  EXPECT_DOUBLE_EQ(BinaryAuc(std::vector<float>{0.9f, 0.8f, 0.2f, 0.1f}, labels), 0.0);
  // Pairs (pos, neg): (0.3 vs 0.1, 0.4) and (0.5 vs 0.1, 0.4): 3 of 4 ordered right.
  EXPECT_DOUBLE_EQ(BinaryAuc(std::vector<float>{0.1f, 0.4f, 0.3f, 0.5f}, labels), 0.75);
}

TEST(BinaryAucTest, Ties_CountOneHalf) {
  EXPECT_DOUBLE_EQ(BinaryAuc(std::vector<float>{1, 1, 1, 1}, std::vector<float>{0, 1, 0, 1}), 0.5);
  // Positive 2 ties negative 2 (half), beats negative 1.
  EXPECT_DOUBLE_EQ(BinaryAuc(std::vector<float>{1, 2, 2}, std::vector<float>{0, 0, 1}), 0.75);
}

TEST(BinaryAucTest, OneClass_Half) {
  EXPECT_DOUBLE_EQ(BinaryAuc(std::vector<float>{1, 2}, std::vector<float>{1, 1}), 0.5);
  EXPECT_DOUBLE_EQ(BinaryAuc({}, {}), 0.5);
}

TEST(BinaryLogLossTest, MatchesDefinition_StableForLargeLogits) {
  const std::vector<float> logits = {0.0f, 2.0f, -1.0f, 100.0f, -100.0f};
  const std::vector<float> labels = {1, 0, 0, 1, 0};
  auto sigmoid = [](double x) { return 1 / (1 + std::exp(-x)); };
  const double expect =
      (-std::log(0.5) - std::log(1 - sigmoid(2)) - std::log(1 - sigmoid(-1)) + 0 + 0) / 5;
  EXPECT_NEAR(BinaryLogLoss(logits, labels), expect, 1e-9);
  EXPECT_NEAR(BinaryLogLoss(std::vector<float>{-100.0f}, std::vector<float>{1}), 100.0, 1e-9);
  EXPECT_EQ(BinaryLogLoss({}, {}), 0.0);
}

}  // namespace
}  // namespace pstrain
