#include "trainer/event_writer.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/crc32c.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

// 2023-11-14T22:13:20.25Z.
const absl::Time kTime = absl::FromUnixSeconds(1700000000) + absl::Milliseconds(250);

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string Hex(const std::string& bytes) {
  std::string out;
  for (unsigned char c : bytes) absl::StrAppend(&out, absl::Hex(c, absl::kZeroPad2));
  return out;
}

class EventWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    logdir_ = absl::StrCat(::testing::TempDir(), "/",
                           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(logdir_);
  }

  // Options with a fixed clock and host name.
  EventWriterOptions FakeOptions() {
    EventWriterOptions options;
    options.clock = [] { return kTime; };
    options.hostname = "testhost";
    return options;
  }

  std::string logdir_;
};

TEST_F(EventWriterTest, Create_NestedLogdir_CreatesDirAndFileWithVersionRecord) {
  const std::string logdir = absl::StrCat(logdir_, "/a/b/c");
  absl::StatusOr<std::unique_ptr<EventWriter>> writer = EventWriter::Create(logdir, FakeOptions());
  ASSERT_TRUE(writer.ok()) << writer.status();
  EXPECT_EQ((*writer)->path(), absl::StrCat(logdir, "/events.out.tfevents.1700000000.testhost"));

  absl::StatusOr<std::vector<tensorflow::Event>> events = ReadEventFile((*writer)->path());
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].file_version(), "brain.Event:2");
  EXPECT_EQ((*events)[0].wall_time(), 1700000000.25);
  EXPECT_EQ((*events)[0].step(), 0);
}

TEST_F(EventWriterTest, Create_DefaultOptions_NamedWithNowAndHostname) {
  const int64_t before = absl::ToUnixSeconds(absl::Now());
  absl::StatusOr<std::unique_ptr<EventWriter>> writer = EventWriter::Create(logdir_);
  ASSERT_TRUE(writer.ok()) << writer.status();
  const int64_t after = absl::ToUnixSeconds(absl::Now());
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof(host) - 1), 0);

  const std::string name = std::filesystem::path((*writer)->path()).filename().string();
  bool matched = false;
  for (int64_t t = before; t <= after; ++t) {
    matched |= name == absl::StrCat("events.out.tfevents.", t, ".", host);
  }
  EXPECT_TRUE(matched) << name;
}

TEST_F(EventWriterTest, Create_SameSecondTwice_SecondFileGetsSuffix) {
  absl::StatusOr<std::unique_ptr<EventWriter>> first = EventWriter::Create(logdir_, FakeOptions());
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<std::unique_ptr<EventWriter>> second =
      EventWriter::Create(logdir_, FakeOptions());
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ((*second)->path(), absl::StrCat((*first)->path(), ".1"));
  ASSERT_TRUE((*first)->WriteScalar("loss", /*step=*/1, /*value=*/2.0f).ok());
  ASSERT_TRUE((*first)->Close().ok());
  // The first file was not overwritten by the second writer.
  absl::StatusOr<std::vector<tensorflow::Event>> events = ReadEventFile((*first)->path());
  ASSERT_TRUE(events.ok()) << events.status();
  EXPECT_EQ(events->size(), 2u);
}

TEST_F(EventWriterTest, Create_LogdirUnderAFile_FailedPreconditionNamingPath) {
  std::filesystem::create_directories(logdir_);
  const std::string blocker = absl::StrCat(logdir_, "/blocker");
  WriteBytes(blocker, "not a directory");
  const std::string logdir = absl::StrCat(blocker, "/sub");
  absl::StatusOr<std::unique_ptr<EventWriter>> writer = EventWriter::Create(logdir, FakeOptions());
  EXPECT_EQ(writer.status().code(), absl::StatusCode::kFailedPrecondition) << writer.status();
  EXPECT_THAT(std::string(writer.status().message()), HasSubstr(logdir));
}

