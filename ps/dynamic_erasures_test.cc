#include "ps/dynamic_erasures.h"

#include <cstdint>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

TEST(ErasureLogTest, Since_OnlyLaterGenerationsAndKeysNotHeldAgain) {
  ErasureLog log;
  log.Add(1, /*generation=*/1);
  log.Add(2, 2);
  log.Add(3, 3);
  log.Add(4, 3);
  std::vector<int64_t> keys;
  log.Since(/*since=*/1, [](int64_t key) { return key == 4; }, &keys);  // 4 stored again
  EXPECT_EQ(keys, (std::vector<int64_t>{2, 3}));
}

TEST(ErasureLogTest, ForgetThrough_DropsOldGenerationsOnly) {
  ErasureLog log;
  for (int64_t k = 0; k < 10; ++k) log.Add(k, static_cast<uint32_t>(k % 4));
  EXPECT_GT(log.bytes(), 0);
  log.ForgetThrough(2);
  std::vector<int64_t> keys;
  log.Since(0, [](int64_t) { return false; }, &keys);
  EXPECT_EQ(keys, (std::vector<int64_t>{3, 7}));
}

}  // namespace
}  // namespace pstrain
