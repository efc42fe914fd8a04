#include "models/data/csv_reader.h"

#include <cstdlib>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/test_util.h"

namespace pstrain {
namespace data {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Writes `contents` to a new file in the test's temporary folder; returns its path.
std::string WriteFile(const std::string& name, const std::string& contents) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
  out.close();
  EXPECT_TRUE(out.good()) << path;
  return path;
}

TEST(ReadCsvHeaderTest, ReadCsvHeader_File_ReturnsNames) {
  const std::string path = WriteFile("header.csv", "date,delay,origin\n2001-01-01 00:01,3,LAS\n");
  absl::StatusOr<std::vector<std::string>> names = ReadCsvHeader(path);
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_THAT(*names, ElementsAre("date", "delay", "origin"));
}

TEST(ReadCsvHeaderTest, ReadCsvHeader_ByteOrderMark_Stripped) {
  const std::string path = WriteFile("bom.csv", "\xEF\xBB\xBFuserId,rating\n1,2.5\n");
  absl::StatusOr<std::vector<std::string>> names = ReadCsvHeader(path);
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_THAT(*names, ElementsAre("userId", "rating"));
}

TEST(ReadCsvTest, ReadCsv_AllTypes_ParsesValues) {
  const std::string path = WriteFile(
      "types.csv",
      "i32,i64,f,d,s\n"
      "-7,9000000000,3.5,-1e-3,hello world\n"
      "2147483647,-9223372036854775808,inf,0.1,\n");
  std::vector<int32_t> i32;
  std::vector<int64_t> i64;
  std::vector<float> f;
  std::vector<double> d;
  std::vector<std::string> s;
  absl::StatusOr<int64_t> rows =
      ReadCsv(path, {CsvColumn::Int32("i32", &i32), CsvColumn::Int64("i64", &i64),
                     CsvColumn::Float("f", &f), CsvColumn::Double("d", &d),
                     CsvColumn::String("s", &s)});
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(*rows, 2);
  EXPECT_THAT(i32, ElementsAre(-7, 2147483647));
  EXPECT_THAT(i64, ElementsAre(9000000000, INT64_MIN));
  EXPECT_THAT(f, ElementsAre(3.5f, std::numeric_limits<float>::infinity()));
  EXPECT_THAT(d, ElementsAre(-1e-3, 0.1));
  EXPECT_THAT(s, ElementsAre("hello world", ""));
}

TEST(ReadCsvTest, ReadCsv_SomeColumnsInAnyOrder_SkipsTheOthers) {
  const std::string path = WriteFile("order.csv", "a,b,c,d\n1,2,3,4\n5,6,7,8\n");
  std::vector<int32_t> d, b;
  absl::StatusOr<int64_t> rows = ReadCsv(path, {CsvColumn::Int32("d", &d), CsvColumn::Int32("b", &b)});
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(*rows, 2);
  EXPECT_THAT(d, ElementsAre(4, 8));
  EXPECT_THAT(b, ElementsAre(2, 6));
}

TEST(ReadCsvTest, ReadCsv_CrLfBlankLinesAndNoFinalNewline_ReadsRecords) {
  const std::string path = WriteFile("crlf.csv", "x,name\r\n1,a\r\n\r\n\n2,b\r\n3,c");
  std::vector<int64_t> x;
  std::vector<std::string> name;
  absl::StatusOr<int64_t> rows =
      ReadCsv(path, {CsvColumn::Int64("x", &x), CsvColumn::String("name", &name)});
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(*rows, 3);
  EXPECT_THAT(x, ElementsAre(1, 2, 3));
  EXPECT_THAT(name, ElementsAre("a", "b", "c"));
}

TEST(ReadCsvTest, ReadCsv_HeaderOnly_ReadsNoRecords) {
  const std::string path = WriteFile("header_only.csv", "x,y\n");
  std::vector<int64_t> x;
  absl::StatusOr<int64_t> rows = ReadCsv(path, {CsvColumn::Int64("x", &x)});
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(*rows, 0);
  EXPECT_TRUE(x.empty());
}

TEST(ReadCsvTest, ReadCsv_TabDelimiter_SplitsOnTabs) {
  const std::string path = WriteFile("tabs.tsv", "x\ty\n1,5\t2\n");
  std::vector<std::string> x;
  std::vector<int32_t> y;
  CsvOptions options;
  options.delimiter = '\t';
  absl::StatusOr<int64_t> rows =
      ReadCsv(path, {CsvColumn::String("x", &x), CsvColumn::Int32("y", &y)}, options);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_THAT(x, ElementsAre("1,5"));
  EXPECT_THAT(y, ElementsAre(2));
}

TEST(ReadCsvTest, ReadCsv_MaxRows_StopsThere) {
  const std::string path = WriteFile("max_rows.csv", "x\n1\n2\n3\nnot a number\n");
  std::vector<int32_t> x;
  CsvOptions options;
  options.max_rows = 2;
  absl::StatusOr<int64_t> rows = ReadCsv(path, {CsvColumn::Int32("x", &x)}, options);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(*rows, 2);
  EXPECT_THAT(x, ElementsAre(1, 2));
}

TEST(ReadCsvTest, ReadCsv_Category_IdsInOrderOfFirstAppearanceAcrossFiles) {
  const std::string first = WriteFile("cat1.csv", "origin,destination\nLAS,PHL\nATL,LAS\n");
  const std::string second = WriteFile("cat2.csv", "origin\nPHL\nSFO\n");
  std::vector<int32_t> origin, destination, more;
  std::vector<std::string> airports;
  ASSERT_TRUE(ReadCsv(first, {CsvColumn::Category("origin", &origin, &airports),
                              CsvColumn::Category("destination", &destination, &airports)})
                  .ok());
  // Fields are read left to right: LAS=0, PHL=1, ATL=2.
  EXPECT_THAT(origin, ElementsAre(0, 2));
  EXPECT_THAT(destination, ElementsAre(1, 0));
  ASSERT_TRUE(ReadCsv(second, {CsvColumn::Category("origin", &more, &airports)}).ok());
  EXPECT_THAT(more, ElementsAre(1, 3));
  EXPECT_THAT(airports, ElementsAre("LAS", "PHL", "ATL", "SFO"));
}

TEST(ReadCsvTest, ReadCsv_ManyRecordsAcrossBlocks_ReadsAll) {
  // About 7 MiB: more than one 4 MiB read block, so lines straddle block ends.
  std::string contents = "id,value,label\n";
  constexpr int kRows = 400000;
  for (int i = 0; i < kRows; ++i) absl::StrAppend(&contents, i, ",", i, ".5,row", i, "\n");
  const std::string path = WriteFile("many.csv", contents);
  std::vector<int64_t> id;
  std::vector<double> value;
  std::vector<std::string> label;
  absl::StatusOr<int64_t> rows =
      ReadCsv(path, {CsvColumn::Int64("id", &id), CsvColumn::Double("value", &value),
                     CsvColumn::String("label", &label)});
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(*rows, kRows);
  for (int i = 0; i < kRows; ++i) {
    ASSERT_EQ(id[i], i);
    ASSERT_EQ(value[i], i + 0.5);
    ASSERT_EQ(label[i], absl::StrCat("row", i));
  }
}

TEST(ReadCsvTest, ReadCsv_LineLongerThanTheBuffer_GrowsIt) {
  const std::string long_field(5 << 20, 'x');  // 5 MiB, more than the 4 MiB first buffer
  const std::string path = WriteFile("long.csv", absl::StrCat("s,n\n", long_field, ",7\nb,8\n"));
  std::vector<std::string> s;
  std::vector<int32_t> n;
  absl::StatusOr<int64_t> rows = ReadCsv(path, {CsvColumn::String("s", &s), CsvColumn::Int32("n", &n)});
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0], long_field);
  EXPECT_EQ(s[1], "b");
  EXPECT_THAT(n, ElementsAre(7, 8));
}

