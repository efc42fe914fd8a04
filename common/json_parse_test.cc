#include "common/json_parse.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

TEST(ParseJsonTest, Valid) {
  absl::StatusOr<nlohmann::json> j = ParseJson(R"({"a": [1, 2.5, "x"]})");
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ((*j)["a"][2], "x");
}

TEST(ParseJsonTest, SyntaxErrorNamesThePosition) {
  absl::StatusOr<nlohmann::json> j = ParseJson("{\"a\": }");
  EXPECT_EQ(j.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(j.status().message(), HasSubstr("not valid JSON"));
  EXPECT_THAT(j.status().message(), HasSubstr("column 7"));
}

// Found by tests/fuzz/cluster_spec_fuzz: nlohmann's parser throws for a number past a double's
// range even when asked not to throw, which ended the task.
TEST(ParseJsonTest, NumberOverflowIsAnErrorNotAnException) {
  for (const char* text : {"22E2222", R"({"task": {"index": 1e999}})", "[-1e400]"}) {
    absl::StatusOr<nlohmann::json> j = ParseJson(text);
    EXPECT_EQ(j.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(j.status().message(), HasSubstr("overflow")) << text;
  }
}

TEST(ParseJsonTest, Comments) {
  EXPECT_FALSE(ParseJson("// c\n{}").ok());
  EXPECT_TRUE(ParseJson("// c\n{}", /*ignore_comments=*/true).ok());
}

}  // namespace
}  // namespace pstrain
