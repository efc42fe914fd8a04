// Reads a CSV file record by record, streaming: plain or gzip-compressed (recognized by its first
// two bytes, 1f 8b; concatenated gzip members are read in turn), in blocks, with memory bounded by
// the longest record (the buffer starts at 1 MiB, or a small range's size, and grows only for a
// longer record). A range of a plain file reads no more than 16 KiB past its end.
//
// The format is RFC 4180's, as spreadsheets and R's write.csv and Python's csv module write it:
//   - fields separated by the delimiter (default ','), records by "\n" or "\r\n"; the last record
//     with or without its line end; blank lines are skipped
//   - a field that starts with '"' is quoted: it ends at the next lone '"', may contain the
//     delimiter and line ends, and "" inside it is one '"'; after the closing quote only the
//     delimiter or the line end may follow (else an error)
//   - a '"' inside an unquoted field is an ordinary character (12" vinyl)
//   - no whitespace is trimmed; a UTF-8 byte order mark at the start of the file is skipped
// Errors name the file and the line the record starts on (an unterminated quoted field, text after
// a closing quote, I/O and decompression failures).
//
// A range of a plain file can be read on its own (CsvRecordOptions::begin / end): how a file is
// split by row ranges across workers. `begin` must be the offset of a record's start (as offset()
// reported it on an earlier pass); the range holds the records that START before `end`. A gzip file
// can't be entered in the middle: with begin > 0 its first `begin` bytes are decompressed and
// skipped.
//
// Not thread-safe; one reader per thread.
#ifndef PSTRAIN_MODELS_DATA_CSV_RECORDS_H_
#define PSTRAIN_MODELS_DATA_CSV_RECORDS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pstrain {
namespace data {

struct CsvRecordOptions {
  // Field separator. Default ','.
  char delimiter = ',';
  // The offset (in the decompressed file) of the first record to read, a record's start. Default 0.
  int64_t begin = 0;
  // Records starting at or after this offset are not read. Default -1: to the end of the file.
  int64_t end = -1;
  // The line number of the record at `begin` (for messages). Default 1.
  int64_t first_line = 1;
};

class CsvRecordReader {
 public:
  // Errors: kNotFound (no such file), kInvalidArgument (a directory, begin < 0, end < begin), other
  // errno-derived codes for I/O failures; each naming the file.
  static absl::StatusOr<std::unique_ptr<CsvRecordReader>> Open(const std::string& path,
                                                                const CsvRecordOptions& options = {});
  ~CsvRecordReader();
  CsvRecordReader(const CsvRecordReader&) = delete;
  CsvRecordReader& operator=(const CsvRecordReader&) = delete;

  // Reads the next record. Returns false at the end of the file (or range). Errors: see the file
  // comment; after an error the reader is at its end.
  absl::StatusOr<bool> Next();

  // The record Next() read: its fields, unquoted; valid until the next call to Next().
  int num_fields() const { return static_cast<int>(fields_.size()); }
  absl::string_view field(int i) const { return fields_[i]; }
  const std::vector<absl::string_view>& fields() const { return fields_; }
  // The line it starts on (1 = the file's first line), and its first byte's offset in the
  // decompressed file; next_offset(): one past its line end (the next record's offset, or a blank
  // line's).
  int64_t line() const { return line_; }
  int64_t offset() const { return offset_; }
  int64_t next_offset() const { return base_ + static_cast<int64_t>(pos_); }

  const std::string& path() const { return path_; }
  bool gzipped() const { return gzip_ != nullptr; }
  // Bytes read from the file so far (compressed bytes for gzip).
  int64_t file_bytes_read() const { return file_bytes_; }

  // "path:line" of the current record, for messages.
  std::string Where() const;

 private:
  struct Gzip;
  CsvRecordReader(std::string path, const CsvRecordOptions& options);
  absl::Status Start();
  // Reads more into the buffer (keeping [pos_, end_)); false at the end of the file.
  absl::StatusOr<bool> Fill();
  absl::StatusOr<int64_t> ReadFile(char* out, int64_t max);
  // Splits the record at [pos_, line_end) without quotes.
  void SplitPlain(const char* begin, const char* end);
  // Parses a record with quotes from pos_; false if it needs more data (then nothing is consumed).
  absl::StatusOr<bool> ParseQuoted();

  const std::string path_;
  const CsvRecordOptions options_;
  int fd_ = -1;
  std::unique_ptr<Gzip> gzip_;
  std::unique_ptr<char[]> buffer_;
  size_t capacity_ = 0;
  size_t pos_ = 0;    // the first unread byte
  size_t end_ = 0;    // one past the last byte in the buffer
  int64_t base_ = 0;  // the file offset of buffer_[0]
  bool eof_ = false;
  bool done_ = false;
  bool bom_checked_ = false;
  int64_t next_line_ = 1;
  int64_t file_bytes_ = 0;
  // The current record.
  std::vector<absl::string_view> fields_;
  std::string unquoted_;  // a quoted record's fields' text
  int64_t line_ = 0;
  int64_t offset_ = 0;
};

// The header of `path`: its first record's fields. Errors: as
// Open, and kInvalidArgument for an empty file.
absl::StatusOr<std::vector<std::string>> ReadCsvHeaderRecord(const std::string& path,
                                                             char delimiter = ',');

}  // namespace data
}  // namespace pstrain

#endif  // PSTRAIN_MODELS_DATA_CSV_RECORDS_H_