TEST(ReadCsvErrorTest, ReadCsv_MissingColumn_NamesItTheFileAndTheColumns) {
  const std::string path = WriteFile("missing_column.csv", "date,delay\n2001-01-01 00:01,3\n");
  std::vector<int64_t> v;
  EXPECT_THAT(ReadCsv(path, {CsvColumn::Int64("distance", &v)}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(path), HasSubstr("no column 'distance'"),
                             HasSubstr("(columns: date, delay)"))));
}

TEST(ReadCsvErrorTest, ReadCsv_NoSuchFile_NotFound) {
  const std::string path = absl::StrCat(std::getenv("TEST_TMPDIR"), "/does_not_exist.csv");
  std::vector<int64_t> v;
  EXPECT_THAT(ReadCsv(path, {CsvColumn::Int64("x", &v)}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr(path)));
  EXPECT_THAT(ReadCsvHeader(path), StatusIs(absl::StatusCode::kNotFound, HasSubstr(path)));
}

TEST(ReadCsvErrorTest, ReadCsv_EmptyFile_InvalidArgument) {
  const std::string path = WriteFile("empty.csv", "");
  std::vector<int64_t> v;
  EXPECT_THAT(ReadCsv(path, {CsvColumn::Int64("x", &v)}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(path), HasSubstr("empty file"))));
}

TEST(ReadCsvErrorTest, ReadCsv_BadInteger_NamesFileLineAndColumn) {
  const std::string path = WriteFile("bad_int.csv", "a,b\n1,2\n3,x4\n");
  std::vector<int32_t> a, b;
  EXPECT_THAT(ReadCsv(path, {CsvColumn::Int32("a", &a), CsvColumn::Int32("b", &b)}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(absl::StrCat(path, ":3: column 'b': 'x4' is not an int32"))));
}

