#include "ps/dynamic_export.h"

#include <string>

#include "common/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

TEST(ExportCursorTest, EncodeDecode_RoundTrip) {
  ExportCursor c;
  c.stripe = 5;
  c.record = 123456;
  const std::string bytes = c.Encode();
  EXPECT_EQ(bytes.size(), 8u);
  absl::StatusOr<ExportCursor> back = ExportCursor::Decode(bytes, 8, "t");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->stripe, 5);
  EXPECT_EQ(back->record, 123456u);
}

TEST(ExportCursorTest, Empty_StartsAtTheBeginning) {
  absl::StatusOr<ExportCursor> c = ExportCursor::Decode("", 8, "t");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->stripe, 0);
  EXPECT_EQ(c->record, 0u);
}

TEST(ExportCursorTest, Malformed_InvalidArgumentNamingTheShard) {
  EXPECT_THAT(ExportCursor::Decode("abc", 8, "emb/part_0").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"emb/part_0\"")));
  ExportCursor far;
  far.stripe = 8;
  EXPECT_THAT(ExportCursor::Decode(far.Encode(), 8, "t").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("stripe 8")));
  EXPECT_THAT(ExportCursor::Decode(std::string(8, '\xff'), 8, "t").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("malformed")));
}

}  // namespace
}  // namespace pstrain
