#include "ps/row_format.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr RowFormat kFormats[] = {ROW_FLOAT32, ROW_FLOAT16, ROW_BFLOAT16, ROW_INT8};

std::vector<float> RandomRow(std::mt19937_64& rng, int64_t dim, float scale) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> row(static_cast<size_t>(dim));
  for (float& x : row) x = normal(rng);
  return row;
}

std::vector<float> RoundTrip(RowFormat format, const std::vector<float>& row, RoundingBits* bits) {
  const int64_t dim = static_cast<int64_t>(row.size());
  std::string stored(static_cast<size_t>(RowBytes(format, dim)), '\xff');
  EncodeRow(format, row.data(), dim, stored.data(), bits);
  std::vector<float> out(row.size());
  DecodeRow(format, stored.data(), dim, out.data());
  return out;
}

// The largest error a format may make on `x` in a row whose least and greatest values are
// lo and hi: half a step to nearest, a whole step stochastically.
float Bound(RowFormat format, float x, float lo, float hi, bool stochastic) {
  const float steps = stochastic ? 1.0f : 0.5f;
  switch (format) {
    case ROW_FLOAT16:
      // 11 significant bits in the normal range; steps of 2^-24 below 2^-14.
      return steps * std::max(std::fabs(x) * std::ldexp(1.0f, -10), std::ldexp(1.0f, -24));
    case ROW_BFLOAT16:
      return steps * std::fabs(x) * std::ldexp(1.0f, -7);
    case ROW_INT8:
      return steps * (hi - lo) / 255.0f * 1.0001f;
    default:
      return 0.0f;
  }
}

TEST(RowFormatTest, RowBytes_EachFormat_ItsBytesPerElementPaddedToFour) {
  EXPECT_EQ(RowBytes(ROW_FLOAT32, 16), 64);
  EXPECT_EQ(RowBytes(ROW_FLOAT16, 16), 32);
  EXPECT_EQ(RowBytes(ROW_BFLOAT16, 16), 32);
  EXPECT_EQ(RowBytes(ROW_INT8, 16), 24);
  EXPECT_EQ(RowBytes(ROW_FLOAT16, 3), 8);
  EXPECT_EQ(RowBytes(ROW_INT8, 5), 16);
}

TEST(RowFormatTest, ParseSlotFormat_Int8OrUnknown_InvalidArgumentListingTheSlotsFormats) {
  RowFormat f = ROW_FLOAT32;
  ASSERT_TRUE(ParseSlotFormat("float16", &f).ok());
  EXPECT_EQ(f, ROW_FLOAT16);
  for (const char* bad : {"int8", "fp8"}) {
    absl::Status s = ParseSlotFormat(bad, &f);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(s.message()),
                AllOf(HasSubstr("slot format"), HasSubstr(bad),
                      HasSubstr("is not one of float32, float16, bfloat16")))
        << bad;
  }
  EXPECT_EQ(f, ROW_FLOAT16);  // unchanged by the refusals
  EXPECT_FALSE(IsSlotFormat(ROW_INT8));
  EXPECT_FALSE(IsSlotFormat(static_cast<RowFormat>(7)));
}

TEST(RowFormatTest, StoredFormatFor_NarrowInt8Rows_Bfloat16) {
  EXPECT_EQ(StoredFormatFor(ROW_INT8, 1), ROW_BFLOAT16);
  EXPECT_EQ(StoredFormatFor(ROW_INT8, 8), ROW_BFLOAT16);
  EXPECT_EQ(StoredFormatFor(ROW_INT8, 10), ROW_BFLOAT16);  // 20 bytes either way
  EXPECT_EQ(StoredFormatFor(ROW_INT8, 11), ROW_INT8);
  EXPECT_EQ(StoredFormatFor(ROW_INT8, 16), ROW_INT8);
  EXPECT_EQ(StoredFormatFor(ROW_FLOAT16, 1), ROW_FLOAT16);
}

