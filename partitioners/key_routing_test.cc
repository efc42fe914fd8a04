#include "partitioners/key_routing.h"

#include <map>
#include <vector>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

// The documented formulas, pinned to values computed by hand from SplitMix64 and FNV-1a, so that a
// change to either (which would re-route every saved key) fails here.
TEST(KeyRoutingTest, MixAndStringKeys_AreTheDocumentedFunctions) {
  EXPECT_EQ(MixKey(0), 0xe220a8397b1dcdafULL);  // SplitMix64's first output from seed 0
  EXPECT_EQ(KeyOfString(""), static_cast<int64_t>(MixKey(static_cast<int64_t>(0xcbf29ce484222325ULL))));
  EXPECT_NE(KeyOfString("a"), KeyOfString("b"));
  EXPECT_EQ(KeyOfString("user_42"), KeyOfString("user_42"));
}

TEST(KeyRoutingTest, ShardOfKey_IsTheRangeOfItsRoutingHash) {
  for (int n : {1, 2, 3, 7, 64}) {
    for (int64_t key = -1000; key < 1000; ++key) {
      const int shard = ShardOfKey(key, n);
      ASSERT_GE(shard, 0);
      ASSERT_LT(shard, n);
      const auto [lo, hi] = RoutingHashRange(shard, n);
      EXPECT_GE(RoutingHash(key), lo) << key << " of " << n;
      EXPECT_LT(RoutingHash(key), hi) << key << " of " << n;
    }
    // The ranges tile [0, 2^32).
    uint64_t next = 0;
    for (int i = 0; i < n; ++i) {
      const auto [lo, hi] = RoutingHashRange(i, n);
      EXPECT_EQ(lo, next);
      next = hi;
    }
    EXPECT_EQ(next, uint64_t{1} << 32);
  }
}

// Structured ids (all multiples of 1000, as ids with a type in their low digits often are) spread
// evenly, where key % n would put them all on a few shards.
TEST(KeyRoutingTest, StructuredIds_SpreadEvenly) {
  const int n = 8;
  std::vector<int> count(n);
  for (int64_t i = 0; i < 80000; ++i) ++count[ShardOfKey(i * 1000, n)];
  for (int c : count) {
    EXPECT_GT(c, 9400);
    EXPECT_LT(c, 10600);
  }
}

}  // namespace
}  // namespace pstrain
