// Shared by the device tests: random inputs and an elementwise closeness check.
#ifndef PSTRAIN_WORKER_DEVICE_DEVICE_TEST_UTIL_H_
#define PSTRAIN_WORKER_DEVICE_DEVICE_TEST_UTIL_H_

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pstrain {

// n floats uniform in [lo, hi).
inline std::vector<float> RandomFloats(int64_t n, std::mt19937* rng, float lo = -1, float hi = 1) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(*rng);
  return v;
}

// n indices uniform in [0, limit).
inline std::vector<int32_t> RandomIndex(int64_t n, int64_t limit, std::mt19937* rng) {
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(limit - 1));
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = dist(*rng);
  return v;
}

// Expects |actual - expected| <= tol * (1 + |expected|) elementwise. `expected` holds floats or
// doubles (a braced list is taken as floats).
template <typename Expected = float>
void ExpectNear(const std::vector<float>& actual, const std::vector<Expected>& expected, double tol,
                const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i) {
    ASSERT_NEAR(actual[i], expected[i], tol * (1 + std::fabs(expected[i]))) << what << " at " << i;
  }
}

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_DEVICE_DEVICE_TEST_UTIL_H_
