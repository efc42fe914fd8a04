#include "models/data/csv_records.h"

#include <zlib.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace data {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

std::string WriteFile(const std::string& name, const std::string& contents) {
  const std::string path = TempPath(name);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
  out.close();
  EXPECT_TRUE(out.good()) << path;
  return path;
}

// Gzip members of each part, concatenated.
std::string WriteGzip(const std::string& name, const std::vector<std::string>& members) {
  const std::string path = TempPath(name);
  std::remove(path.c_str());
  for (const std::string& m : members) {
    gzFile f = gzopen(path.c_str(), "ab");
    EXPECT_NE(f, nullptr);
    EXPECT_EQ(gzwrite(f, m.data(), static_cast<unsigned>(m.size())), static_cast<int>(m.size()));
    gzclose(f);
  }
  return path;
}

struct Record {
  std::vector<std::string> fields;
  int64_t line = 0;
  int64_t offset = 0;
};

absl::StatusOr<std::vector<Record>> ReadAll(const std::string& path,
                                            const CsvRecordOptions& options = {}) {
  absl::StatusOr<std::unique_ptr<CsvRecordReader>> r = CsvRecordReader::Open(path, options);
  if (!r.ok()) return r.status();
  std::vector<Record> out;
  while (true) {
    absl::StatusOr<bool> any = (*r)->Next();
    if (!any.ok()) return any.status();
    if (!*any) break;
    Record rec;
    for (absl::string_view f : (*r)->fields()) rec.fields.emplace_back(f);
    rec.line = (*r)->line();
    rec.offset = (*r)->offset();
    out.push_back(std::move(rec));
  }
  return out;
}

std::vector<std::string> Joined(const std::vector<Record>& records) {
  std::vector<std::string> out;
  for (const Record& r : records) out.push_back(absl::StrJoin(r.fields, "|"));
  return out;
}

TEST(CsvRecordReaderTest, PlainRecords_FieldsLinesAndOffsets) {
  const std::string path = WriteFile("plain.csv", "a,b\n1,x\n\n2,\r\n3,z");
  absl::StatusOr<std::vector<Record>> r = ReadAll(path);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(Joined(*r), ElementsAre("a|b", "1|x", "2|", "3|z"));
  ASSERT_EQ(r->size(), 4u);
  EXPECT_EQ((*r)[1].line, 2);
  EXPECT_EQ((*r)[1].offset, 4);
  EXPECT_EQ((*r)[2].line, 4);  // after the blank line
  EXPECT_EQ((*r)[2].offset, 9);
  EXPECT_EQ((*r)[3].line, 5);
}

TEST(CsvRecordReaderTest, QuotedFields_DelimitersNewlinesAndDoubledQuotes) {
  const std::string path = WriteFile(
      "quoted.csv", "\"id\",\"text\"\n1,\"a, b\"\n2,\"two\nlines\"\r\n3,\"say \"\"hi\"\"\"\n"
                    "4,12\" vinyl\n5,\"\"\n6,\"x\"");
  absl::StatusOr<std::vector<Record>> r = ReadAll(path);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(Joined(*r), ElementsAre("id|text", "1|a, b", "2|two\nlines", "3|say \"hi\"",
                                      "4|12\" vinyl", "5|", "6|x"));
  EXPECT_EQ((*r)[2].line, 3);
  EXPECT_EQ((*r)[3].line, 5);  // the record before spans lines 3 and 4
  EXPECT_EQ((*r)[4].line, 6);
}

TEST(CsvRecordReaderTest, ByteOrderMark_Skipped) {
  const std::string path = WriteFile("bom.csv", "\xEF\xBB\xBF\"user\",rating\n1,2\n");
  absl::StatusOr<std::vector<std::string>> header = ReadCsvHeaderRecord(path);
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_THAT(*header, ElementsAre("user", "rating"));
}

TEST(CsvRecordReaderTest, TabDelimiter) {
  const std::string path = WriteFile("tab.tsv", "a\tb\n1,5\t\"x\ty\"\n");
  CsvRecordOptions options;
  options.delimiter = '\t';
  absl::StatusOr<std::vector<Record>> r = ReadAll(path, options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(Joined(*r), ElementsAre("a|b", "1,5|x\ty"));
}

TEST(CsvRecordReaderTest, RecordLongerThanTheBuffer_GrowsIt) {
  const std::string big(3 << 20, 'q');
  const std::string path =
      WriteFile("big.csv", absl::StrCat("a,b\n1,", big, "\n2,\"", big, "\nx\"\n3,y\n"));
  absl::StatusOr<std::vector<Record>> r = ReadAll(path);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 4u);
  EXPECT_EQ((*r)[1].fields[1], big);
  EXPECT_EQ((*r)[2].fields[1], big + "\nx");
  EXPECT_EQ((*r)[3].fields[1], "y");
  EXPECT_EQ((*r)[3].line, 5);
}