TEST_F(EventWriterTest, WriteScalar_SeveralThenClose_ReadBackInOrder) {
  absl::StatusOr<std::unique_ptr<EventWriter>> writer = EventWriter::Create(logdir_, FakeOptions());
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->WriteScalar("loss", /*step=*/1, /*value=*/2.5f).ok());
  ASSERT_TRUE((*writer)->WriteScalar("train/accuracy", /*step=*/1, /*value=*/0.0f).ok());
  ASSERT_TRUE((*writer)->WriteScalar("loss", /*step=*/1000000000000, /*value=*/-1e-3f).ok());
  ASSERT_TRUE((*writer)->Close().ok());

  absl::StatusOr<std::vector<tensorflow::Event>> events = ReadEventFile((*writer)->path());
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 4u);
  struct Expected {
    std::string tag;
    int64_t step;
    float value;
  };
  const Expected expected[] = {
      {"loss", 1, 2.5f}, {"train/accuracy", 1, 0.0f}, {"loss", 1000000000000, -1e-3f}};
  for (int i = 0; i < 3; ++i) {
    const tensorflow::Event& event = (*events)[i + 1];
    SCOPED_TRACE(event.DebugString());
    EXPECT_EQ(event.wall_time(), 1700000000.25);
    EXPECT_EQ(event.step(), expected[i].step);
    ASSERT_TRUE(event.has_summary());
    ASSERT_EQ(event.summary().value_size(), 1);
    EXPECT_EQ(event.summary().value(0).tag(), expected[i].tag);
    // A zero is still present: simple_value sits in a oneof, as in TensorFlow.
    EXPECT_TRUE(event.summary().value(0).has_simple_value());
    EXPECT_EQ(event.summary().value(0).simple_value(), expected[i].value);
  }
}

TEST_F(EventWriterTest, WriteScalar_OneRecord_FramingMatchesTensorFlowByteForByte) {
  absl::StatusOr<std::unique_ptr<EventWriter>> writer = EventWriter::Create(logdir_, FakeOptions());
  ASSERT_TRUE(writer.ok()) << writer.status();
  const size_t version_record_bytes = ReadBytes((*writer)->path()).size();
  ASSERT_TRUE((*writer)->WriteScalar("loss", /*step=*/7, /*value=*/0.5f).ok());
  ASSERT_TRUE((*writer)->Flush().ok());
  const std::string record = ReadBytes((*writer)->path()).substr(version_record_bytes);

  // Event{wall_time: 1700000000.25, step: 7, summary {value {tag: "loss" simple_value: 0.5}}},
  // encoded by hand from TensorFlow's field numbers (wall_time=1 fixed64, step=2 varint,
  // summary=5, Summary.value=1, Value.tag=1, Value.simple_value=2 fixed32), and the two masked
  // CRC-32Cs computed independently (a bitwise CRC in Python).
  const std::string expected_event_hex =
      "0900001040fc54d941"  // wall_time
      "1007"                // step
      "2a0d"                // summary, 13 bytes
      "0a0b"                //   value, 11 bytes
      "0a046c6f7373"        //     tag "loss"
      "150000003f";         //     simple_value 0.5f
  const std::string expected_hex = absl::StrCat("1a00000000000000",  // length 26
                                                "129bd82d",          // masked CRC of the length
                                                expected_event_hex,
                                                "f8ed4b36");  // masked CRC of the data
  EXPECT_EQ(Hex(record), expected_hex);

  // The same CRCs through common/crc32c.
  const std::string data = record.substr(12, 26);
  EXPECT_EQ(crc32c::Mask(crc32c::Value(record.data(), 8)), 0x2dd89b12u);
  EXPECT_EQ(crc32c::Mask(crc32c::Value(data)), 0x364bedf8u);
}

TEST_F(EventWriterTest, Event_TextDump_MatchesTensorFlowNames) {
  tensorflow::Event event;
  event.set_wall_time(1.5);
  event.set_step(3);
  tensorflow::Summary::Value* value = event.mutable_summary()->add_value();
  value->set_tag("loss");
  value->set_simple_value(0.25f);
  std::string text;
  ASSERT_TRUE(google::protobuf::TextFormat::PrintToString(event, &text));
  EXPECT_EQ(text,
            "wall_time: 1.5\n"
            "step: 3\n"
            "summary {\n"
            "  value {\n"
            "    tag: \"loss\"\n"
            "    simple_value: 0.25\n"
            "  }\n"
            "}\n");
  EXPECT_EQ(tensorflow::Event::descriptor()->full_name(), "tensorflow.Event");
  EXPECT_EQ(tensorflow::Summary::Value::descriptor()->full_name(), "tensorflow.Summary.Value");
}

TEST_F(EventWriterTest, Flush_BufferedWrites_VisibleOnlyAfterFlush) {
  absl::StatusOr<std::unique_ptr<EventWriter>> writer = EventWriter::Create(logdir_, FakeOptions());
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->WriteScalar("loss", /*step=*/1, /*value=*/1.0f).ok());
  absl::StatusOr<std::vector<tensorflow::Event>> events = ReadEventFile((*writer)->path());
  ASSERT_TRUE(events.ok()) << events.status();
  EXPECT_EQ(events->size(), 1u);  // only the version record so far

  ASSERT_TRUE((*writer)->Flush().ok());
  events = ReadEventFile((*writer)->path());
  ASSERT_TRUE(events.ok()) << events.status();
  EXPECT_EQ(events->size(), 2u);
}

