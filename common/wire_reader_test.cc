#include "common/wire_reader.h"

#include <algorithm>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {


// field 1: varint 300; field 2: bytes "hello, wire"; field 9: fixed64; field 3: fixed32;
// field 4: empty bytes.
std::string Message() {
  std::string m;
  m += "\x08\xac\x02";
  m += "\x12\x0b" "hello, wire";
  m += "\x49" + std::string(8, 'x');
  m += "\x1d" + std::string(4, 'y');
  m += std::string("\x22\x00", 2);
  return m;
}

TEST(WireReaderTest, ReadsEveryFieldWhereverThePiecesAreCut) {
  const std::string message = Message();
  for (size_t n = 1; n <= message.size(); ++n) {
    const std::vector<absl::string_view> pieces = CutIntoPieces(message, n);
    WireReader reader(&pieces, "test message");
    int field = 0, type = 0;
    uint64_t v = 0;
    ASSERT_TRUE(reader.ReadTag(&field, &type).ok());
    EXPECT_EQ(field, 1);
    EXPECT_EQ(type, 0);
    ASSERT_TRUE(reader.ReadVarint(&v).ok());
    EXPECT_EQ(v, 300u);
    ASSERT_TRUE(reader.ReadTag(&field, &type).ok());
    EXPECT_EQ(field, 2);
    std::vector<absl::string_view> bytes;
    ASSERT_TRUE(reader.ReadBytes(&bytes).ok());
    EXPECT_EQ(JoinPieces(bytes), "hello, wire") << "pieces of " << n;
    EXPECT_EQ(WireReader::SizeOf(bytes), 11u);
    // The views point into the message: nothing was copied.
    for (absl::string_view b : bytes) {
      EXPECT_GE(b.data(), message.data());
      EXPECT_LE(b.data() + b.size(), message.data() + message.size());
    }
    ASSERT_TRUE(reader.ReadTag(&field, &type).ok());
    EXPECT_EQ(field, 9);
    ASSERT_TRUE(reader.Skip(field, type).ok());
    ASSERT_TRUE(reader.ReadTag(&field, &type).ok());
    EXPECT_EQ(field, 3);
    ASSERT_TRUE(reader.Skip(field, type).ok());
    ASSERT_TRUE(reader.ReadTag(&field, &type).ok());
    EXPECT_EQ(field, 4);
    std::string s = "old";
    ASSERT_TRUE(reader.ReadString(&s).ok());
    EXPECT_EQ(s, "");
    EXPECT_TRUE(reader.Done());
  }
}

TEST(WireReaderTest, EmptyPiecesAreSkipped) {
  const std::string a = "\x12\x02" "a", b = "b";
  const std::vector<absl::string_view> pieces = {"", a, "", "", b, ""};
  WireReader reader(&pieces, "test message");
  int field = 0, type = 0;
  ASSERT_TRUE(reader.ReadTag(&field, &type).ok());
  std::string s;
  ASSERT_TRUE(reader.ReadString(&s).ok());
  EXPECT_EQ(s, "ab");
  EXPECT_TRUE(reader.Done());
}

TEST(WireReaderTest, EveryTruncationIsAnErrorNamingTheMessage) {
  const std::string message = Message();
  // Cut after each byte: reading the whole message must fail (except where a field ends).
  const std::vector<size_t> field_ends = {3, 16, 25, 30, 32};
  for (size_t len = 1; len < message.size(); ++len) {
    const std::string cut = message.substr(0, len);
    const std::vector<absl::string_view> pieces = CutIntoPieces(cut, 3);
    WireReader reader(&pieces, "test message");
    absl::Status status;
    while (status.ok() && !reader.Done()) {
      int field = 0, type = 0;
      status = reader.ReadTag(&field, &type);
      if (status.ok()) status = reader.Skip(field, type);
    }
    const bool at_field_end =
        std::find(field_ends.begin(), field_ends.end(), len) != field_ends.end();
    if (at_field_end) {
      EXPECT_TRUE(status.ok()) << len;
    } else {
      ASSERT_FALSE(status.ok()) << len;
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_NE(status.message().find("malformed test message"), std::string::npos)
          << status.message();
    }
  }
}