// Many records across buffer refills, some quoted over line ends: every split of the file at
// record offsets reads each record exactly once, with its own line number.
TEST(CsvRecordReaderTest, Ranges_EveryRecordInExactlyOneRange) {
  std::string text = "id,v\n";
  for (int i = 0; i < 60000; ++i) {
    absl::StrAppend(&text, i, i % 7 == 0 ? ",\"multi\nline, quoted\"\n" : ",plain\n");
  }
  const std::string path = WriteFile("ranges.csv", text);
  absl::StatusOr<std::vector<Record>> all = ReadAll(path);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 60001u);
  for (int parts : {1, 2, 3, 7}) {
    std::vector<std::string> seen;
    for (int p = 0; p < parts; ++p) {
      const size_t first = all->size() * p / parts, last = all->size() * (p + 1) / parts;
      CsvRecordOptions options;
      options.begin = (*all)[first].offset;
      options.end = last < all->size() ? (*all)[last].offset : -1;
      options.first_line = (*all)[first].line;
      absl::StatusOr<std::vector<Record>> part = ReadAll(path, options);
      ASSERT_TRUE(part.ok()) << part.status();
      ASSERT_EQ(part->size(), last - first) << parts << " " << p;
      for (size_t i = 0; i < part->size(); ++i) {
        EXPECT_EQ((*part)[i].line, (*all)[first + i].line);
        EXPECT_EQ((*part)[i].offset, (*all)[first + i].offset);
      }
      for (const std::string& s : Joined(*part)) seen.push_back(s);
    }
    EXPECT_EQ(seen, Joined(*all)) << parts;
  }
}

TEST(CsvRecordReaderTest, Gzip_SameRecordsAsPlainAcrossMembersAndFromAnOffset) {
  std::string text = "id,v\n";
  for (int i = 0; i < 20000; ++i) absl::StrAppend(&text, i, ",\"x,", i, "\"\n");
  const std::string plain = WriteFile("same.csv", text);
  const size_t half = text.find('\n', text.size() / 2) + 1;
  const std::string gz =
      WriteGzip("same.csv.gz", {text.substr(0, half / 3), text.substr(half / 3)});
  absl::StatusOr<std::vector<Record>> a = ReadAll(plain);
  absl::StatusOr<std::vector<Record>> b = ReadAll(gz);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(Joined(*a), Joined(*b));
  ASSERT_EQ(a->size(), b->size());
  EXPECT_EQ(a->back().offset, b->back().offset);
  // From the middle: the gzip stream is decompressed up to the offset.
  CsvRecordOptions options;
  options.begin = (*a)[12345].offset;
  options.first_line = (*a)[12345].line;
  absl::StatusOr<std::vector<Record>> tail = ReadAll(gz, options);
  ASSERT_TRUE(tail.ok()) << tail.status();
  ASSERT_EQ(tail->size(), a->size() - 12345);
  EXPECT_EQ(tail->front().fields, (*a)[12345].fields);
  EXPECT_EQ(tail->front().line, (*a)[12345].line);
}

TEST(CsvRecordReaderErrorTest, TruncatedGzip_DataLoss) {
  std::string text;
  for (int i = 0; i < 5000; ++i) absl::StrAppend(&text, i, ",abc\n");
  const std::string gz = WriteGzip("trunc.csv.gz", {text});
  std::ifstream in(gz, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string cut = WriteFile("cut.csv.gz", bytes.substr(0, bytes.size() / 2));
  EXPECT_THAT(ReadAll(cut), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("cut.csv.gz")));
  const std::string garbage = WriteFile("garbage.csv.gz", "\x1f\x8b" + std::string(100, 'z'));
  EXPECT_THAT(ReadAll(garbage),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("bad gzip data")));
}

TEST(CsvRecordReaderErrorTest, UnclosedQuote_NamesTheLineItStarts) {
  const std::string path = WriteFile("open.csv", "a,b\n1,2\n3,\"never\nclosed\n");
  EXPECT_THAT(ReadAll(path), StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr("open.csv:3: field 2: a quoted field is not "
                                                "closed before the end of the file")));
}

TEST(CsvRecordReaderErrorTest, TextAfterClosingQuote_NamesIt) {
  const std::string path = WriteFile("after.csv", "a,b\n1,\"x\"y\n");
  EXPECT_THAT(ReadAll(path), StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr("after.csv:2: field 2: text after a closing quote")));
}

TEST(CsvRecordReaderErrorTest, MissingFileDirectoryAndBadRange) {
  EXPECT_THAT(ReadAll(TempPath("nope.csv")),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("nope.csv")));
  const char* dir = std::getenv("TEST_TMPDIR");
  EXPECT_THAT(ReadAll(dir != nullptr ? dir : "/tmp"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is a directory")));
  const std::string path = WriteFile("range.csv", "a\n1\n");
  CsvRecordOptions options;
  options.begin = 5;
  options.end = 2;
  EXPECT_THAT(ReadAll(path, options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bad range")));
}

TEST(CsvRecordReaderErrorTest, EmptyFile_HeaderError) {
  const std::string path = WriteFile("empty.csv", "");
  EXPECT_THAT(ReadCsvHeaderRecord(path),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty file")));
}

}  // namespace
}  // namespace data
}  // namespace pstrain