TEST(RowFormatTest, ParseRowFormat_UnknownName_ListsTheFormats) {
  RowFormat f = ROW_FLOAT32;
  ASSERT_TRUE(ParseRowFormat("bfloat16", &f).ok());
  EXPECT_EQ(f, ROW_BFLOAT16);
  absl::Status s = ParseRowFormat("fp8", &f);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("float32, float16, bfloat16, int8"));
}

// Each format's error bound, to nearest and stochastically, on rows of several widths and scales.
TEST(RowFormatTest, RoundTrip_RandomRows_WithinEachFormatsBound) {
  std::mt19937_64 rng(7);
  RoundingBits bits(11);
  for (RowFormat format : kFormats) {
    for (int64_t dim : {1, 3, 8, 16, 33}) {
      for (float scale : {1e-3f, 0.05f, 1.0f, 300.0f}) {
        for (int trial = 0; trial < 20; ++trial) {
          const std::vector<float> row = RandomRow(rng, dim, scale);
          const float lo = *std::min_element(row.begin(), row.end());
          const float hi = *std::max_element(row.begin(), row.end());
          for (bool stochastic : {false, true}) {
            const std::vector<float> back = RoundTrip(format, row, stochastic ? &bits : nullptr);
            for (int64_t k = 0; k < dim; ++k) {
              ASSERT_LE(std::fabs(back[k] - row[k]), Bound(format, row[k], lo, hi, stochastic))
                  << RowFormatName(format) << " dim " << dim << " x " << row[k] << " read "
                  << back[k] << (stochastic ? " stochastic" : " nearest");
            }
            if (format == ROW_INT8) {  // the least and greatest exactly
              EXPECT_EQ(*std::min_element(back.begin(), back.end()), lo);
              EXPECT_EQ(*std::max_element(back.begin(), back.end()), hi);
            }
          }
        }
      }
    }
  }
}

// A stored row read as float32 and stored again is the same row (a checkpoint's float32 rows
// restore exactly), however it was rounded.
TEST(RowFormatTest, StoreAgain_ARowReadBack_SameBytes) {
  std::mt19937_64 rng(3);
  RoundingBits bits(5);
  for (RowFormat format : kFormats) {
    for (int trial = 0; trial < 500; ++trial) {
      const int64_t dim = 1 + trial % 40;
      const std::vector<float> row = RandomRow(rng, dim, trial % 2 == 0 ? 0.01f : 2.0f);
      std::string first(static_cast<size_t>(RowBytes(format, dim)), '\0');
      EncodeRow(format, row.data(), dim, first.data(), trial % 3 == 0 ? nullptr : &bits);
      std::vector<float> read(row.size());
      DecodeRow(format, first.data(), dim, read.data());
      std::string again(first.size(), '\x55');
      EncodeRow(format, read.data(), dim, again.data(), &bits);
      ASSERT_EQ(first, again) << RowFormatName(format) << " dim " << dim;
    }
  }
}

// A row may be stored at, and read into, any address: a lookup's reply buffer and a value read from
// disk are not aligned to a float (ASan's alignment check runs this test).
TEST(RowFormatTest, OddAddresses_StoredAndReadBack_SameAsAligned) {
  std::mt19937_64 rng(11);
  for (RowFormat format : kFormats) {
    for (int64_t dim : {1, 3, 16, 67}) {
      const std::vector<float> row = RandomRow(rng, dim, 1.0f);
      const size_t bytes = static_cast<size_t>(RowBytes(format, dim));
      std::string aligned(bytes, '\0');
      EncodeRow(format, row.data(), dim, aligned.data(), nullptr);
      std::vector<float> expected(row.size());
      DecodeRow(format, aligned.data(), dim, expected.data());
      for (size_t offset : {1, 2, 3}) {
        std::string stored(bytes + offset, '\0');
        EncodeRow(format, row.data(), dim, stored.data() + offset, nullptr);
        ASSERT_EQ(stored.substr(offset), aligned) << RowFormatName(format) << " dim " << dim;
        std::string out(4 * row.size() + offset, '\0');
        DecodeRow(format, stored.data() + offset, dim, out.data() + offset);
        ASSERT_EQ(std::memcmp(out.data() + offset, expected.data(), 4 * row.size()), 0)
            << RowFormatName(format) << " dim " << dim << " offset " << offset;
      }
    }
  }
}