TEST(WireReaderTest, GroupsAreSkippedAsProtobufSkipsThem) {
  // field 1: a group holding a varint, a nested group 2 and a string; then field 3 = 7.
  const std::string message("\x0b\x08\x05\x13\x10\x01\x14\x1a\x02hi\x0c\x18\x07", 14);
  for (size_t cut = 0; cut <= message.size(); ++cut) {
    const std::vector<absl::string_view> pieces = {absl::string_view(message).substr(0, cut),
                                                   absl::string_view(message).substr(cut)};
    WireReader reader(&pieces, "m");
    int field = 0, type = 0;
    ASSERT_TRUE(reader.ReadTag(&field, &type).ok());
    ASSERT_EQ(type, 3);
    ASSERT_TRUE(reader.Skip(field, type).ok()) << cut;
    ASSERT_TRUE(reader.ReadTag(&field, &type).ok());
    EXPECT_EQ(field, 3);
    uint64_t v = 0;
    ASSERT_TRUE(reader.ReadVarint(&v).ok());
    EXPECT_EQ(v, 7u);
    EXPECT_TRUE(reader.Done());
  }
}

TEST(WireReaderTest, BadTagsAndGroupsAreErrors) {
  int field = 0, type = 0;
  {
    const std::string zero("\x00", 1);  // field number 0
    const std::vector<absl::string_view> pieces = {zero};
    WireReader reader(&pieces, "m");
    EXPECT_EQ(reader.ReadTag(&field, &type).code(), absl::StatusCode::kInvalidArgument);
  }
  {
    const std::string end = "\x0c";  // field 1, end of group, with none open
    const std::vector<absl::string_view> pieces = {end};
    WireReader reader(&pieces, "m");
    ASSERT_TRUE(reader.ReadTag(&field, &type).ok());
    const absl::Status s = reader.Skip(field, type);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("no group open"), std::string::npos) << s.message();
  }
  for (const std::string& unclosed : {std::string("\x0b\x08\x01"), std::string("\x0b\x14")}) {
    const std::vector<absl::string_view> pieces = {unclosed};  // never closed; closed by group 2
    WireReader reader(&pieces, "m");
    ASSERT_TRUE(reader.ReadTag(&field, &type).ok());
    EXPECT_EQ(reader.Skip(field, type).code(), absl::StatusCode::kInvalidArgument);
  }
  {
    std::string deep;  // groups nested one deeper than protobuf's recursion limit
    for (int i = 0; i <= WireReader::kMaxGroupDepth; ++i) deep += "\x0b";
    for (int i = 0; i <= WireReader::kMaxGroupDepth; ++i) deep += "\x0c";
    const std::vector<absl::string_view> pieces = {deep};
    WireReader reader(&pieces, "m");
    ASSERT_TRUE(reader.ReadTag(&field, &type).ok());
    const absl::Status s = reader.Skip(field, type);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("nested"), std::string::npos) << s.message();
  }
  {
    const std::string long_tag("\x88\x80\x80\x80\x80\x01", 6);  // 6 bytes: protobuf refuses it
    const std::vector<absl::string_view> pieces = {long_tag};
    WireReader reader(&pieces, "m");
    EXPECT_EQ(reader.ReadTag(&field, &type).code(), absl::StatusCode::kInvalidArgument);
  }
  {
    // 5 bytes whose last has bits past 32: protobuf keeps the low 32 bits, so does the reader.
    const std::string wide_tag("\xf5\x9a\x92\xfa\x2f", 5);
    const std::vector<absl::string_view> pieces = {wide_tag};
    WireReader reader(&pieces, "m");
    ASSERT_TRUE(reader.ReadTag(&field, &type).ok());
    const uint32_t tag = 0x75u | 0x1au << 7 | 0x12u << 14 | 0x7au << 21 | 0xfu << 28;
    EXPECT_EQ(field, static_cast<int>(tag >> 3));
    EXPECT_EQ(type, 5);
  }
  {
    const std::string long_varint(11, '\xff');
    const std::vector<absl::string_view> pieces = {long_varint};
    WireReader reader(&pieces, "m");
    uint64_t v = 0;
    EXPECT_EQ(reader.ReadVarint(&v).code(), absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace pstrain