TEST(ReadCsvErrorTest, ReadCsv_TrailingGarbageAfterNumber_InvalidArgument) {
  const std::string path = WriteFile("bad_double.csv", "a\n2.5kg\n");
  std::vector<double> a;
  EXPECT_THAT(ReadCsv(path, {CsvColumn::Double("a", &a)}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(":2: column 'a': '2.5kg' is not a double")));
}

TEST(ReadCsvErrorTest, ReadCsv_EmptyNumber_InvalidArgument) {
  const std::string path = WriteFile("empty_number.csv", "a,b\n1,\n");
  std::vector<int64_t> b;
  EXPECT_THAT(ReadCsv(path, {CsvColumn::Int64("b", &b)}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(":2: column 'b': '' is not an int64")));
}

TEST(ReadCsvErrorTest, ReadCsv_Int32OutOfRange_InvalidArgument) {
  const std::string path = WriteFile("int32_range.csv", "a\n2147483648\n");
  std::vector<int32_t> a;
  EXPECT_THAT(ReadCsv(path, {CsvColumn::Int32("a", &a)}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(":2: column 'a': '2147483648' is out of range for an int32")));
}

TEST(ReadCsvErrorTest, ReadCsv_TooFewFields_NamesLine) {
  const std::string path = WriteFile("few.csv", "a,b,c\n1,2,3\n4,5\n");
  std::vector<int32_t> a;
  EXPECT_THAT(ReadCsv(path, {CsvColumn::Int32("a", &a)}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(absl::StrCat(path, ":3: 2 fields, the header has 3"))));
}

TEST(ReadCsvErrorTest, ReadCsv_TooManyFields_NamesLine) {
  const std::string path = WriteFile("many_fields.csv", "a,b\n1,2,3\n");
  std::vector<int32_t> a;
  EXPECT_THAT(ReadCsv(path, {CsvColumn::Int32("a", &a)}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(":2: 3 fields, the header has 2")));
}

TEST(ReadCsvTest, ReadCsv_QuotedFieldsAsRWritesThem_Unquoted) {
  const std::string path = WriteFile(
      "quoted.csv", "\"id\",\"title\",\"rating\"\n1,\"Heat, 1995\",\"4.5\"\n2,\"The \"\"Best\"\"\",3\n");
  std::vector<int32_t> id;
  std::vector<std::string> title;
  std::vector<float> rating;
  absl::StatusOr<int64_t> rows =
      ReadCsv(path, {CsvColumn::Int32("id", &id), CsvColumn::String("title", &title),
                     CsvColumn::Float("rating", &rating)});
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_THAT(id, ElementsAre(1, 2));
  EXPECT_THAT(title, ElementsAre("Heat, 1995", "The \"Best\""));
  EXPECT_THAT(rating, ElementsAre(4.5f, 3.0f));
}

TEST(ReadCsvErrorTest, ReadCsv_UnclosedQuote_NamesTheLine) {
  const std::string path = WriteFile("unclosed.csv", "id,title\n1,x\n2,\"Heat\n");
  std::vector<int32_t> id;
  EXPECT_THAT(ReadCsv(path, {CsvColumn::Int32("id", &id)}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unclosed.csv:3: field 2: a quoted field is not closed")));
}

TEST(ReadCsvErrorTest, ReadCsv_ColumnAskedForTwice_InvalidArgument) {
  const std::string path = WriteFile("twice.csv", "a\n1\n");
  std::vector<int32_t> a1, a2;
  EXPECT_THAT(ReadCsv(path, {CsvColumn::Int32("a", &a1), CsvColumn::Int32("a", &a2)}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("column 'a' asked for twice")));
}

TEST(ReadCsvErrorTest, ReadCsv_HeaderNamesColumnTwice_InvalidArgument) {
  const std::string path = WriteFile("dup_header.csv", "a,b,a\n1,2,3\n");
  std::vector<int32_t> a, b;
  EXPECT_THAT(ReadCsv(path, {CsvColumn::Int32("a", &a)}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("the header names column 'a' twice (fields 1 and 3)")));
  // Columns named once are still readable.
  EXPECT_TRUE(ReadCsv(path, {CsvColumn::Int32("b", &b)}).ok());
}

TEST(ReadCsvErrorTest, ReadCsv_NullOutput_InvalidArgument) {
  const std::string path = WriteFile("null_out.csv", "a\n1\n");
  std::vector<int32_t> ids;
  EXPECT_THAT(ReadCsv(path, {CsvColumn::Int32("a", nullptr)}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("column 'a' has a null output vector")));
  EXPECT_THAT(ReadCsv(path, {CsvColumn::Category("a", &ids, /*vocabulary=*/nullptr)}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("column 'a' has a null output vector")));
}

}  // namespace
}  // namespace data
}  // namespace pstrain
