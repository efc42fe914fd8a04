#include "common/id_index.h"

#include <algorithm>
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

TEST(IdIndexTest, FindDoesNotInsert) {
  IdIndex index;
  index.Reset(4);
  bool inserted = false;
  index.FindOrInsert(5, 2, &inserted);
  EXPECT_EQ(index.Find(5), 2);
  EXPECT_EQ(index.Find(6), -1);
  EXPECT_EQ(index.FindOrInsert(6, 3, &inserted), 3);
  EXPECT_TRUE(inserted);
}

// What RepeatFinder must return: (first, later) for each later occurrence, in `later` order.
std::vector<std::pair<int64_t, int64_t>> RepeatsOf(const std::vector<int64_t>& ids) {
  std::map<int64_t, int64_t> first;
  std::vector<std::pair<int64_t, int64_t>> repeats;
  for (int64_t i = 0; i < static_cast<int64_t>(ids.size()); ++i) {
    auto [it, fresh] = first.emplace(ids[i], i);
    if (!fresh) repeats.emplace_back(it->second, i);
  }
  return repeats;
}

std::vector<std::pair<int64_t, int64_t>> Found(RepeatFinder& finder,
                                               const std::vector<int64_t>& ids) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const RepeatFinder::Repeat& r :
       finder.Find(reinterpret_cast<const char*>(ids.data()), static_cast<int64_t>(ids.size()))) {
    out.emplace_back(r.first, r.later);
  }
  return out;
}

TEST(RepeatFinderTest, SmallCases) {
  RepeatFinder finder;
  using Pairs = std::vector<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(Found(finder, {}), Pairs{});
  EXPECT_EQ(Found(finder, {7}), Pairs{});
  EXPECT_EQ(Found(finder, {7, 8, 9}), Pairs{});
  EXPECT_EQ(Found(finder, {7, -3, 7, 1LL << 40, -3, 7}), (Pairs{{0, 2}, {1, 4}, {0, 5}}));
  EXPECT_EQ(Found(finder, {4, 4, 4, 4}), (Pairs{{0, 1}, {0, 2}, {0, 3}}));
  EXPECT_EQ(Found(finder, {1, 2}), Pairs{});  // nothing left over from the call before
}

TEST(RepeatFinderTest, RandomBatches_MatchAMap) {
  std::mt19937_64 rng(5);
  RepeatFinder finder;
  for (int batch = 0; batch < 200; ++batch) {
    const int64_t n = static_cast<int64_t>(rng() % 5000);
    // From nearly all distinct to nearly all repeats; also ids that differ only in high bits.
    const int64_t range = 1 + static_cast<int64_t>(rng() % (batch % 2 == 0 ? 100 : 1000000));
    const int shift = batch % 3 == 0 ? 40 : 0;
    std::vector<int64_t> ids(n);
    for (int64_t& id : ids) id = static_cast<int64_t>(rng() % range) << shift;
    ASSERT_EQ(Found(finder, ids), RepeatsOf(ids)) << "batch " << batch;
  }
}

TEST(RepeatFinderTest, SortedBatches_AndSortedUntilALateRepeat) {
  std::mt19937_64 rng(9);
  RepeatFinder finder;
  for (int batch = 0; batch < 100; ++batch) {
    const int64_t n = 2 + static_cast<int64_t>(rng() % 5000);
    std::vector<int64_t> ids(n);
    for (int64_t& id : ids) id = static_cast<int64_t>(rng() % 1000000) - 500000;
    std::sort(ids.begin(), ids.end());
    // Sorted with repeats (equal neighbours), then strictly increasing, then strictly increasing
    // but for one repeat or one step down at the end.
    ASSERT_EQ(Found(finder, ids), RepeatsOf(ids)) << "batch " << batch;
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    if (ids.size() < 2) continue;
    ASSERT_EQ(Found(finder, ids), RepeatsOf(ids)) << "batch " << batch;
    ASSERT_TRUE(Found(finder, ids).empty());
    std::vector<int64_t> late = ids;
    late.push_back(ids[rng() % ids.size()]);
    ASSERT_EQ(Found(finder, late), RepeatsOf(late)) << "batch " << batch;
    ASSERT_FALSE(Found(finder, late).empty());
    late.back() = ids.front() - 1;  // a step down, no repeat
    ASSERT_EQ(Found(finder, late), RepeatsOf(late)) << "batch " << batch;
  }
}

}  // namespace
}  // namespace pstrain
