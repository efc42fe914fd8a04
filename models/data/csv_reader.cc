#include "models/data/csv_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <memory>
#include <system_error>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace pstrain {
namespace data {

CsvColumn CsvColumn::Int32(std::string name, std::vector<int32_t>* out) {
  return CsvColumn(std::move(name), Type::kInt32, out, nullptr);
}
CsvColumn CsvColumn::Int64(std::string name, std::vector<int64_t>* out) {
  return CsvColumn(std::move(name), Type::kInt64, out, nullptr);
}
CsvColumn CsvColumn::Float(std::string name, std::vector<float>* out) {
  return CsvColumn(std::move(name), Type::kFloat, out, nullptr);
}
CsvColumn CsvColumn::Double(std::string name, std::vector<double>* out) {
  return CsvColumn(std::move(name), Type::kDouble, out, nullptr);
}
CsvColumn CsvColumn::String(std::string name, std::vector<std::string>* out) {
  return CsvColumn(std::move(name), Type::kString, out, nullptr);
}
CsvColumn CsvColumn::Category(std::string name, std::vector<int32_t>* ids,
                              std::vector<std::string>* vocabulary) {
  return CsvColumn(std::move(name), Type::kCategory, ids, vocabulary);
}

namespace {

constexpr size_t kInitialBufferSize = size_t{1} << 22;  // grows for longer lines

// Reads a file in large blocks and hands out its lines. Not thread-safe.
class LineReader {
 public:
  explicit LineReader(std::string path) : path_(std::move(path)) {}
  ~LineReader() {
    if (fd_ >= 0) close(fd_);
  }
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  absl::Status Open() {
    fd_ = open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path_));
    // Advisory only: the read is correct without it.
    posix_fadvise(fd_, 0, 0, POSIX_FADV_SEQUENTIAL);
    capacity_ = kInitialBufferSize;
    buffer_ = std::make_unique<char[]>(capacity_);
    return absl::OkStatus();
  }

  // Sets `*line` to the next line, without its "\n" or "\r\n", valid until the next call. Returns
  // false at the end of the file or on a read error (then status() says which).
  bool Next(absl::string_view* line) {
    while (true) {
      const char* begin = buffer_.get() + begin_;
      const char* newline =
          static_cast<const char*>(std::memchr(begin, '\n', end_ - begin_));
      if (newline != nullptr) {
        begin_ = newline - buffer_.get() + 1;
        return Emit(begin, newline, line);
      }
      if (eof_) {
        if (begin_ == end_) return false;
        const char* end = buffer_.get() + end_;
        begin_ = end_;
        return Emit(begin, end, line);
      }
      if (!Fill()) return false;
    }
  }

  // 1-based number of the line Next() returned last.
  int64_t line_number() const { return line_number_; }
  const absl::Status& status() const { return status_; }
  const std::string& path() const { return path_; }

 private:
  bool Emit(const char* begin, const char* end, absl::string_view* line) {
    if (end > begin && end[-1] == '\r') --end;
    *line = absl::string_view(begin, end - begin);
    ++line_number_;
    return true;
  }

  // Moves the unread bytes to the front of the buffer (growing it if they fill it) and reads more.
  bool Fill() {
    const size_t unread = end_ - begin_;
    if (begin_ > 0) {
      std::memmove(buffer_.get(), buffer_.get() + begin_, unread);
      begin_ = 0;
      end_ = unread;
    }
    if (end_ == capacity_) {
      auto bigger = std::make_unique<char[]>(capacity_ * 2);
      std::memcpy(bigger.get(), buffer_.get(), end_);
      buffer_ = std::move(bigger);
      capacity_ *= 2;
    }
    while (true) {
      const ssize_t n = read(fd_, buffer_.get() + end_, capacity_ - end_);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        status_ = absl::ErrnoToStatus(errno, absl::StrCat("cannot read ", path_));
        return false;
      }
      if (n == 0) eof_ = true;
      end_ += n;
      return true;
    }
  }

  const std::string path_;
  int fd_ = -1;
  std::unique_ptr<char[]> buffer_;
  size_t capacity_ = 0;
  size_t begin_ = 0;  // first unread byte
  size_t end_ = 0;    // one past the last byte read
  bool eof_ = false;
  int64_t line_number_ = 0;
  absl::Status status_;
};

