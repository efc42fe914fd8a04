// Predicts a CSV file with an exported model (serving/predictor.h), no cluster:
//
//   bazel run //serving:predict -- --model_dir=models/flights_ctr/1 --data=FILE.csv [--out=FILE]
//
// The CSV's header names the columns (the training file's names; columns the model doesn't use,
// the label included, are ignored). Writes one CSV line per record, "row,<output>,..." (row
// counting records from 0; outputs as Predictor::outputs() names them), to --out or stdout; a
// summary line (rows, seconds, the cache's hit rate) to stderr. Exit code 2 with a one-line error
// naming what was wrong (a missing column, a bad value with its line, a corrupt model).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/byte_size.h"
#include "common/logging.h"
#include "models/data/csv_records.h"
#include "serving/predictor.h"

ABSL_FLAG(std::string, model_dir, "", "The exported model's directory.");
ABSL_FLAG(std::string, data, "", "The CSV file (plain or gzip) to predict.");
ABSL_FLAG(std::string, out, "", "Where to write the predictions (default: stdout).");
ABSL_FLAG(std::string, cache_bytes, "256M",
          "Memory for table rows (bytes, or with K, M, G; -1: every row in memory).");
ABSL_FLAG(int64_t, batch, 4096, "Examples per Predict call.");

namespace pstrain {
namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return 2;
}

int Run() {
  if (absl::GetFlag(FLAGS_model_dir).empty() || absl::GetFlag(FLAGS_data).empty()) {
    return Fail("--model_dir and --data are required");
  }
  PredictorOptions options;
  const std::string cache = absl::GetFlag(FLAGS_cache_bytes);
  if (cache == "-1") {
    options.store.cache_bytes = -1;
  } else {
    absl::StatusOr<int64_t> bytes = ParseByteSize(cache);
    if (!bytes.ok()) return Fail(absl::StrCat("--cache_bytes: ", bytes.status().message()));
    options.store.cache_bytes = *bytes;
  }
  const int64_t batch_size = absl::GetFlag(FLAGS_batch);
  if (batch_size < 1) return Fail("--batch must be at least 1");
  absl::StatusOr<std::unique_ptr<Predictor>> predictor =
      Predictor::Load(absl::GetFlag(FLAGS_model_dir), options);
  if (!predictor.ok()) return Fail(std::string(predictor.status().message()));
  absl::StatusOr<std::unique_ptr<data::CsvRecordReader>> reader =
      data::CsvRecordReader::Open(absl::GetFlag(FLAGS_data));
  if (!reader.ok()) return Fail(std::string(reader.status().message()));
  FILE* out = stdout;
  if (!absl::GetFlag(FLAGS_out).empty()) {
    out = std::fopen(absl::GetFlag(FLAGS_out).c_str(), "w");
    if (out == nullptr) return Fail(absl::StrCat("can't write ", absl::GetFlag(FLAGS_out)));
  }
  RawExamples examples;
  absl::StatusOr<bool> got = (*reader)->Next();
  if (!got.ok()) return Fail(std::string(got.status().message()));
  if (!*got) return Fail(absl::StrCat(absl::GetFlag(FLAGS_data), " is empty (no header)"));
  for (absl::string_view f : (*reader)->fields()) examples.columns.emplace_back(f);
  std::fprintf(out, "row");
  for (const std::string& o : (*predictor)->outputs()) std::fprintf(out, ",%s", o.c_str());
  std::fprintf(out, "\n");
  const absl::Time start = absl::Now();
  int64_t row = 0;
  std::vector<int64_t> lines;
  std::vector<float> predictions;
  auto flush = [&]() -> absl::Status {
    if (examples.rows.empty()) return absl::OkStatus();
    absl::Status s = (*predictor)->Predict(examples, &predictions);
    if (!s.ok()) {
      // Name the file's line: the message says "row i" within the batch.
      return absl::Status(s.code(), absl::StrCat(absl::GetFlag(FLAGS_data), " (lines ",
                                                 lines.front(), "-", lines.back(), "): ",
                                                 s.message()));
    }
    const size_t k = (*predictor)->outputs().size();
    for (size_t i = 0; i < examples.rows.size(); ++i, ++row) {
      std::fprintf(out, "%lld", static_cast<long long>(row));
      for (size_t j = 0; j < k; ++j) std::fprintf(out, ",%.9g", predictions[i * k + j]);
      std::fprintf(out, "\n");
    }
    examples.rows.clear();
    lines.clear();
    return absl::OkStatus();
  };
  for (;;) {
    got = (*reader)->Next();
    if (!got.ok()) return Fail(std::string(got.status().message()));
    if (!*got) break;
    std::vector<std::string>& fields = examples.rows.emplace_back();
    for (absl::string_view f : (*reader)->fields()) fields.emplace_back(f);
    lines.push_back((*reader)->line());
    if (static_cast<int64_t>(examples.rows.size()) >= batch_size) {
      if (absl::Status s = flush(); !s.ok()) return Fail(std::string(s.message()));
    }
  }
  if (absl::Status s = flush(); !s.ok()) return Fail(std::string(s.message()));
  if (out != stdout) std::fclose(out);
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  const CacheStats cache_stats = (*predictor)->cache_stats();
  std::fprintf(stderr, "%s\n",
               absl::StrFormat("{\"rows\": %d, \"seconds\": %.3f, \"examples_per_s\": %.0f, "
                               "\"cache_hit_rate\": %.4f, \"cache_rows\": %d}",
                               row, seconds, seconds > 0 ? row / seconds : 0.0,
                               cache_stats.hit_rate(), cache_stats.rows)
                   .c_str());
  return 0;
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  pstrain::InstallFailureSignalHandler(argv[0]);
  absl::SetProgramUsageMessage(
      "Predicts a CSV file with an exported model.\n"
      "Usage: predict --model_dir=MODEL_DIR --data=FILE.csv [--out=FILE] [--cache_bytes=256M]");
  absl::ParseCommandLine(argc, argv);
  pstrain::SetMinLogLevelFromEnv();
  if (const char* dir = std::getenv("BUILD_WORKING_DIRECTORY"); dir != nullptr && *dir != '\0') {
    if (::chdir(dir) != 0) std::fprintf(stderr, "warning: can't chdir to %s\n", dir);
  }
  return pstrain::Run();
}
