#include "trainer/early_stopping.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

// The index of the validation that stops a run with these values (-1: none), and the best index.
std::pair<int, int> StopAndBest(const std::string& monitor, int patience, double min_delta,
                        const std::vector<double>& curve) {
  EarlyStoppingOptions o;
  o.monitor = monitor;
  o.patience = patience;
  o.min_delta = min_delta;
  EarlyStopping es = *EarlyStopping::Create(o);
  for (size_t i = 0; i < curve.size(); ++i) {
    if (es.Observe(static_cast<int64_t>(i) * 100, curve[i]).stop) {
      return {static_cast<int>(i), static_cast<int>(es.best_step() / 100)};
    }
  }
  return {-1, static_cast<int>(es.best_step() / 100)};
}

TEST(EarlyStoppingTest, StopsAfterPatienceValidationsWithoutImprovement) {
  // A loss that falls to its best at validation 3, then rises: with patience 2 the run stops at
  // validation 5 (two in a row not better than validation 3's), as Keras's EarlyStopping does.
  const std::vector<double> curve = {1.0, 0.8, 0.7, 0.65, 0.66, 0.7, 0.6, 0.5};
  EXPECT_EQ(StopAndBest("val_rmse", 2, 0, curve), std::make_pair(5, 3));
  EXPECT_EQ(StopAndBest("val_rmse", 1, 0, curve), std::make_pair(4, 3));
  EXPECT_EQ(StopAndBest("val_rmse", 3, 0, curve), std::make_pair(-1, 7));  // 0.6 at 6 is in time
  EXPECT_EQ(StopAndBest("val_rmse", 0, 0, curve), std::make_pair(-1, 7));  // never stops
}

TEST(EarlyStoppingTest, MinDeltaIgnoresSmallImprovements) {
  const std::vector<double> curve = {1.0, 0.95, 0.93, 0.92, 0.9};
  EXPECT_EQ(StopAndBest("val_loss", 2, 0.06, curve), std::make_pair(4, 2));  // 0.93 < 1.0 - 0.06
  EXPECT_EQ(StopAndBest("val_loss", 2, 0.01, curve), std::make_pair(-1, 4));
}

TEST(EarlyStoppingTest, AucAndAccuracyAreMaximized) {
  EXPECT_TRUE(HigherIsBetter("val_auc"));
  EXPECT_TRUE(HigherIsBetter("val_accuracy"));
  EXPECT_TRUE(HigherIsBetter("val_acc"));
  EXPECT_FALSE(HigherIsBetter("val_logloss"));
  EXPECT_FALSE(HigherIsBetter("val_rmse"));
  const std::vector<double> auc = {0.70, 0.75, 0.74, 0.73, 0.80};
  EXPECT_EQ(StopAndBest("val_auc", 2, 0, auc), std::make_pair(3, 1));
}

TEST(EarlyStoppingTest, NanNeverImproves) {
  EXPECT_EQ(StopAndBest("val_rmse", 2, 0, {1.0, NAN, NAN}), std::make_pair(2, 0));
}

TEST(EarlyStoppingTest, StateRoundTripsForTheSameMonitorOnly) {
  EarlyStoppingOptions o;
  o.monitor = "val_rmse";
  o.patience = 3;
  EarlyStopping a = *EarlyStopping::Create(o);
  a.Observe(0, 0.9123456789012345);
  a.Observe(100, 0.95);
  EarlyStopping b = *EarlyStopping::Create(o);
  b.Restore(a.State());
  EXPECT_EQ(b.best(), 0.9123456789012345);
  EXPECT_EQ(b.best_step(), 0);
  EXPECT_EQ(b.wait(), 1);
  EXPECT_FALSE(b.Observe(200, 0.95).stop);
  EXPECT_TRUE(b.Observe(300, 0.95).stop);  // the wait counted before the checkpoint
  o.monitor = "val_auc";
  EarlyStopping c = *EarlyStopping::Create(o);
  c.Restore(a.State());
  EXPECT_FALSE(c.has_best());
}

TEST(EarlyStoppingTest, BadOptions) {
  EarlyStoppingOptions o;
  EXPECT_FALSE(EarlyStopping::Create(o).ok());
  o.monitor = "val_rmse";
  o.min_delta = -1;
  EXPECT_FALSE(EarlyStopping::Create(o).ok());
  o.min_delta = 0;
  o.patience = -2;
  EXPECT_FALSE(EarlyStopping::Create(o).ok());
}

}  // namespace
}  // namespace pstrain