TEST_F(EventWriterTest, WriteScalar_ZeroBuffer_WrittenAtOnce) {
  EventWriterOptions options = FakeOptions();
  options.buffer_bytes = 0;
  absl::StatusOr<std::unique_ptr<EventWriter>> writer = EventWriter::Create(logdir_, options);
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->WriteScalar("loss", /*step=*/1, /*value=*/1.0f).ok());
  absl::StatusOr<std::vector<tensorflow::Event>> events = ReadEventFile((*writer)->path());
  ASSERT_TRUE(events.ok()) << events.status();
  EXPECT_EQ(events->size(), 2u);
}

TEST_F(EventWriterTest, WriteScalar_TagNotUtf8_InvalidArgumentAndFileStillReadable) {
  EventWriterOptions options = FakeOptions();
  options.buffer_bytes = 0;
  absl::StatusOr<std::unique_ptr<EventWriter>> writer = EventWriter::Create(logdir_, options);
  ASSERT_TRUE(writer.ok()) << writer.status();
  const absl::Status bad = (*writer)->WriteScalar("loss\xf2\xf2", /*step=*/1, /*value=*/1.0f);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.message()), HasSubstr("loss\\xf2\\xf2"));
  ASSERT_TRUE((*writer)->WriteScalar("val/\xc3\xa9t\xc3\xa9", /*step=*/2, /*value=*/3.0f).ok());
  absl::StatusOr<std::vector<tensorflow::Event>> events = ReadEventFile((*writer)->path());
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 2u);
  EXPECT_EQ((*events)[1].summary().value(0).tag(), "val/\xc3\xa9t\xc3\xa9");
}

TEST_F(EventWriterTest, Destructor_PendingWrites_Flushed) {
  std::string path;
  {
    absl::StatusOr<std::unique_ptr<EventWriter>> writer =
        EventWriter::Create(logdir_, FakeOptions());
    ASSERT_TRUE(writer.ok()) << writer.status();
    path = (*writer)->path();
    ASSERT_TRUE((*writer)->WriteScalar("loss", /*step=*/1, /*value=*/1.0f).ok());
  }
  absl::StatusOr<std::vector<tensorflow::Event>> events = ReadEventFile(path);
  ASSERT_TRUE(events.ok()) << events.status();
  EXPECT_EQ(events->size(), 2u);
}

