#include "ps/ps_client.h"

#include <string>
#include <vector>

#include "common/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

std::string Join(const std::vector<absl::string_view>& pieces) {
  std::string out;
  for (absl::string_view p : pieces) out.append(p.data(), p.size());
  return out;
}

// `wire` cut into chunks of `size` bytes (the last may be shorter).
LookupWireReply Chunked(const std::shared_ptr<std::string>& wire, size_t size) {
  std::vector<absl::string_view> chunks;
  for (size_t at = 0; at < wire->size(); at += size) {
    chunks.push_back(absl::string_view(*wire).substr(at, size));
  }
  LookupWireReply reply;
  reply.Set(std::move(chunks), wire);
  return reply;
}

TEST(LookupWireReplyTest, ValuesAcrossAnyChunking_MatchTheParsedResponse) {
  LookupResponse response;
  response.add_values(std::string(300, 'a'));  // a 2-byte varint length
  response.add_values("");
  std::string third;
  for (int i = 0; i < 20000; ++i) third.push_back(static_cast<char>(i * 31));
  response.add_values(third);  // a 3-byte varint length
  auto wire = std::make_shared<std::string>(response.SerializeAsString());
  for (size_t size : {size_t{1}, size_t{2}, size_t{3}, size_t{7}, size_t{301}, size_t{4096},
                      wire->size()}) {
    SCOPED_TRACE(size);
    auto values = Chunked(wire, size).Values();
    ASSERT_TRUE(values.ok()) << values.status();
    ASSERT_EQ(values->size(), 3u);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(Join((*values)[i]), response.values(i)) << i;
  }
  LookupWireReply empty;
  empty.Set({}, nullptr);
  auto none = empty.Values();
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST(LookupWireReplyTest, Malformed_InternalNamingTheProblem) {
  LookupResponse response;
  response.add_values("abcdef");
  const std::string good = response.SerializeAsString();
  auto cut = std::make_shared<std::string>(good.substr(0, good.size() - 2));
  EXPECT_THAT(Chunked(cut, 3).Values(),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("cut short by 2 bytes")));
  auto other_field = std::make_shared<std::string>("\x12\x01x");  // field 2
  EXPECT_THAT(Chunked(other_field, 1).Values(),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("unexpected field 2 (wire type 2)")));
  auto cut_length = std::make_shared<std::string>("\x0a\x80");  // varint never ends
  EXPECT_THAT(Chunked(cut_length, 1).Values(),
              StatusIs(absl::StatusCode::kInternal,
                       HasSubstr("malformed lookup reply: a varint cut short")));
}

}  // namespace
}  // namespace pstrain
