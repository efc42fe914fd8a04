// Reads the prepared data sets (tools/fetch_data.sh) with the readers and prints what they hold and
// how long each read took. Usage: data_bench DATA_DIR   (e.g. `bazel run -c opt
// //models/data:data_bench -- $PWD/data`).
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "models/data/csv_reader.h"
#include "models/data/idx_reader.h"

namespace pstrain {
namespace data {
namespace {

absl::Status Flights(const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/flights/flights.csv");
  std::vector<std::string> date;
  std::vector<int32_t> delay, distance, origin, destination;
  std::vector<std::string> airports;
  const absl::Time start = absl::Now();
  absl::StatusOr<int64_t> rows =
      ReadCsv(path, {CsvColumn::String("date", &date), CsvColumn::Int32("delay", &delay),
                     CsvColumn::Int32("distance", &distance),
                     CsvColumn::Category("origin", &origin, &airports),
                     CsvColumn::Category("destination", &destination, &airports)});
  const absl::Duration elapsed = absl::Now() - start;
  if (!rows.ok()) return rows.status();
  int64_t late = 0;
  for (int32_t d : delay) late += d > 15;
  std::printf("%s: %lld rows, %zu airports, delay > 15: %.4f, first date '%s', read in %.3f s\n",
              path.c_str(), static_cast<long long>(*rows), airports.size(),
              static_cast<double>(late) / *rows, date.empty() ? "" : date[0].c_str(),
              absl::ToDoubleSeconds(elapsed));
  // The numeric columns alone (no string column).
  delay.clear();
  distance.clear();
  origin.clear();
  destination.clear();
  airports.clear();
  const absl::Time start2 = absl::Now();
  rows = ReadCsv(path, {CsvColumn::Int32("delay", &delay), CsvColumn::Int32("distance", &distance),
                        CsvColumn::Category("origin", &origin, &airports),
                        CsvColumn::Category("destination", &destination, &airports)});
  if (!rows.ok()) return rows.status();
  std::printf("%s: without the date column: read in %.3f s\n", path.c_str(),
              absl::ToDoubleSeconds(absl::Now() - start2));
  return absl::OkStatus();
}

absl::Status MovieLens(const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/movielens/ratings.csv");
  std::vector<int32_t> user, movie;
  std::vector<float> rating;
  std::vector<int64_t> timestamp;
  const absl::Time start = absl::Now();
  absl::StatusOr<int64_t> rows =
      ReadCsv(path, {CsvColumn::Int32("userId", &user), CsvColumn::Int32("movieId", &movie),
                     CsvColumn::Float("rating", &rating), CsvColumn::Int64("timestamp", &timestamp)});
  if (!rows.ok()) return rows.status();
  double sum = 0;
  for (float r : rating) sum += r;
  std::printf("%s: %lld rows, mean rating %.4f, read in %.3f s\n", path.c_str(),
              static_cast<long long>(*rows), sum / *rows, absl::ToDoubleSeconds(absl::Now() - start));
  return absl::OkStatus();
}

absl::Status FashionMnist(const std::string& dir) {
  for (const char* split : {"train", "t10k"}) {
    const std::string images_path = absl::StrCat(dir, "/fashion_mnist/", split, "-images-idx3-ubyte.gz");
    const std::string labels_path = absl::StrCat(dir, "/fashion_mnist/", split, "-labels-idx1-ubyte.gz");
    const absl::Time start = absl::Now();
    absl::StatusOr<IdxImages> images = ReadIdxImages(images_path);
    if (!images.ok()) return images.status();
    absl::StatusOr<std::vector<uint8_t>> labels = ReadIdxLabels(labels_path);
    if (!labels.ok()) return labels.status();
    const absl::Duration elapsed = absl::Now() - start;
    int counts[256] = {};
    for (uint8_t l : *labels) ++counts[l];
    std::printf("%s: %lld x %lld x %lld images, %zu labels (label 0: %d, label 9: %d), read in %.3f s\n",
                images_path.c_str(), static_cast<long long>(images->count),
                static_cast<long long>(images->rows), static_cast<long long>(images->cols),
                labels->size(), counts[0], counts[9], absl::ToDoubleSeconds(elapsed));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace data
}  // namespace pstrain

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DATA_DIR\n", argv[0]);
    return 2;
  }
  int failures = 0;
  for (auto* read : {&pstrain::data::Flights, &pstrain::data::MovieLens,
                     &pstrain::data::FashionMnist}) {
    const absl::Status status = read(argv[1]);
    if (!status.ok()) {
      std::fprintf(stderr, "error: %s\n", status.ToString().c_str());
      ++failures;
    }
  }
  return failures == 0 ? 0 : 1;
}