absl::Status QuotedFieldError(const LineReader& reader, absl::string_view column) {
  return absl::InvalidArgumentError(
      absl::StrCat(reader.path(), ":", reader.line_number(), ": column '", column,
                   "': quoted fields are not supported"));
}

// Reads the header line into `names`.
absl::Status ReadHeader(LineReader& reader, char delimiter, std::vector<std::string>* names) {
  absl::string_view line;
  if (!reader.Next(&line)) {
    RETURN_IF_ERROR(reader.status());
    return absl::InvalidArgumentError(
        absl::StrCat(reader.path(), ": empty file, expected a header line"));
  }
  if (absl::StartsWith(line, "\xEF\xBB\xBF")) line.remove_prefix(3);  // UTF-8 byte order mark
  names->clear();
  size_t start = 0;
  while (true) {
    const size_t end = std::min(line.find(delimiter, start), line.size());
    names->emplace_back(line.substr(start, end - start));
    if (!names->back().empty() && names->back()[0] == '"') {
      return QuotedFieldError(reader, names->back());
    }
    if (end == line.size()) break;
    start = end + 1;
  }
  return absl::OkStatus();
}

}  // namespace

// Parses fields into one column's output vector. The reader's access to CsvColumn's internals.
class CsvColumnAccess {
 public:
  // The string -> id maps of the category columns, one per vocabulary: columns that share a
  // vocabulary share its map.
  using IdMaps = absl::flat_hash_map<std::vector<std::string>*,
                                     std::unique_ptr<absl::flat_hash_map<std::string, int32_t>>>;

  static absl::StatusOr<CsvColumnAccess> Make(const CsvColumn& column, const std::string& path,
                                              IdMaps* id_maps) {
    CsvColumnAccess sink;
    sink.name_ = &column.name_;
    sink.type_ = column.type_;
    bool null = false;
    std::visit([&](auto* out) { null = out == nullptr; }, column.out_);
    if (null || (column.type_ == CsvColumn::Type::kCategory && column.vocabulary_ == nullptr)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": column '", column.name_, "' has a null output vector"));
    }
    switch (column.type_) {
      case CsvColumn::Type::kInt32:
        sink.int32_ = std::get<std::vector<int32_t>*>(column.out_);
        break;
      case CsvColumn::Type::kInt64:
        sink.int64_ = std::get<std::vector<int64_t>*>(column.out_);
        break;
      case CsvColumn::Type::kFloat:
        sink.float_ = std::get<std::vector<float>*>(column.out_);
        break;
      case CsvColumn::Type::kDouble:
        sink.double_ = std::get<std::vector<double>*>(column.out_);
        break;
      case CsvColumn::Type::kString:
        sink.string_ = std::get<std::vector<std::string>*>(column.out_);
        break;
      case CsvColumn::Type::kCategory:
        sink.int32_ = std::get<std::vector<int32_t>*>(column.out_);
        sink.vocabulary_ = column.vocabulary_;
        std::unique_ptr<absl::flat_hash_map<std::string, int32_t>>& ids =
            (*id_maps)[column.vocabulary_];
        if (ids == nullptr) {
          ids = std::make_unique<absl::flat_hash_map<std::string, int32_t>>();
          ids->reserve(sink.vocabulary_->size());
          for (size_t i = 0; i < sink.vocabulary_->size(); ++i) {
            ids->emplace((*sink.vocabulary_)[i], static_cast<int32_t>(i));
          }
        }
        sink.ids_ = ids.get();
        break;
    }
    return sink;
  }

  // Appends the value of `field`; on a bad value returns an error naming the line and column.
  absl::Status Add(absl::string_view field, const LineReader& reader) {
    const char* begin = field.data();
    const char* end = begin + field.size();
    switch (type_) {
      case CsvColumn::Type::kInt32:
        return Parse(begin, end, "an int32", reader, int32_);
      case CsvColumn::Type::kInt64:
        return Parse(begin, end, "an int64", reader, int64_);
      case CsvColumn::Type::kFloat:
        return Parse(begin, end, "a float", reader, float_);
      case CsvColumn::Type::kDouble:
        return Parse(begin, end, "a double", reader, double_);
      case CsvColumn::Type::kString:
        string_->emplace_back(field);
        return absl::OkStatus();
      case CsvColumn::Type::kCategory: {
        auto it = ids_->find(field);
        if (it == ids_->end()) {
          it = ids_->emplace(std::string(field), static_cast<int32_t>(vocabulary_->size())).first;
          vocabulary_->emplace_back(field);
        }
        int32_->push_back(it->second);
        return absl::OkStatus();
      }
    }
    return absl::InternalError("unknown column type");
  }

  const std::string& name() const { return *name_; }

 private:
  template <typename T>
  absl::Status Parse(const char* begin, const char* end, const char* what,
                     const LineReader& reader, std::vector<T>* out) {
    T value;
    const std::from_chars_result result = std::from_chars(begin, end, value);
    if (result.ec == std::errc() && result.ptr == end && begin != end) {
      out->push_back(value);
      return absl::OkStatus();
    }
    const bool range = result.ec == std::errc::result_out_of_range;
    return absl::InvalidArgumentError(absl::StrCat(
        reader.path(), ":", reader.line_number(), ": column '", *name_, "': '",
        absl::string_view(begin, end - begin), "' is ", range ? "out of range for " : "not ",
        what));
  }

  const std::string* name_ = nullptr;
  CsvColumn::Type type_ = CsvColumn::Type::kString;
  std::vector<int32_t>* int32_ = nullptr;  // kInt32 and kCategory
  std::vector<int64_t>* int64_ = nullptr;
  std::vector<float>* float_ = nullptr;
  std::vector<double>* double_ = nullptr;
  std::vector<std::string>* string_ = nullptr;
  std::vector<std::string>* vocabulary_ = nullptr;            // kCategory
  absl::flat_hash_map<std::string, int32_t>* ids_ = nullptr;  // kCategory: vocabulary_ inverted
};

