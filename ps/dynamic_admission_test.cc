#include "ps/dynamic_admission.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

TEST(AdmissionSketchTest, Off_AdmitsEveryKeyAndReservesNothing) {
  MemoryBudget budget(0);
  AdmissionSketch sketch;
  AdmissionOptions options;
  options.min_count = 1;  // 0 and 1 need no count
  ASSERT_TRUE(sketch.Start(options, &budget, "t").ok());
  EXPECT_FALSE(sketch.on());
  EXPECT_TRUE(sketch.Admits(5, 1));
  sketch.Add(5, 3);
  EXPECT_EQ(sketch.Count(5), 0u);
  EXPECT_EQ(budget.used(), 0);
}

TEST(AdmissionSketchTest, MinCount_AdmitsOnTheSightingThatReachesIt) {
  AdmissionSketch sketch;
  AdmissionOptions options;
  options.min_count = 3;
  ASSERT_TRUE(sketch.Start(options, nullptr, "t").ok());
  ASSERT_TRUE(sketch.on());
  EXPECT_FALSE(sketch.Admits(9, 1));
  sketch.Add(9, 1);
  EXPECT_FALSE(sketch.Admits(9, 1));  // 2 sightings
  EXPECT_TRUE(sketch.Admits(9, 2));   // 1 + 2: this request's two reach it
  sketch.Add(9, 1);
  EXPECT_TRUE(sketch.Admits(9, 1));
  EXPECT_EQ(sketch.Count(9), 2u);
}

TEST(AdmissionSketchTest, NeverUndercounts_SaturatesAt255) {
  AdmissionSketch sketch;
  AdmissionOptions options;
  options.min_count = 2;
  options.sketch_bytes = 64;  // 4 rows of 16: collisions certain
  ASSERT_TRUE(sketch.Start(options, nullptr, "t").ok());
  for (int64_t key = 0; key < 200; ++key) sketch.Add(key, static_cast<uint32_t>(key % 5));
  for (int64_t key = 0; key < 200; ++key) EXPECT_GE(sketch.Count(key), key % 5) << key;
  sketch.Add(1000, 300);
  EXPECT_EQ(sketch.Count(1000), 255u);
}

TEST(AdmissionSketchTest, Probability_DeterministicAndNearTheRate) {
  AdmissionOptions options;
  options.probability = 0.25;
  options.seed = 17;
  AdmissionSketch a, b;
  ASSERT_TRUE(a.Start(options, nullptr, "t").ok());
  ASSERT_TRUE(b.Start(options, nullptr, "t").ok());
  int admitted = 0;
  for (int64_t key = 0; key < 20000; ++key) {
    const bool in = a.Admits(key, 1);
    EXPECT_EQ(in, b.Admits(key, 1)) << key;  // the same draw from (seed, key, sighting)
    admitted += in;
  }
  EXPECT_NEAR(admitted / 20000.0, 0.25, 0.02);
  // More sightings at once: more draws, more admitted.
  int admitted3 = 0;
  for (int64_t key = 0; key < 20000; ++key) admitted3 += a.Admits(key, 3);
  EXPECT_NEAR(admitted3 / 20000.0, 1 - 0.75 * 0.75 * 0.75, 0.02);
}

TEST(AdmissionSketchTest, Start_PastTheBudget_ResourceExhausted) {
  MemoryBudget budget(/*limit_bytes=*/1000);
  AdmissionSketch sketch;
  AdmissionOptions options;
  options.min_count = 2;  // the default 1 MiB sketch
  const absl::Status s = sketch.Start(options, &budget, "shard \"x\"");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(budget.used(), 0);
}

}  // namespace
}  // namespace pstrain
