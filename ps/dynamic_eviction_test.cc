#include "ps/dynamic_eviction.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

TEST(StepClockTest, AdvanceOnlyForward) {
  StepClock clock;
  clock.Advance(10);
  clock.Advance(4);
  EXPECT_EQ(clock.step(), 10);
  EXPECT_EQ(clock.Effective(0), 10u);  // a request without a step takes the shard's
  EXPECT_EQ(clock.Effective(12), 12u);
}

TEST(StepClockTest, Expired_OnlyPastTheTtl_AcrossTheWrapOf32Bits) {
  StepClock none;
  none.Advance(int64_t{1} << 40);
  EXPECT_FALSE(none.Expired(0));  // no TTL: never
  StepClock clock(/*ttl_steps=*/100);
  const int64_t now = (int64_t{1} << 32) + 50;  // the low 32 bits wrapped
  clock.Advance(now);
  EXPECT_FALSE(clock.Expired(static_cast<uint32_t>(now - 100)));
  EXPECT_TRUE(clock.Expired(static_cast<uint32_t>(now - 101)));
  EXPECT_EQ(clock.FullStep(static_cast<uint32_t>(now - 101)), now - 101);
  EXPECT_EQ(clock.FullStep(static_cast<uint32_t>(now + 3)), now + 3);
}

TEST(StepClockTest, SweepDue_EveryEighthOfTheTtl) {
  StepClock clock(/*ttl_steps=*/80);
  int64_t next = 0;
  EXPECT_TRUE(clock.SweepDue(&next));
  EXPECT_EQ(next, 10);
  EXPECT_FALSE(clock.SweepDue(&next));
  clock.Advance(10);
  EXPECT_TRUE(clock.SweepDue(&next));
  EXPECT_EQ(next, 20);
  StepClock none;
  int64_t never = 0;
  EXPECT_FALSE(none.SweepDue(&never));
}

TEST(EvictionTest, Order_OldestThenFewestSightingsThenSmallestKey) {
  std::vector<EvictionCandidate> all = {
      {/*age=*/5, /*count=*/1, /*key=*/10, 0}, {9, 4, 11, 1}, {9, 2, 12, 2},
      {9, 2, 3, 3},                            {1, 0, 1, 4},  {5, 0, 7, 5}};
  EvictionOrder(3, &all);
  std::set<int64_t> first3 = {all[0].key, all[1].key, all[2].key};
  EXPECT_EQ(first3, (std::set<int64_t>{11, 12, 3}));  // the three of age 9
  EvictionOrder(4, &all);
  std::set<int64_t> first4 = {all[0].key, all[1].key, all[2].key, all[3].key};
  EXPECT_EQ(first4, (std::set<int64_t>{11, 12, 3, 7}));  // then age 5 with fewer sightings
  EvictionOrder(2, &all);
  std::set<int64_t> first2 = {all[0].key, all[1].key};
  EXPECT_EQ(first2, (std::set<int64_t>{12, 3}));  // age 9, 2 sightings, before 4 sightings
}

TEST(EvictionTest, Needed_OnlyPastTheCapacity_InBatches) {
  int64_t keep = -7;
  EXPECT_FALSE(EvictionNeeded(/*capacity=*/0, /*held=*/1000, /*inserting=*/10, &keep));
  EXPECT_FALSE(EvictionNeeded(160, 150, 10, &keep));
  EXPECT_EQ(keep, -7);
  ASSERT_TRUE(EvictionNeeded(160, 151, 10, &keep));
  EXPECT_EQ(keep, 160 - 10 - 10);
  ASSERT_TRUE(EvictionNeeded(16, 16, 16, &keep));
  EXPECT_EQ(keep, -1);  // every key goes
}

}  // namespace
}  // namespace pstrain