absl::StatusOr<std::vector<std::string>> ReadCsvHeader(const std::string& path,
                                                       const CsvOptions& options) {
  LineReader reader(path);
  RETURN_IF_ERROR(reader.Open());
  std::vector<std::string> names;
  RETURN_IF_ERROR(ReadHeader(reader, options.delimiter, &names));
  return names;
}

absl::StatusOr<int64_t> ReadCsv(const std::string& path, absl::Span<const CsvColumn> columns,
                                const CsvOptions& options) {
  LineReader reader(path);
  RETURN_IF_ERROR(reader.Open());
  std::vector<std::string> header;
  RETURN_IF_ERROR(ReadHeader(reader, options.delimiter, &header));

  // sink_of_field[i]: index into `sinks` of the column read from field i, or -1.
  std::vector<CsvColumnAccess> sinks;
  CsvColumnAccess::IdMaps id_maps;
  std::vector<int> sink_of_field(header.size(), -1);
  for (const CsvColumn& column : columns) {
    int field = -1;
    for (size_t i = 0; i < header.size(); ++i) {
      if (header[i] != column.name()) continue;
      if (field >= 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ": the header names column '", column.name(), "' twice (fields ", field + 1,
            " and ", i + 1, ")"));
      }
      field = static_cast<int>(i);
    }
    if (field < 0) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": no column '", column.name(),
                                                     "' (columns: ", absl::StrJoin(header, ", "),
                                                     ")"));
    }
    if (sink_of_field[field] >= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": column '", column.name(), "' asked for twice"));
    }
    ASSIGN_OR_RETURN(CsvColumnAccess sink, CsvColumnAccess::Make(column, path, &id_maps));
    sink_of_field[field] = static_cast<int>(sinks.size());
    sinks.push_back(std::move(sink));
  }

  const char delimiter = options.delimiter;
  const size_t num_fields = header.size();
  int64_t rows = 0;
  absl::string_view line;
  while ((options.max_rows < 0 || rows < options.max_rows) && reader.Next(&line)) {
    if (line.empty()) continue;
    const char* p = line.data();
    const char* const end = p + line.size();
    size_t field = 0;
    while (true) {
      const char* next = static_cast<const char*>(std::memchr(p, delimiter, end - p));
      if (next == nullptr) next = end;
      if (p != next && *p == '"') {
        return QuotedFieldError(reader, field < num_fields ? header[field] : "(extra)");
      }
      if (field < num_fields && sink_of_field[field] >= 0) {
        RETURN_IF_ERROR(sinks[sink_of_field[field]].Add(absl::string_view(p, next - p), reader));
      }
      ++field;
      if (next == end) break;
      p = next + 1;
    }
    if (field != num_fields) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", reader.line_number(), ": ", field,
                                                     " fields, the header has ", num_fields));
    }
    ++rows;
  }
  RETURN_IF_ERROR(reader.status());
  return rows;
}

}  // namespace data
}  // namespace pstrain
