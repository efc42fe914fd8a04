#include "common/id_index.h"

#include <map>
#include <random>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

TEST(IdIndexTest, FirstPositionsOfRepeatedIds) {
  IdIndex index;
  index.Reset(5);
  const int64_t ids[] = {7, -3, 7, 1LL << 40, -3, 7};
  const int64_t want[] = {0, 1, 0, 3, 1, 0};
  const bool fresh[] = {true, true, false, true, false, false};
  for (int i = 0; i < 6; ++i) {
    bool inserted = false;
    EXPECT_EQ(index.FindOrInsert(ids[i], i, &inserted), want[i]) << i;
    EXPECT_EQ(inserted, fresh[i]) << i;
  }
}

TEST(IdIndexTest, ResetForgetsEverything_AlsoAfterShrinking) {
  IdIndex index;
  bool inserted = false;
  index.Reset(1000);
  for (int64_t id = 0; id < 1000; ++id) index.FindOrInsert(id * 31, id, &inserted);
  index.Reset(3);  // smaller: the old slots must not leak into the new batch
  EXPECT_EQ(index.FindOrInsert(31, 9, &inserted), 9);
  EXPECT_TRUE(inserted);
  index.Reset(1000);
  EXPECT_EQ(index.FindOrInsert(62, 4, &inserted), 4);
  EXPECT_TRUE(inserted);
}

TEST(IdIndexTest, RandomBatches_MatchAMap) {
  std::mt19937_64 rng(3);
  IdIndex index;
  for (int batch = 0; batch < 50; ++batch) {
    const int64_t n = 1 + static_cast<int64_t>(rng() % 3000);
    const int64_t range = 1 + static_cast<int64_t>(rng() % 4000);
    index.Reset(n);
    std::map<int64_t, int64_t> first;
    for (int64_t i = 0; i < n; ++i) {
      // Ids spread over the whole int64 range share low bits: a weak hash would cluster them.
      const int64_t id = static_cast<int64_t>(rng() % range) << 32;
      auto [it, fresh] = first.emplace(id, i);
      bool inserted = false;
      ASSERT_EQ(index.FindOrInsert(id, i, &inserted), it->second);
      ASSERT_EQ(inserted, fresh);
    }
  }
}

}  // namespace
}  // namespace pstrain