TEST_F(EventWriterTest, WriteScalar_AfterClose_FailedPrecondition) {
  absl::StatusOr<std::unique_ptr<EventWriter>> writer = EventWriter::Create(logdir_, FakeOptions());
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->Close().ok());
  EXPECT_TRUE((*writer)->Close().ok());
  absl::Status status = (*writer)->WriteScalar("loss", /*step=*/1, /*value=*/1.0f);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr((*writer)->path()));
  EXPECT_EQ((*writer)->Flush().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(EventWriterTest, WriteScalar_ConcurrentWriters_EveryRecordIntact) {
  EventWriterOptions options = FakeOptions();
  options.buffer_bytes = 100;  // many small writes interleaving with appends
  absl::StatusOr<std::unique_ptr<EventWriter>> writer = EventWriter::Create(logdir_, options);
  ASSERT_TRUE(writer.ok()) << writer.status();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        ASSERT_TRUE((*writer)->WriteScalar(absl::StrCat("thread", t), i, 1.0f * i).ok());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  ASSERT_TRUE((*writer)->Close().ok());
  absl::StatusOr<std::vector<tensorflow::Event>> events = ReadEventFile((*writer)->path());
  ASSERT_TRUE(events.ok()) << events.status();
  EXPECT_EQ(events->size(), 1u + 4 * 200);
}

class ReadEventFileTest : public EventWriterTest {
 protected:
  // Writes the version record and two scalars; returns the file's bytes and sets the offset of
  // the second record (the first scalar).
  std::string WriteSample(size_t* second_record_offset) {
    absl::StatusOr<std::unique_ptr<EventWriter>> writer =
        EventWriter::Create(logdir_, FakeOptions());
    EXPECT_TRUE(writer.ok()) << writer.status();
    if (!writer.ok()) return "";
    *second_record_offset = ReadBytes((*writer)->path()).size();
    EXPECT_TRUE((*writer)->WriteScalar("loss", /*step=*/1, /*value=*/0.5f).ok());
    EXPECT_TRUE((*writer)->WriteScalar("loss", /*step=*/2, /*value=*/0.25f).ok());
    EXPECT_TRUE((*writer)->Close().ok());
    return ReadBytes((*writer)->path());
  }
};

TEST_F(ReadEventFileTest, ReadEventFile_AnyFlippedByte_DataLossAtRecordOffset) {
  size_t offset = 0;
  const std::string good = WriteSample(&offset);
  ASSERT_FALSE(good.empty());
  const size_t record_bytes = 12 + 26 + 4;  // "loss", step 1, 0.5f: as in the framing test
  const std::string corrupt_path = absl::StrCat(logdir_, "/corrupt");
  for (size_t i = offset; i < offset + record_bytes; ++i) {
    std::string bad = good;
    bad[i] ^= 0x10;
    WriteBytes(corrupt_path, bad);
    absl::StatusOr<std::vector<tensorflow::Event>> events = ReadEventFile(corrupt_path);
    ASSERT_EQ(events.status().code(), absl::StatusCode::kDataLoss) << "byte " << i;
    const std::string message(events.status().message());
    EXPECT_THAT(message, HasSubstr(corrupt_path));
    EXPECT_THAT(message, HasSubstr(absl::StrCat("record at offset ", offset)));
    EXPECT_THAT(message, HasSubstr(i < offset + 12 ? "length CRC mismatch" : "data CRC mismatch"))
        << "byte " << i;
  }
}

TEST_F(ReadEventFileTest, ReadEventFile_TruncatedLastRecord_DataLoss) {
  size_t offset = 0;
  const std::string good = WriteSample(&offset);
  ASSERT_FALSE(good.empty());
  const size_t last_offset = offset + 12 + 26 + 4;
  const std::string cut_path = absl::StrCat(logdir_, "/cut");
  for (size_t cut : {last_offset + 5, last_offset + 12, good.size() - 1}) {
    WriteBytes(cut_path, good.substr(0, cut));
    absl::StatusOr<std::vector<tensorflow::Event>> events = ReadEventFile(cut_path);
    ASSERT_EQ(events.status().code(), absl::StatusCode::kDataLoss) << "cut at " << cut;
    EXPECT_THAT(std::string(events.status().message()),
                HasSubstr(absl::StrCat("truncated")));
    EXPECT_THAT(std::string(events.status().message()),
                HasSubstr(absl::StrCat("offset ", last_offset)));
  }
  // Cut exactly between records: a shorter, valid file.
  WriteBytes(cut_path, good.substr(0, last_offset));
  absl::StatusOr<std::vector<tensorflow::Event>> events = ReadEventFile(cut_path);
  ASSERT_TRUE(events.ok()) << events.status();
  EXPECT_EQ(events->size(), 2u);
}

TEST_F(ReadEventFileTest, ReadEventFile_GoodCrcsButNotAnEvent_DataLoss) {
  std::filesystem::create_directories(logdir_);
  const std::string data = "\xff\xff\xff";  // field 31, wire type 7: invalid
  std::string record;
  for (int i = 0; i < 8; ++i) record.push_back(i == 0 ? static_cast<char>(data.size()) : '\0');
  auto append32 = [&record](uint32_t v) {
    for (int i = 0; i < 4; ++i) record.push_back(static_cast<char>(v >> (8 * i)));
  };
  append32(crc32c::Mask(crc32c::Value(record.data(), 8)));
  record += data;
  append32(crc32c::Mask(crc32c::Value(data)));
  const std::string path = absl::StrCat(logdir_, "/garbage");
  WriteBytes(path, record);
  absl::StatusOr<std::vector<tensorflow::Event>> events = ReadEventFile(path);
  EXPECT_EQ(events.status().code(), absl::StatusCode::kDataLoss) << events.status();
  EXPECT_THAT(std::string(events.status().message()), HasSubstr("not an Event"));
}

TEST_F(ReadEventFileTest, ReadEventFile_MissingFile_NotFoundNamingPath) {
  const std::string path = absl::StrCat(logdir_, "/no/such/file");
  absl::StatusOr<std::vector<tensorflow::Event>> events = ReadEventFile(path);
  EXPECT_EQ(events.status().code(), absl::StatusCode::kNotFound) << events.status();
  EXPECT_THAT(std::string(events.status().message()), HasSubstr(path));
}

TEST_F(ReadEventFileTest, ReadEventFile_EmptyFile_NoEvents) {
  std::filesystem::create_directories(logdir_);
  const std::string path = absl::StrCat(logdir_, "/empty");
  WriteBytes(path, "");
  absl::StatusOr<std::vector<tensorflow::Event>> events = ReadEventFile(path);
  ASSERT_TRUE(events.ok()) << events.status();
  EXPECT_TRUE(events->empty());
}

}  // namespace
}  // namespace pstrain
