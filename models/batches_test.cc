#include "models/batches.h"

#include <algorithm>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

TEST(EpochBatchesTest, Epoch_VisitsEveryExampleOnce_LastBatchShort) {
  EpochBatches batches(/*num_examples=*/10, /*batch_size=*/4, /*seed=*/7);
  EXPECT_EQ(batches.steps_per_epoch(), 3);
  std::multiset<int64_t> seen;
  for (int64_t step = 3; step < 6; ++step) {  // the second epoch
    std::vector<int64_t> b = batches.Batch(step);
    EXPECT_EQ(b.size(), step == 5 ? 2u : 4u);
    seen.insert(b.begin(), b.end());
  }
  EXPECT_EQ(seen, (std::multiset<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

TEST(FirstEpochStepsTest, Next_EachStepOnceInOrder_ThenNone) {
  FirstEpochSteps steps(/*steps=*/3);
  EXPECT_EQ(steps.Next(), 0);
  EXPECT_EQ(steps.Next(), 1);
  EXPECT_EQ(steps.Next(), 2);
  EXPECT_EQ(steps.Next(), std::nullopt);
  EXPECT_EQ(steps.Next(), std::nullopt);
}

TEST(EpochBatchesTest, SameSeedAndStep_SameBatchAnywhere_EpochsDiffer) {
  EpochBatches a(1000, 32, 3), b(1000, 32, 3), c(1000, 32, 4);
  EXPECT_EQ(a.Batch(40), b.Batch(40));
  EXPECT_NE(a.Batch(40), c.Batch(40));
  EXPECT_NE(a.Batch(0), a.Batch(a.steps_per_epoch()));  // epoch 1 is shuffled anew
}

// A straggler of an old epoch (async training runs closures out of order) after three later
// epochs are cached: its order is made, returned whole, and not kept. (It used to be dropped from
// the cache before it was returned, handing back freed memory.)
TEST(EpochBatchesTest, OldEpochAfterThreeNewerOnes_ReturnsItsWholeOrder) {
  // Two steps per epoch: step 2e is epoch e's first batch.
  EpochBatches batches(/*num_examples=*/500, /*batch_size=*/256, /*seed=*/1);
  EpochBatches fresh(/*num_examples=*/500, /*batch_size=*/256, /*seed=*/1);
  for (int64_t step : {10, 8, 6}) batches.Batch(step);
  for (int round = 0; round < 3; ++round) {
    EXPECT_EQ(batches.Batch(/*step=*/2), fresh.Batch(2));
    EXPECT_EQ(batches.Batch(/*step=*/3), fresh.Batch(3));
  }
}

TEST(ExtraOptionsTest, UnknownKey_FinishNamesIt) {
  ExtraOptions extra("m", {{"l2", "0.5"}, {"colour", "red"}});
  EXPECT_EQ(*extra.GetDouble("l2", 0), 0.5);
  absl::Status s = extra.Finish();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("m has no option colour"));
}

TEST(ExtraOptionsTest, BadNumber_InvalidArgument) {
  ExtraOptions extra("m", {{"shards", "many"}});
  absl::StatusOr<int64_t> v = extra.GetInt("shards", 1);
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(v.status().message(), HasSubstr("shards=many is not an integer"));
}

TEST(ClosureArgsTest, WrongType_NamesClosureAndPosition) {
  std::vector<Tensor> args = {Tensor::Scalar<float>(1.0f), Tensor::String("x")};
  EXPECT_THAT(IntArg(args, 0, "c").status().message(), HasSubstr("argument 0 must be an int64"));
  EXPECT_EQ(*StringArg(args, 1, "c"), "x");
  EXPECT_FALSE(StringArg(args, 2, "c").ok());
}

}  // namespace
}  // namespace pstrain

namespace pstrain {
namespace {

TEST(ReplicaShareTest, SharesAreDisjointCoverTheBatchAndBalanced) {
  const std::vector<int64_t> rows = {10, 11, 12, 13, 14, 15, 16};
  EXPECT_EQ(ReplicaShare(rows, 0, 1), rows);
  EXPECT_EQ(ReplicaShare(rows, 0, 3), (std::vector<int64_t>{10, 13, 16}));
  EXPECT_EQ(ReplicaShare(rows, 1, 3), (std::vector<int64_t>{11, 14}));
  EXPECT_EQ(ReplicaShare(rows, 2, 3), (std::vector<int64_t>{12, 15}));
  EXPECT_TRUE(ReplicaShare({1}, 1, 2).empty());
}

}  // namespace
}  // namespace pstrain