// Every half and bfloat16 value (but NaNs) converts to float32 and back to itself.
TEST(RowFormatTest, SixteenBits_EveryValue_ConvertsBackToItself) {
  for (uint32_t v = 0; v < 65536; ++v) {
    const uint16_t h = static_cast<uint16_t>(v);
    const bool half_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
    const bool half_inf = (h & 0x7fff) == 0x7c00;
    if (!half_nan && !half_inf) {
      ASSERT_EQ(FloatToHalf(HalfToFloat(h), 0x1000), h) << std::hex << v;
      ASSERT_EQ(FloatToHalf(HalfToFloat(h), 0x1fff), h) << std::hex << v;
    }
    const bool bf_special = (h & 0x7f80) == 0x7f80;
    if (!bf_special) {
      ASSERT_EQ(FloatToBfloat16(Bfloat16ToFloat(h), 0x8000), h) << std::hex << v;
      ASSERT_EQ(FloatToBfloat16(Bfloat16ToFloat(h), 0xffff), h) << std::hex << v;
    }
  }
  EXPECT_EQ(HalfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(HalfToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(HalfToFloat(0xc000), -2.0f);
}

TEST(RowFormatTest, NonFinite_NanStaysNanAndInfinitySaturates) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::nanf("");
  EXPECT_EQ(HalfToFloat(FloatToHalf(1e6f, 0x1000)), 65504.0f);
  EXPECT_EQ(HalfToFloat(FloatToHalf(-inf, 0x1000)), -65504.0f);
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(nan, 0x1000))));
  EXPECT_TRUE(std::isfinite(Bfloat16ToFloat(FloatToBfloat16(inf, 0xffff))));
  EXPECT_TRUE(std::isnan(Bfloat16ToFloat(FloatToBfloat16(nan, 0x8000))));
  const std::vector<float> back = RoundTrip(ROW_INT8, {0.5f, nan, 1.0f}, nullptr);
  for (float x : back) EXPECT_TRUE(std::isnan(x));
  const std::vector<float> flat = RoundTrip(ROW_INT8, {0.25f, 0.25f}, nullptr);
  EXPECT_EQ(flat, std::vector<float>({0.25f, 0.25f}));
  // A range of denormals: 255 / range overflows; the row reads its least value, finite.
  const float tiny = std::numeric_limits<float>::denorm_min();
  for (float x : RoundTrip(ROW_INT8, {0.0f, tiny, 2 * tiny}, nullptr)) EXPECT_EQ(x, 0.0f);
}

// Stochastic rounding is unbiased: 20,000 updates of 1e-4 each (a twentieth of float16's step at
// 2, a fortieth of bfloat16's at 0.5, a 150th of INT8's in a row spanning [0, 4]) move the value by
// about 2 (within 4 standard deviations of its random walk), where rounding to nearest drops every
// one of them.
TEST(RowFormatTest, StochasticRounding_SmallUpdates_AddUpWhereNearestDropsThem) {
  RoundingBits bits(17);
  for (RowFormat format : {ROW_FLOAT16, ROW_BFLOAT16, ROW_INT8}) {
    // INT8: the row's other elements hold its least and greatest values at 0 and 4.
    std::vector<float> start = {format == ROW_FLOAT16 ? 2.0f : 0.5f};
    if (format == ROW_INT8) start = {1.0f, 0.0f, 4.0f};
    std::vector<float> nearest = RoundTrip(format, start, nullptr);
    std::vector<float> stochastic = nearest;
    const float first = nearest[0];
    for (int i = 0; i < 20000; ++i) {
      nearest[0] += 1e-4f;
      nearest = RoundTrip(format, nearest, nullptr);
      stochastic[0] += 1e-4f;
      stochastic = RoundTrip(format, stochastic, &bits);
    }
    EXPECT_NEAR(stochastic[0], first + 2.0f, format == ROW_INT8 ? 0.6f : 0.35f)
        << RowFormatName(format);
    EXPECT_EQ(nearest[0], first) << RowFormatName(format);
  }
}

}  // namespace
}  // namespace pstrain
