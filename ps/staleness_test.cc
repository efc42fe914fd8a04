#include "ps/staleness.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

TEST(StalenessTrackerTest, OnApply_ReadNoted_GradientsAppliedSinceTheRead) {
  StalenessTracker t;
  t.NoteRead(/*step=*/1, /*version=*/0);
  t.NoteRead(/*step=*/2, /*version=*/0);
  t.NoteRead(/*step=*/3, /*version=*/1);
  EXPECT_EQ(t.OnApply(/*step=*/1, /*version=*/0), 0);  // nothing came between
  EXPECT_EQ(t.OnApply(/*step=*/3, /*version=*/1), 0);
  EXPECT_EQ(t.OnApply(/*step=*/2, /*version=*/2), 2);  // steps 1 and 3 came between
  const StalenessTracker::Summary s = t.summary();
  EXPECT_EQ(s.count, 3);
  EXPECT_DOUBLE_EQ(s.mean, 2.0 / 3);
  EXPECT_EQ(s.p50, 0);
  EXPECT_EQ(s.p99, 2);
  EXPECT_EQ(s.max, 2);
}

TEST(StalenessTrackerTest, OnApply_NoStepOrNoRead_UnknownAndNotCounted) {
  StalenessTracker t;
  EXPECT_EQ(t.OnApply(/*step=*/0, /*version=*/5), -1);
  EXPECT_EQ(t.OnApply(/*step=*/7, /*version=*/5), -1);
  t.NoteRead(/*step=*/8, /*version=*/5);
  EXPECT_EQ(t.OnApply(/*step=*/8, /*version=*/6), 1);
  EXPECT_EQ(t.OnApply(/*step=*/8, /*version=*/7), -1);  // the same gradient again
  const StalenessTracker::Summary s = t.summary();
  EXPECT_EQ(s.count, 1);
  EXPECT_EQ(s.unknown, 2);  // step 0 is not counted as unknown: it never claimed a read
}

TEST(StalenessTrackerTest, NoteRead_SameStepAgain_TheLaterReadCounts) {
  StalenessTracker t;
  t.NoteRead(/*step=*/4, /*version=*/1);
  t.NoteRead(/*step=*/4, /*version=*/9);  // the step ran again after a failure
  EXPECT_EQ(t.OnApply(/*step=*/4, /*version=*/10), 1);
}

TEST(StalenessTrackerTest, NoteRead_PastTheBound_OldestDropped) {
  StalenessTracker t;
  const int64_t n = static_cast<int64_t>(StalenessTracker::kMaxOpenReads) + 10;
  for (int64_t step = 1; step <= n; ++step) t.NoteRead(step, /*version=*/0);
  EXPECT_EQ(t.OnApply(/*step=*/1, /*version=*/3), -1);  // dropped
  EXPECT_EQ(t.OnApply(/*step=*/n, /*version=*/3), 3);
}

TEST(StalenessTrackerTest, Forget_DropsTheRead) {
  StalenessTracker t;
  t.NoteRead(/*step=*/2, /*version=*/0);
  t.Forget(/*step=*/2);
  EXPECT_EQ(t.OnApply(/*step=*/2, /*version=*/1), -1);
}

TEST(StalenessFactorTest, Scalings_FullRateAtZeroAndOne) {
  for (auto s : {OptimizerDef::STALENESS_NONE, OptimizerDef::STALENESS_INVERSE,
                 OptimizerDef::STALENESS_INVERSE_SQRT}) {
    EXPECT_EQ(StalenessFactor(s, -1), 1.0);
    EXPECT_EQ(StalenessFactor(s, 0), 1.0);
    EXPECT_EQ(StalenessFactor(s, 1), 1.0);
  }
  EXPECT_EQ(StalenessFactor(OptimizerDef::STALENESS_NONE, 16), 1.0);
  EXPECT_DOUBLE_EQ(StalenessFactor(OptimizerDef::STALENESS_INVERSE, 16), 1.0 / 16);
  EXPECT_DOUBLE_EQ(StalenessFactor(OptimizerDef::STALENESS_INVERSE_SQRT, 16), 0.25);
}

TEST(StalenessScalingTest, Parse_NamesRoundTrip_UnknownIsAnErrorNamingIt) {
  for (auto s : {OptimizerDef::STALENESS_NONE, OptimizerDef::STALENESS_INVERSE,
                 OptimizerDef::STALENESS_INVERSE_SQRT}) {
    absl::StatusOr<OptimizerDef::StalenessScaling> parsed =
        ParseStalenessScaling(StalenessScalingName(s));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, s);
  }
  absl::StatusOr<OptimizerDef::StalenessScaling> bad = ParseStalenessScaling("linear");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("'linear' is not one of none, inverse"));
}

}  // namespace
}  // namespace pstrain
