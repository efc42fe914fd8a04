// The HTTP/JSON request parser and error bodies of the prediction server's handlers (the handlers
// over a real model are in prediction_server_test.cc): instances become rows with every key as a
// column, numbers keep the text they were written with, and each kind of bad body is named.
#include "serving/prediction_server_handlers.h"

#include <string>

#include "common/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ParsePredictJsonTest, Instances_RowsInFirstSeenColumnOrder_ValuesAsCsvText) {
  absl::StatusOr<RawExamples> got = ParsePredictJson(
      R"({"signature_name": "serving_default", "instances": [
           {"city": "Oslo", "income": 512, "rate": 3.10, "big": 1e3, "neg": -7, "ok": true},
           {"income": 18446744073709551615, "city": null, "extra": "x"},
           {}]})",
      /*max_examples=*/10);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_THAT(got->columns, ElementsAre("city", "income", "rate", "big", "neg", "ok", "extra"));
  ASSERT_EQ(got->rows.size(), 3u);
  EXPECT_THAT(got->rows[0], ElementsAre("Oslo", "512", "3.10", "1e3", "-7", "true"));
  // Absent keys and null are missing fields (empty, or past the row's end).
  EXPECT_THAT(got->rows[1],
              ElementsAre("", "18446744073709551615", "", "", "", "", "x"));
  EXPECT_TRUE(got->rows[2].empty());
}

TEST(ParsePredictJsonTest, EmptyInstances_NoRows) {
  absl::StatusOr<RawExamples> got = ParsePredictJson(R"({"instances": []})", 10);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->rows.empty());
}

TEST(ParsePredictJsonTest, MalformedJson_InvalidArgumentWithParserPosition) {
  EXPECT_THAT(ParsePredictJson(R"({"instances": [{"a": 1},)", 10),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("malformed JSON body"), HasSubstr("column"))));
  EXPECT_THAT(ParsePredictJson("", 10),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("malformed JSON body")));
  EXPECT_THAT(ParsePredictJson(R"({"instances": [{"a": 1e999}]})", 10),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("number overflow")));
  EXPECT_THAT(ParsePredictJson("{\"instances\": [{\"a\": \"\xff\"}]}", 10),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("malformed JSON body")));
}

TEST(ParsePredictJsonTest, WrongShapes_InvalidArgumentNamingWhat) {
  EXPECT_THAT(ParsePredictJson("[1, 2]", 10),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("the body is an array")));
  EXPECT_THAT(ParsePredictJson(R"({"rows": []})", 10),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown key \"rows\"")));
  EXPECT_THAT(ParsePredictJson(R"({"signature_name": "x"})", 10),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no \"instances\"")));
  EXPECT_THAT(ParsePredictJson(R"({"instances": {"a": 1}})", 10),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("\"instances\" is an object, not an array")));
  EXPECT_THAT(ParsePredictJson(R"({"instances": [{"a": 1}, [1]]})", 10),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("instances[1] is an array, not an object")));
  EXPECT_THAT(ParsePredictJson(R"({"instances": [{"a": 1}, {"a": {"b": 2}}]})", 10),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("instances[1]: the value of column \"a\" is an object")));
  EXPECT_THAT(ParsePredictJson(R"({"instances": [{"a": 1, "a": 2}]})", 10),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("instances[0]: column \"a\" is given twice")));
  EXPECT_THAT(ParsePredictJson(R"({"instances": [], "instances": []})", 10),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("given twice")));
  EXPECT_THAT(ParsePredictJson(R"({"signature_name": 3, "instances": []})", 10),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a string")));
}

TEST(ParsePredictJsonTest, MoreInstancesThanLimit_ResourceExhausted) {
  EXPECT_TRUE(ParsePredictJson(R"({"instances": [{}, {}, {}]})", 3).ok());
  EXPECT_THAT(ParsePredictJson(R"({"instances": [{}, {}, {}, {}]})", 3),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("more than 3 instances"), HasSubstr("max_request_examples"))));
}

TEST(HttpErrorsTest, StatusAndBody_PerCode) {
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kUnauthenticated), 401);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kNotFound), 404);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kResourceExhausted), 413);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kUnavailable), 503);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kDataLoss), 500);
  EXPECT_EQ(ErrorJson(absl::InvalidArgumentError("no column \"x\"")),
            R"({"code":"INVALID_ARGUMENT","error":"no column \"x\""})");
  // Bytes from a request that aren't UTF-8 can't break the reply.
  EXPECT_THAT(ErrorJson(absl::NotFoundError("model \xff")), HasSubstr("NOT_FOUND"));
}

}  // namespace
}  // namespace pstrain
