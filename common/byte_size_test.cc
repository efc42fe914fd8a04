#include "common/byte_size.h"

#include "common/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

TEST(ByteSizeTest, NumbersAndBinarySuffixes) {
  EXPECT_EQ(*ParseByteSize("0"), 0);
  EXPECT_EQ(*ParseByteSize("1048576"), 1048576);
  EXPECT_EQ(*ParseByteSize("512K"), 512 * 1024);
  EXPECT_EQ(*ParseByteSize("64m"), int64_t{64} << 20);
  EXPECT_EQ(*ParseByteSize(" 20G "), int64_t{20} << 30);
  EXPECT_EQ(*ParseByteSize("2T"), int64_t{2} << 40);
}

TEST(ByteSizeTest, BadText_InvalidArgumentNamingIt) {
  for (const char* bad : {"", "G", "-5", "1.5G", "12X", "99999999999T"}) {
    EXPECT_THAT(ParseByteSize(bad),
                StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("size in bytes")))
        << bad;
  }
}

}  // namespace
}  // namespace pstrain
