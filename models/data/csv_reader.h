// Reads columns of a CSV file (a header line, then one record per line) into column vectors.
//
//   std::vector<int64_t> delay;
//   std::vector<std::string> origin;
//   ASSIGN_OR_RETURN(int64_t rows,
//                    ReadCsv("data/flights/flights.csv", {CsvColumn::Int64("delay", &delay),
//                                                        CsvColumn::String("origin", &origin)}));
//
// Columns are picked by their header name, in any order; the other columns are skipped. The file is
// streamed once (models/data/csv_records.h: plain or gzip, RFC 4180 quoting), and numbers are parsed
// with std::from_chars (the 3M-row flights file, five columns, reads in about a second with -c opt).
// Every record must have as many fields as the header.
//
// Stateless functions: safe to call from several threads at once (on different output vectors).
#ifndef PSTRAIN_MODELS_DATA_CSV_READER_H_
#define PSTRAIN_MODELS_DATA_CSV_READER_H_

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace pstrain {
namespace data {

// One column to read: its header name and where its values go (appended, one per record).
// Build with the factories; the output vector must outlive the ReadCsv call.
class CsvColumn {
 public:
  enum class Type { kInt32, kInt64, kFloat, kDouble, kString, kCategory };

  // Integers in decimal, optional leading '-'; a value out of range is an error.
  static CsvColumn Int32(std::string name, std::vector<int32_t>* out);
  static CsvColumn Int64(std::string name, std::vector<int64_t>* out);
  // Decimal or scientific notation ("3.5", "-1e-3"); also "inf" and "nan".
  static CsvColumn Float(std::string name, std::vector<float>* out);
  static CsvColumn Double(std::string name, std::vector<double>* out);
  // The field as it is (may be empty).
  static CsvColumn String(std::string name, std::vector<std::string>* out);
  // Dictionary-encoded strings: `ids` gets one id per record, `vocabulary[id]` is its string. Ids are
  // given in order of first appearance (fields read left to right), continuing after the strings
  // already in `vocabulary`, so several columns (origin and destination) and several files can share
  // one vocabulary. For airport codes, user ids kept as keys, and such.
  static CsvColumn Category(std::string name, std::vector<int32_t>* ids,
                            std::vector<std::string>* vocabulary);

  const std::string& name() const { return name_; }
  Type type() const { return type_; }

 private:
  friend class CsvColumnAccess;  // the reader, in csv_reader.cc
  using Output = std::variant<std::vector<int32_t>*, std::vector<int64_t>*, std::vector<float>*,
                              std::vector<double>*, std::vector<std::string>*>;
  CsvColumn(std::string name, Type type, Output out, std::vector<std::string>* vocabulary)
      : name_(std::move(name)), type_(type), out_(out), vocabulary_(vocabulary) {}

  std::string name_;
  Type type_;
  Output out_;                            // kCategory: the ids (std::vector<int32_t>*)
  std::vector<std::string>* vocabulary_;  // kCategory only, else null
};

struct CsvOptions {
  // Field separator. Default ','.
  char delimiter = ',';
  // Stop after this many records (not counting the header); -1 (the default) reads them all.
  int64_t max_rows = -1;
};

// The column names in the header line of `path`.
// Errors: kNotFound (no such file), other errno-derived codes for I/O failures, kInvalidArgument
// (empty file). Messages name the file.
absl::StatusOr<std::vector<std::string>> ReadCsvHeader(const std::string& path,
                                                       const CsvOptions& options = {});

// Reads `columns` of every record of `path`, appending to their output vectors; returns the number
// of records read. On error the output vectors hold an unspecified prefix of the data.
// Errors:
//   kNotFound: no such file (other I/O failures: the errno's code).
//   kInvalidArgument: a column not in the header (the message lists the header's columns), a
//     column asked for twice, one the header names twice, a null output vector, an empty file, a record with the wrong
//     number of fields, a badly quoted field, or a value that does not parse as the column's type. The
//     message names the file, the line number (1 = the header) and the column.
absl::StatusOr<int64_t> ReadCsv(const std::string& path, absl::Span<const CsvColumn> columns,
                                const CsvOptions& options = {});

}  // namespace data
}  // namespace pstrain

#endif  // PSTRAIN_MODELS_DATA_CSV_READER_H_
