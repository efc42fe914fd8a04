// The CSV reader (models/data/csv_reader.h, csv_records.h: plain or gzip, RFC 4180 quoting):
// the header, then up to four of its columns read as the types the input picks.
#include "models/data/csv_reader.h"
#include "tests/fuzz/fuzz_target.h"

namespace pstrain {

std::vector<std::string> FuzzSeeds() {
  auto with = [](uint8_t options, const std::string& file) {
    return FuzzInputBuilder().Byte(options).Bytes(file).str();
  };
  return {
      with(0x00, "a,b,c\n1,2.5,x\n-3,1e3,\"q,\"\"uote\"\n"),
      with(0x1b, "user;item;rating\n1;2;3.5\n4;5;nan\n"),
      with(0x42, "x\tcat\n1\tNA\n2\t\n"),
      // "a\n1\n" gzipped.
      with(0x00, std::string("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\x4b\xe4\x32\xe4\x02\x00"
                             "\x33\x2d\x8d\x5e\x04\x00\x00\x00",
                             24)),
  };
}

}  // namespace pstrain

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using pstrain::data::CsvColumn;
  pstrain::FuzzInput in(data, size);
  const uint8_t options = in.TakeByte();
  const std::string file = in.TakeRest();
  const std::string path = pstrain::WriteFuzzFile(
      "in.csv", reinterpret_cast<const uint8_t*>(file.data()), file.size());
  pstrain::data::CsvOptions csv;
  csv.delimiter = ",;\t|"[options & 3];
  if (options & 0x80) csv.max_rows = options & 0x0f;
  absl::StatusOr<std::vector<std::string>> header = pstrain::data::ReadCsvHeader(path, csv);
  if (!header.ok()) return 0;
  std::vector<int32_t> i32;
  std::vector<int64_t> i64;
  std::vector<float> f32;
  std::vector<double> f64;
  std::vector<std::string> strings, vocabulary;
  std::vector<int32_t> ids;
  std::vector<CsvColumn> columns;
  for (size_t c = 0; c < header->size() && c < 4; ++c) {
    const std::string& name = (*header)[c];
    switch ((options >> 2) + c) {  // a different type per column, shifted by the input
      case 0: columns.push_back(CsvColumn::Int32(name, &i32)); break;
      case 1: columns.push_back(CsvColumn::Int64(name, &i64)); break;
      case 2: columns.push_back(CsvColumn::Float(name, &f32)); break;
      case 3: columns.push_back(CsvColumn::Double(name, &f64)); break;
      case 4: columns.push_back(CsvColumn::String(name, &strings)); break;
      default: columns.push_back(CsvColumn::Category(name, &ids, &vocabulary)); break;
    }
  }
  (void)pstrain::data::ReadCsv(path, columns, csv);
  return 0;
}
