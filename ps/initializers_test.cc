#include "ps/initializers.h"

#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

InitializerDef Def(InitializerDef::Kind kind) {
  InitializerDef d;
  d.set_kind(kind);
  d.set_seed(42);
  d.set_minval(-0.5);
  d.set_maxval(0.5);
  d.set_mean(1.0);
  d.set_stddev(0.1);
  d.set_value(3.0);
  return d;
}

TEST(InitializersTest, SplitFill_SameAsWholeFill) {
  // A ps fills only its rows; the union must equal filling the whole table at once.
  for (auto kind : {InitializerDef::UNIFORM, InitializerDef::NORMAL,
                    InitializerDef::TRUNCATED_NORMAL, InitializerDef::CONSTANT}) {
    std::vector<float> whole(1000), parts(1000);
    InitializeFloat(Def(kind), 0, 1000, whole.data());
    InitializeFloat(Def(kind), 0, 300, parts.data());
    InitializeFloat(Def(kind), 300, 700, parts.data() + 300);
    EXPECT_EQ(whole, parts) << InitializerDef::Kind_Name(kind);
  }
}

TEST(InitializersTest, Distributions_MomentsAndBounds) {
  const int n = 100000;
  std::vector<float> v(n);
  InitializeFloat(Def(InitializerDef::UNIFORM), 0, n, v.data());
  double sum = 0;
  for (float x : v) {
    EXPECT_GE(x, -0.5f);
    EXPECT_LT(x, 0.5f);
    sum += x;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);

  InitializeFloat(Def(InitializerDef::NORMAL), 0, n, v.data());
  double mean = 0, sq = 0;
  for (float x : v) mean += x;
  mean /= n;
  for (float x : v) sq += (x - mean) * (x - mean);
  EXPECT_NEAR(mean, 1.0, 0.005);
  EXPECT_NEAR(std::sqrt(sq / n), 0.1, 0.005);

  InitializeFloat(Def(InitializerDef::TRUNCATED_NORMAL), 0, n, v.data());
  for (float x : v) {
    EXPECT_GE(x, 1.0f - 0.2f - 1e-6f);
    EXPECT_LE(x, 1.0f + 0.2f + 1e-6f);
  }
}

// A dynamic table's rows: the same distributions from a stream of the key's own.
TEST(InitializersTest, ForKey_DistributionsMomentsBoundsAndDeterminism) {
  const int keys = 20000, dim = 5;  // an odd width: the last element of a row uses half a draw
  std::vector<float> v(keys * dim);
  auto fill = [&](InitializerDef::Kind kind) {
    for (int k = 0; k < keys; ++k) {
      InitializeFloatForKey(Def(kind), /*key=*/k * 7919 - 12345, dim, v.data() + k * dim);
    }
  };
  fill(InitializerDef::UNIFORM);
  double sum = 0;
  for (float x : v) {
    EXPECT_GE(x, -0.5f);
    EXPECT_LT(x, 0.5f);
    sum += x;
  }
  EXPECT_NEAR(sum / v.size(), 0.0, 0.01);
  std::vector<float> row(dim);
  InitializeFloatForKey(Def(InitializerDef::UNIFORM), /*key=*/7919 - 12345, dim, row.data());
  EXPECT_EQ(row, std::vector<float>(v.begin() + dim, v.begin() + 2 * dim));  // the same again

  fill(InitializerDef::NORMAL);
  double mean = 0, sq = 0;
  for (float x : v) mean += x;
  mean /= v.size();
  for (float x : v) sq += (x - mean) * (x - mean);
  EXPECT_NEAR(mean, 1.0, 0.005);
  EXPECT_NEAR(std::sqrt(sq / v.size()), 0.1, 0.005);

  fill(InitializerDef::TRUNCATED_NORMAL);
  mean = 0;
  for (float x : v) {
    EXPECT_GE(x, 1.0f - 0.2f - 1e-6f);
    EXPECT_LE(x, 1.0f + 0.2f + 1e-6f);
    mean += x;
  }
  EXPECT_NEAR(mean / v.size(), 1.0, 0.005);

  fill(InitializerDef::CONSTANT);
  for (float x : v) EXPECT_EQ(x, 3.0f);
  std::vector<float> a(dim), b(dim);
  InitializeFloatForKey(Def(InitializerDef::UNIFORM), /*key=*/1, dim, a.data());
  InitializeFloatForKey(Def(InitializerDef::UNIFORM), /*key=*/2, dim, b.data());
  EXPECT_NE(a, b);
}

TEST(InitializersTest, Seeds_DifferentSeedsDifferentValues) {
  std::vector<float> a(16), b(16);
  InitializerDef d = Def(InitializerDef::UNIFORM);
  InitializeFloat(d, 0, 16, a.data());
  d.set_seed(43);
  InitializeFloat(d, 0, 16, b.data());
  EXPECT_NE(a, b);
}

TEST(InitializersTest, Validate_BadParameters_Named) {
  InitializerDef d = Def(InitializerDef::UNIFORM);
  d.set_maxval(-1);
  EXPECT_THAT(std::string(ValidateInitializer(d).message()), HasSubstr("minval < maxval"));
  d = Def(InitializerDef::NORMAL);
  d.set_stddev(0);
  EXPECT_THAT(std::string(ValidateInitializer(d).message()), HasSubstr("stddev > 0"));
  EXPECT_TRUE(ValidateInitializer(Def(InitializerDef::ZEROS)).ok());
}

}  // namespace
}  // namespace pstrain
