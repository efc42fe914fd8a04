#include "models/data/csv_reader.h"

#include <algorithm>
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
#include "models/data/csv_records.h"

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

// Reads the header record into `names`.
absl::Status ReadHeader(CsvRecordReader& reader, std::vector<std::string>* names) {
  ASSIGN_OR_RETURN(bool any, reader.Next());
  if (!any) {
    return absl::InvalidArgumentError(
        absl::StrCat(reader.path(), ": empty file, expected a header line"));
  }
  names->clear();
  for (absl::string_view f : reader.fields()) names->emplace_back(f);
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
  absl::Status Add(absl::string_view field, const CsvRecordReader& reader) {
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
                     const CsvRecordReader& reader, std::vector<T>* out) {
    T value;
    const std::from_chars_result result = std::from_chars(begin, end, value);
    if (result.ec == std::errc() && result.ptr == end && begin != end) {
      out->push_back(value);
      return absl::OkStatus();
    }
    const bool range = result.ec == std::errc::result_out_of_range;
    return absl::InvalidArgumentError(absl::StrCat(
        reader.path(), ":", reader.line(), ": column '", *name_, "': '",
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
  return ReadCsvHeaderRecord(path, options.delimiter);
}

absl::StatusOr<int64_t> ReadCsv(const std::string& path, absl::Span<const CsvColumn> columns,
                                const CsvOptions& options) {
  CsvRecordOptions record_options;
  record_options.delimiter = options.delimiter;
  ASSIGN_OR_RETURN(std::unique_ptr<CsvRecordReader> reader,
                   CsvRecordReader::Open(path, record_options));
  std::vector<std::string> header;
  RETURN_IF_ERROR(ReadHeader(*reader, &header));

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

  const size_t num_fields = header.size();
  int64_t rows = 0;
  while (options.max_rows < 0 || rows < options.max_rows) {
    ASSIGN_OR_RETURN(bool any, reader->Next());
    if (!any) break;
    if (reader->fields().size() != num_fields) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", reader->line(), ": ",
                                                     reader->fields().size(),
                                                     " fields, the header has ", num_fields));
    }
    for (size_t field = 0; field < num_fields; ++field) {
      if (sink_of_field[field] >= 0) {
        RETURN_IF_ERROR(sinks[sink_of_field[field]].Add(reader->field(field), *reader));
      }
    }
    ++rows;
  }
  return rows;
}

}  // namespace data
}  // namespace pstrain
